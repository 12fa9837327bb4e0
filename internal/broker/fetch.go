package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// FetchRequest asks for the next page of a topic. Precedence follows wire
// v1: Group+Member (a group member reading its assigned ranges), else
// Cursor (nil = from the start), else Group (its committed position).
type FetchRequest struct {
	Topic  string
	Cursor *string
	Group  *string
	Member *string
	// Max bounds the records of the page (clamped by the caller).
	Max int
	// Wait holds an empty fetch until a record arrives or Wait passes.
	Wait time.Duration
	// Identity is the requester. A group its member creates is charged to
	// it (Limits.MaxGroupsPerUser); the zero Identity is the node's own
	// request and is not accounted.
	Identity Identity
}

// Page is one fetch answer.
type Page struct {
	Records []Record
	// Batches holds a v2 subscription's page instead of Records.
	Batches []RangeBatch
	// Cursor is the position to pass back; nil only for an unknown topic
	// fetched without a cursor.
	Cursor *string
	// Skipped counts records retention deleted before this reader read
	// them, which the page's cursor has now passed (reported once);
	// SkippedBound says the count is an upper bound. Records dropped
	// because their TTL passed never count.
	Skipped      uint64
	SkippedBound bool
	// hold keeps the pooled buffers Batches lie in (Release).
	hold *readHold
}

// Fetch returns the next page of a topic for the request's position.
func (b *Broker) Fetch(ctx context.Context, req FetchRequest) (Page, error) {
	var (
		recs []Record
		sk   skips
	)
	pos, err := b.poll(ctx, req, func(pos *position, at seen) (bool, error) {
		before := pos.entries
		defer func() { sk.add(b.skipsBetween(pos.topicID, before, pos.entries)) }()
		if !at.woke {
			var (
				cut bool
				err error
			)
			recs, *pos, cut, err = b.readPage(ctx, *pos, req.Max, at)
			return len(recs) > 0 || cut, err
		}
		page, after, err := at.w.readShared(at, pageKey(pageRecords, *pos, req.Max, 0), func() (any, position, int, error) {
			recs, after, cut, err := b.readPage(ctx, *pos, req.Max, at)
			return cutPage[Record]{recs, cut, nil}, after, recordsSize(recs), err
		})
		res, _ := page.(cutPage[Record])
		recs, *pos = res.items, after
		return len(recs) > 0 || res.cut, err
	})
	if errors.Is(err, metadata.ErrNoSuchTopic) {
		// Wire v1: fetching an unknown topic answers an empty page.
		return Page{Cursor: req.Cursor}, nil
	}
	if err != nil && pos.topicID == 0 {
		return Page{}, err
	}
	page := b.page(pos, recs)
	b.keepCursor(req, pos, page.Cursor)
	page.Skipped, page.SkippedBound = sk.n, sk.bound
	return page, err
}

// poll resolves the request's position and calls read until it finds
// something, the request's wait passes, the node closes or ctx ends. read
// advances pos.entries; at is the topic's watch as taken before the read.
// On ctx's end it returns the position reached with ctx's error; on other
// errors the zero position. A read answering errEndUnknown found nothing
// yet: the poll waits on, and answers that error if it ends so.
func (b *Broker) poll(ctx context.Context, req FetchRequest, read func(pos *position, at seen) (bool, error)) (position, error) {
	pos, err := b.startPosition(req)
	if err != nil {
		return position{}, err
	}
	wait := min(req.Wait, b.cfg.LongPollMax)
	deadline := b.cfg.Clock.Now().Add(wait)
	w := b.watchFor(pos.topicID)
	var (
		herd   uint64 // the fire whose herd this reader is in
		inHerd bool
	)
	for {
		woken, at := w.waitGen()
		at.woke = inHerd
		_, span := b.cfg.Tracer.Start(ctx, tracing.SpanRead, trace.SpanKindInternal)
		found, err := read(&pos, at)
		if span.IsRecording() {
			span.SetAttributes(tracing.AttrTopic.String(req.Topic), attribute.Bool("malachi.found", found))
		}
		tracing.End(span, err)
		if inHerd {
			w.herdRead(herd)
			inHerd = false
		}
		// An empty page with a range whose end is unknown is waited on
		// like one at the end (a failover's seal fires the watch), and
		// answers errEndUnknown if the wait passes so, never "nothing
		// new". A scan bound that moved the cursor reads on at once.
		unknown := errors.Is(err, errEndUnknown)
		if err != nil && !unknown {
			return position{}, err
		}
		remaining := deadline.Sub(b.cfg.Clock.Now())
		switch {
		case unknown && (remaining <= 0 || b.closed.Load()):
			return position{}, err
		case unknown && found:
			continue
		case found || remaining <= 0 || b.closed.Load():
			return pos, nil
		}
		t := b.cfg.Clock.NewTimer(remaining)
		asleep := b.pollSleeping(w, pos.topicID)
		select {
		case <-woken:
			t.Stop()
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			if herd, in := asleep.wake(); in {
				w.herdRead(herd) // it will not read
			}
			return pos, ctx.Err()
		}
		herd, inHerd = asleep.wake()
	}
}

func (b *Broker) page(pos position, recs []Record) Page {
	s := cursor.Encode(b.secret, cursor.Cursor{TopicID: pos.topicID, Entries: pos.entries, Resume: pos.resume})
	return Page{Records: recs, Cursor: &s}
}

// keepCursor puts a page's cursor in the cache when its reader goes on
// from it: one that read by cursor (or from the start), a group named
// beside the cursor or not. A group member, or a reader of a group's
// position, reads from the group's position again, and a subscription's
// pushes carry cursors for acks, which are decoded.
func (b *Broker) keepCursor(req FetchRequest, pos position, text *string) {
	byGroup := req.Group != nil && (req.Member != nil || req.Cursor == nil)
	if !byGroup && text != nil {
		b.cursors.put(*text, cursor.Cursor{TopicID: pos.topicID, Entries: pos.entries, Resume: pos.resume})
	}
}

// decodeCursor returns a reader's cursor: from the cache of those this
// node handed out, else decoded.
func (b *Broker) decodeCursor(topicID uint64, text string) (cursor.Cursor, error) {
	if c, ok := b.cursors.take(topicID, text); ok {
		return c, nil
	}
	c, err := cursor.Decode(b.secret, topicID, text)
	if err != nil {
		return cursor.Cursor{}, ErrInvalidCursor
	}
	return c, nil
}

// position is where a reader stands: the topic, the cursor entries, and
// which active ranges it reads (nil = all of them). resume, when not 0,
// is the range its next page starts at (pageRead.fill), carried in its
// cursor.
type position struct {
	topicID uint64
	entries []cursor.Entry
	only    []uint64
	resume  uint64
}

// own is pos with entries of its own, for a reader given a page another
// read (readShared).
func (pos position) own() position {
	pos.entries = slices.Clone(pos.entries)
	return pos
}

// startPosition resolves where a request reads from. A group member's
// poll runs after the metadata view is released: joining may wait for an
// assignment to be computed, and metadata commits must not wait on that.
func (b *Broker) startPosition(req FetchRequest) (position, error) {
	var (
		pos    position
		ranges []uint64
		err    error
	)
	member := req.Group != nil && req.Member != nil
	err = metadata.ErrNoSuchTopic
	_ = b.plane.ViewTopicName(req.Topic, func(st *metadata.State) {
		t, ok := st.TopicHeader(req.Topic)
		if !ok {
			return
		}
		err = nil
		pos.topicID = t.ID
		switch {
		case member:
			pos.entries = toCursorEntries(st.GroupEntries(*req.Group, t.ID))
			ranges = activeIDs(st, t.ID)
		case req.Cursor == nil && req.Group != nil:
			pos.entries = toCursorEntries(st.GroupEntries(*req.Group, t.ID))
		}
	})
	// A cursor is decoded outside the view: at a thousand ranges that
	// takes tens of microseconds, which the metadata's writers need not
	// wait for.
	if err == nil && !member && req.Cursor != nil {
		var c cursor.Cursor
		c, err = b.decodeCursor(pos.topicID, *req.Cursor)
		pos.entries, pos.resume = c.Entries, c.Resume
	}
	var committed []cursor.Entry
	if err == nil && member {
		pos.only, committed, err = b.pollMember(pos.topicID, *req.Group, *req.Member, groupOwner(req.Identity), ranges)
	}
	if err == nil && member {
		// Read the committed position again now: a range handed over by
		// this poll was released when its old holder polled, after that
		// holder committed what it read, which may be after the read above.
		// In a cluster this node's replica of the topic's vnode may not
		// have applied that commit yet; the coordinator, the vnode's
		// leader, has, and answered it (committed). Merging never moves a
		// position back, so whichever is ahead wins.
		_ = b.plane.ViewTopic(pos.topicID, func(st *metadata.State) {
			pos.entries = toCursorEntries(st.GroupEntries(*req.Group, pos.topicID))
		})
		pos.entries = cursor.Merge(pos.entries, committed)
	}
	return pos, err
}

func activeIDs(st *metadata.State, topicID uint64) []uint64 {
	ranges := st.ActiveRanges(topicID)
	ids := make([]uint64, len(ranges))
	for i, r := range ranges {
		ids[i] = r.ID
	}
	return ids
}

// source is one range in a reader's history, copied out of the metadata
// so the disk reads run without holding the metadata lock.
type source struct {
	id       uint64
	span     keyspace.Span
	active   bool
	segments []metadata.Segment
	// trimmed is the range's metadata.Range.Trimmed when the plan was
	// taken: every offset below it was deleted, so a reader left below it
	// with no segment to read moves up to it (and is told of the skip)
	// rather than waiting for the next record to arrive.
	trimmed uint64
}

// plan is how to read one active range: its ancestors oldest first (each
// filtered to the range's key slice), then the range itself.
type plan struct {
	rangeID uint64
	slice   keyspace.Span
	bits    uint8 // the topic's keyspace bits
	sources []source
	// lineage is every ancestor, then the range: the sources whose
	// entries can speak for the slice. It is more than sources, which
	// leave out ancestors that never held a key of the slice: an entry of
	// such an ancestor made while reading a merged range carries the
	// merged range's slice, and marks that slice's older sources done.
	lineage []uint64
}

// lineage answers ancestor questions for the cursor helpers.
type lineage map[uint64]map[uint64]bool // desc -> set of ancestors

func (l lineage) isAncestor(anc, desc uint64) bool { return l[desc][anc] }

// plans copies what readPage needs from the metadata.
func (b *Broker) plans(pos position) ([]plan, lineage) {
	var (
		plans []plan
		lin   = lineage{}
	)
	_ = b.plane.ViewTopic(pos.topicID, func(st *metadata.State) {
		t, ok := st.TopicByID(pos.topicID)
		if !ok {
			return
		}
		for _, rid := range t.Ranges {
			if r, ok := st.Range(rid); ok {
				set := make(map[uint64]bool, len(r.Lineage))
				for _, a := range r.Lineage {
					set[a] = true
				}
				lin[rid] = set
			}
		}
		for _, r := range st.ActiveRanges(t.ID) {
			if pos.only != nil && !contains(pos.only, r.ID) {
				continue
			}
			p := plan{rangeID: r.ID, slice: keyspace.Span{Start: r.Start, End: r.End}, bits: t.Bits}
			p.lineage = append(append([]uint64(nil), r.Lineage...), r.ID)
			for _, sid := range p.lineage {
				sr, _ := st.Range(sid)
				if !p.slice.Overlaps(keyspace.Span{Start: sr.Start, End: sr.End}) {
					continue // an ancestor of an ancestor that never held these keys
				}
				p.sources = append(p.sources, source{
					id:       sid,
					span:     keyspace.Span{Start: sr.Start, End: sr.End},
					active:   sr.Active,
					segments: st.RangeSegments(sid),
					trimmed:  sr.Trimmed,
				})
			}
			plans = append(plans, p)
		}
	})
	return plans, lin
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// budget bounds one page, or one range's share of it.
type budget struct {
	records int
	bytes   int
	// For whole batches (wire v2): firstBytes lets a range's first batch
	// of the page pass bytes when it fits that much; hardRecords, when
	// set, is what the whole page may still hold, so a batch that would
	// pass it is cut; took says a batch was taken; full says the next
	// batch did not fit.
	firstBytes  int
	hardRecords int
	taken       int // records taken against hardRecords
	took, full  bool
}

func (bg *budget) spent() bool { return bg.records <= 0 || bg.bytes <= 0 || bg.full }

// hard is the most records the next batch may add to the page.
func (bg *budget) hard() int {
	if bg.hardRecords > 0 {
		return bg.hardRecords - bg.taken
	}
	return max(bg.records, 1)
}

// readPage reads up to maxRecords records across the reader's ranges (see
// pageRead.fill): each range visited gets an equal share of the page, so
// one busy range cannot starve the others, and a page over many ranges
// still reads in large pieces. A page that holds nothing while a range
// stopped for want of a known end answers errEndUnknown with the entries
// it reached (a scan bound may have moved them).
func (b *Broker) readPage(ctx context.Context, pos position, maxRecords int, at seen) ([]Record, position, bool, error) {
	pr, plans, first := b.startPage(ctx, pos, at)
	if len(plans) == 0 {
		return nil, pos, false, nil
	}
	total := &budget{records: maxRecords, bytes: b.cfg.FetchMaxBytes}
	each := share(maxRecords, len(plans), pr.carried)
	var out []Record
	err := pr.fill(plans, first, func() bool { return total.spent() || pr.cut }, func(p *plan, pass int) (walkEnd, error) {
		quota := total.records
		if pass == 0 {
			quota = min(each, total.records)
		}
		bg := &budget{records: quota, bytes: total.bytes}
		var (
			end walkEnd
			err error
		)
		out, end, err = walkRange(pr, p, bg, out, b.readSource)
		total.records -= quota - bg.records
		total.bytes = bg.bytes
		return end, err
	})
	if err != nil {
		return nil, pos, false, err
	}
	return out, pr.after(pos), pr.cut, pr.endUnknown(len(out))
}

// readSize sizes one store read to the records the page still wants (a
// few hundred bytes each), so a small page does not read, zero and
// collect a megabyte. The first batch is returned whole regardless.
func readSize(bg *budget) int {
	return min(max(bg.records*256, 16<<10), bg.bytes, 1<<20)
}

func sourceBase(src *source) uint64 {
	if len(src.segments) == 0 {
		return 0
	}
	return src.segments[0].Base
}

// readSource reads src from start, keeping the records that belong to the
// plan's slice and were not delivered yet. It returns the offset below
// which everything of src in the slice is now delivered, and whether src
// is exhausted (sealed and read to its end).
func (b *Broker) readSource(pr *pageRead, p *plan, src *source, entries []cursor.Entry, start uint64, bg *budget, out []Record) (uint64, bool, []Record, error) {
	self := src.id == p.rangeID
	lin := pr.lin
	for _, seg := range src.segments {
		if !seg.Active && seg.End <= start {
			continue
		}
		if start < seg.Base {
			start = seg.Base // a hole: retention or compaction removed it
		}
		for !bg.spent() {
			buf, next, err := b.readSegment(pr.ctx, seg, start, readSize(bg), ^uint64(0))
			switch {
			case seg.Active && errors.Is(err, storage.ErrNotFound):
				// Registered in the metadata a moment before its file is
				// created: nothing in it can be durable yet.
				return start, false, out, nil
			case errors.Is(err, storage.ErrNotFound):
				return start, false, out, segmentGone(seg.ID, err)
			case err != nil:
				return start, false, out, readFailed(seg.ID, err)
			}
			if len(buf) == 0 {
				break
			}
			var stopped bool
			out, start, stopped, err = b.filterBatches(p, src, self, entries, lin, buf, next, pr.now, bg, out)
			if err != nil {
				return start, false, out, err
			}
			if stopped || pr.scanned(len(buf), bg) {
				return start, false, out, nil
			}
		}
		if bg.spent() {
			return start, false, out, nil
		}
		if seg.Active {
			return start, false, out, nil
		}
		start = max(start, seg.End)
	}
	return max(start, src.trimmed), !src.active, out, nil
}

// filterBatches decodes the batches of one read and appends the records
// the reader should see: those of its slice, not yet delivered, and not
// expired at nowMs (a batch whose every record has expired is passed over
// without decoding it). It stops mid-batch when the budget runs out and
// then returns the offset of the first record not delivered.
func (b *Broker) filterBatches(p *plan, src *source, self bool, entries []cursor.Entry, lin lineage, buf []byte, next uint64, nowMs int64, bg *budget, out []Record) ([]Record, uint64, bool, error) {
	batches, err := segment.SplitBatches(buf)
	if err != nil {
		return out, 0, false, err
	}
	var recs []Record
	for _, batch := range batches {
		if h, err := segment.ParseHeader(batch); err == nil && h.HasExpiry() && h.MaxExpiry != 0 && h.MaxExpiry <= nowMs {
			b.stats.ttlFiltered.Add(uint64(h.RecordCount))
			continue
		}
		recs, err = segment.DecodeRecords(batch, recs[:0])
		if err != nil {
			return out, 0, false, fmt.Errorf("broker: decode: %w", err)
		}
		for _, r := range recs {
			if bg.spent() {
				return out, r.Offset, true, nil
			}
			if expired(&r, nowMs) {
				b.stats.ttlFiltered.Add(1)
				continue
			}
			pos := src.span.Start // records without a key belong to the source's first position
			if r.Key != nil {
				pos = keyspace.Position(r.Key, p.bits)
			}
			if !self && !p.slice.Contains(pos) {
				continue
			}
			if cursor.Consumed(entries, src.id, pos, r.Offset, lin.isAncestor) {
				continue
			}
			out = append(out, r)
			bg.records--
			bg.bytes -= recordSize(r)
		}
	}
	return out, next, false, nil
}

func toCursorEntries(g []metadata.GroupEntry) []cursor.Entry {
	out := make([]cursor.Entry, len(g))
	for i, e := range g {
		out[i] = cursor.Entry{Source: e.Source, SliceStart: e.SliceStart, SliceBits: e.SliceBits, Offset: e.Offset}
	}
	return out
}

func toGroupEntries(c []cursor.Entry) []metadata.GroupEntry {
	out := make([]metadata.GroupEntry, len(c))
	for i, e := range c {
		out[i] = metadata.GroupEntry{Source: e.Source, SliceStart: e.SliceStart, SliceBits: e.SliceBits, Offset: e.Offset}
	}
	return out
}

// EndCursor returns a cursor positioned after every durable record the
// topic holds now: each active range at its end, which also marks its
// ancestors done for its slice.
func (b *Broker) EndCursor(topic string) (string, error) {
	return b.EndCursorContext(context.Background(), topic)
}

// EndCursorContext is EndCursor whose calls to other nodes end when ctx
// ends, or the broker closes.
func (b *Broker) EndCursorContext(ctx context.Context, topic string) (string, error) {
	ctx, cancel := b.readContext(ctx)
	defer cancel()
	topicID, err := b.topicID(topic)
	if err != nil {
		return "", err
	}
	plans, lin := b.plans(position{topicID: topicID})
	var entries []cursor.Entry
	for i := range plans {
		p := &plans[i]
		// Only the node writing the active segment knows its end.
		end, err := b.durableEndOf(ctx, p.self())
		if err != nil {
			return "", err
		}
		entries = cursor.Advance(entries, p.rangeID, p.slice.Start, p.slice.Log2Size(), end, lin.isAncestor)
	}
	return cursor.Encode(b.secret, cursor.Cursor{TopicID: topicID, Entries: entries}), nil
}

// durableEnd is the offset after the last durable record of a range, or
// the base of its active segment when the node writing it cannot tell:
// an estimate, for lag. What must not under-report uses durableEndOf.
func (b *Broker) durableEnd(src *source) uint64 {
	end, err := b.durableEndOf(b.life, src)
	if err != nil {
		return src.segments[len(src.segments)-1].Base
	}
	return end
}

// durableEndOf is the offset after the last durable record of a range,
// asked of the node writing its active segment when that is another.
func (b *Broker) durableEndOf(ctx context.Context, src *source) (uint64, error) {
	if len(src.segments) == 0 {
		return 0, nil
	}
	last := src.segments[len(src.segments)-1]
	if !last.Active {
		return last.End, nil
	}
	ext, err := b.segmentExtent(ctx, last)
	if errors.Is(err, storage.ErrNotFound) {
		return last.Base, nil // registered a moment before its file: nothing durable yet
	}
	if err != nil {
		return 0, err
	}
	return ext.durableEnd, nil
}

// recordSize is what one record costs a page's byte budget: its key,
// value and headers, and for each header what it costs in memory once
// decoded (two slices), not the two bytes it may take on the wire, or a
// page of records with many small headers could grow far past
// FetchMaxBytes in memory.
func recordSize(r Record) int {
	n := len(r.Key) + len(r.Value) + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 48
	}
	return n
}

// cutPage is a page read shared by a herd of woken readers: its items,
// and whether its scan bound ended it (then it is answered at once, even
// empty, since its cursor moved).
type cutPage[T any] struct {
	items []T
	cut   bool
	// hold keeps the pooled buffers the items lie in, for this holder.
	hold *readHold
}

func (c cutPage[T]) reads() *readHold { return c.hold }

func (c cutPage[T]) withReads(h *readHold) any {
	c.hold = h
	return c
}
