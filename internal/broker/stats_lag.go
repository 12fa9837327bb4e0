package broker

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Consumer-group lag for metrics. It is computed away from the scrape,
// by one goroutine of internal/metrics, and bounded three ways: the
// groups reported, the bytes read and the time taken. Each topic's read
// plans and each range's end are worked out once per computation, not
// once per group, and nothing is read from another node: a group whose
// oldest unread record lies in a segment this node has no complete copy
// of gets no age.

// LagBudget bounds one GroupLags computation.
type LagBudget struct {
	// MaxGroups is how many groups are reported, by topic then group
	// name; 0 reports none.
	MaxGroups int
	// Bytes bounds what is read from local segment copies to date the
	// oldest unread records. A read begins only while some is left, so
	// one computation reads at most Bytes plus one batch.
	Bytes int
	// Time, by the broker's clock, stops the computation; 0: no bound
	// but ctx's.
	Time time.Duration
}

// GroupLag is a consumer group's distance behind the end of a topic.
type GroupLag struct {
	Topic, Group string
	// Records is the number of records after the committed position.
	Records uint64
	// OldestMs is the producer timestamp (unix ms) of the first record of
	// the batch holding the group's position in its oldest unread source:
	// the oldest record the group has yet to read, or one a batch older.
	// Valid when AgeKnown.
	OldestMs int64
	// AgeKnown is false when the group lags and the batch could not be
	// read here: no local copy, a failed read, or the byte budget spent.
	AgeKnown bool
	// Exact is false when part of the record count was estimated: the
	// records of split or merged ranges' ancestors are shared by key and
	// estimated by the range's share of the keyspace, and a range whose
	// end could not be learned counts to its active segment's base.
	Exact bool
}

// LagReport is one GroupLags computation.
type LagReport struct {
	Lags []GroupLag
	// More says groups past MaxGroups were left out.
	More bool
	// Cut says the deadline or ctx stopped the computation: the groups
	// not reached are missing.
	Cut bool
	// BytesRead is what the computation read from segment copies.
	BytesRead int
}

// GroupLags reports the lag of the committed groups of the topics whose
// metadata this node leads (every topic on a single node), so each group
// is reported by one node of a cluster.
func (b *Broker) GroupLags(ctx context.Context, bg LagBudget) LagReport {
	type tg struct {
		topic   string
		topicID uint64
		groups  []string
	}
	led := b.ledViews()
	var todo []tg
	_ = b.plane.ViewEach(func(g uint64, st *metadata.State) {
		if !led[g] {
			return
		}
		for _, t := range st.Topics() {
			if gs := st.Groups(t.ID); len(gs) > 0 {
				todo = append(todo, tg{t.Name, t.ID, slices.Clone(gs)})
			}
		}
	})
	slices.SortFunc(todo, func(x, y tg) int { return cmp.Compare(x.topic, y.topic) })
	w := lagWalk{b: b, ctx: ctx, bg: bg, dated: map[lagBatchKey]int64{}}
	if bg.Time > 0 {
		w.deadline = b.cfg.Clock.Now().Add(bg.Time)
	}
	var rep LagReport
	for _, t := range todo {
		slices.Sort(t.groups)
		if w.stopped() {
			rep.Cut = true
			break
		}
		lags, full := w.topic(t.topicID, t.groups, bg.MaxGroups-len(rep.Lags))
		for i := range lags {
			lags[i].Topic = t.topic
		}
		rep.Lags = append(rep.Lags, lags...)
		if full {
			rep.More = true
			break
		}
		if w.cut {
			rep.Cut = true
			break
		}
	}
	rep.BytesRead = w.read
	return rep
}

// lagWalk is one GroupLags computation's state.
type lagWalk struct {
	b    *Broker
	ctx  context.Context
	bg   LagBudget
	read int
	cut  bool
	// deadline is when Time runs out; zero: never.
	deadline time.Time
	// dated caches the first timestamp of the batches read, so groups at
	// the same position cost one read.
	dated map[lagBatchKey]int64
}

type lagBatchKey struct{ seg, offset uint64 }

// maxDated bounds the cache of dated batches of one computation.
const maxDated = 1 << 14

func (w *lagWalk) stopped() bool {
	if w.cut {
		return true
	}
	if w.ctx.Err() != nil || !w.deadline.IsZero() && !w.b.cfg.Clock.Now().Before(w.deadline) {
		w.cut = true
	}
	return w.cut
}

// topicEnds is what a topic's groups share: its plans, and each source's
// end (estimated says it could not be learned).
type topicEnds struct {
	plans []plan
	lin   lineage
	ends  [][]uint64
	exact [][]bool
}

// topic reports the lag of up to room of groups of one topic; full says
// some were left out for room.
func (w *lagWalk) topic(topicID uint64, groups []string, room int) (lags []GroupLag, full bool) {
	te := topicEnds{}
	te.plans, te.lin = w.b.plans(position{topicID: topicID})
	for i := range te.plans {
		p := &te.plans[i]
		ends, exact := make([]uint64, len(p.sources)), make([]bool, len(p.sources))
		for j := range p.sources {
			if w.stopped() {
				return nil, false
			}
			ends[j], exact[j] = w.end(&p.sources[j])
		}
		te.ends, te.exact = append(te.ends, ends), append(te.exact, exact)
	}
	for _, g := range groups {
		if len(lags) >= room {
			return lags, true
		}
		if w.stopped() {
			return lags, false
		}
		var entries []cursor.Entry
		_ = w.b.plane.ViewTopic(topicID, func(ms *metadata.State) {
			entries = toCursorEntries(ms.GroupEntries(g, topicID))
		})
		lags = append(lags, w.group(&te, g, entries))
	}
	return lags, false
}

// end is a source's durable end, asked of the node writing it when that
// is another (a small call, not a read). When it cannot be learned the
// active segment's base stands in.
func (w *lagWalk) end(src *source) (uint64, bool) {
	end, err := w.b.durableEndOf(w.ctx, src)
	if err != nil {
		return src.segments[len(src.segments)-1].Base, false
	}
	return end, true
}

func (w *lagWalk) group(te *topicEnds, group string, entries []cursor.Entry) GroupLag {
	out := GroupLag{Group: group, Exact: true, AgeKnown: true}
	var noScan int
	for i := range te.plans {
		p := &te.plans[i]
		bits := p.slice.Log2Size()
		dated := false
		for j := range p.sources {
			src := &p.sources[j]
			start, done := cursor.Start(entries, src.id, p.slice.Start, bits, sourceBase(src), te.lin.isAncestor)
			end := te.ends[i][j]
			if done || end <= start {
				continue
			}
			out.Exact = out.Exact && te.exact[i][j]
			if src.id == p.rangeID {
				out.Records += end - start
			} else {
				// With no records to scan, countUnread estimates by
				// the slice's share of the ancestor's keyspace.
				n, _ := w.b.countUnread(p, src, entries, te.lin, start, end, &noScan)
				out.Records += n
				out.Exact = false
			}
			if !dated {
				// The first source not yet read holds the range's
				// oldest unread record.
				dated = true
				w.date(&out, src, start, end)
			}
		}
	}
	if out.Records == 0 {
		out.OldestMs, out.AgeKnown = 0, true
	}
	return out
}

// date lowers out.OldestMs to the first timestamp of the batch holding
// start in src, read from this node's copy; without one, or once the
// byte budget is spent, the age is unknown.
func (w *lagWalk) date(out *GroupLag, src *source, start, end uint64) {
	ts, ok := w.batchTime(src, start, end)
	if !ok {
		out.AgeKnown = false
		return
	}
	if out.OldestMs == 0 || ts < out.OldestMs {
		out.OldestMs = ts
	}
}

func (w *lagWalk) batchTime(src *source, start, end uint64) (int64, bool) {
	i := slices.IndexFunc(src.segments, func(s metadata.Segment) bool {
		return start >= s.Base && (s.Active || start < s.End)
	})
	if i < 0 {
		return 0, false
	}
	seg := src.segments[i]
	key := lagBatchKey{seg.ID, start}
	if ts, ok := w.dated[key]; ok {
		return ts, true
	}
	if w.read >= w.bg.Bytes || w.stopped() || !w.b.holds(seg) || !w.b.copyComplete(seg) {
		return 0, false
	}
	bound, ok := w.b.readBound(seg, end)
	if !ok {
		return 0, false
	}
	// maxBytes 1: the store answers the first batch whole and no more.
	buf, _, err := w.b.store.Read(storage.SegmentID(seg.ID), start, 1, bound)
	w.read += len(buf)
	if err != nil || len(buf) == 0 {
		return 0, false
	}
	h, err := segment.ParseHeader(buf)
	if err != nil {
		return 0, false
	}
	if len(w.dated) < maxDated {
		w.dated[key] = h.FirstTimestamp
	}
	return h.FirstTimestamp, true
}
