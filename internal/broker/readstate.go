package broker

import (
	"cmp"
	"slices"
	"sync"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/metadata"
)

// A page's cost should follow the records it returns, not the topic's
// ranges. Three pieces of state make that so:
//
//   - topicReads keeps each active range's plan (its lineage's segment
//     lists) across pages and readers, and refreshes a range's plan only
//     when a read of it reaches the end of what the plan knows, instead of
//     copying every range's segment list out of the metadata per page;
//   - entrySet keeps a reader's cursor entries in canonical order and finds
//     a range's by binary search, so reading a range looks at and advances
//     its own lineage's entries only, in place, instead of scanning and
//     re-sorting one entry per range for every range read or page answered;
//   - a range found at its durable end is remembered with the topic's
//     append generation, and skipped without a store read until something
//     is appended: pages fill from ranges that have data.

// topicReads is the read state of one topic, shared by its readers. It
// hangs off the topic's watch, so it lives exactly as long as the watch
// (dropped with the topic) and its tables are bounded by the topic's
// active ranges.
type topicReads struct {
	mu sync.Mutex
	// built says plans and lin hold the metadata as of the last refresh.
	built bool
	// plans are the topic's active ranges in keyspace order. A published
	// plan is never modified: a refresh replaces it, so readers use the
	// slice they took without holding mu.
	plans []*plan
	lin   lineage
	// has holds the range ids of plans; builtAt is the watch generation
	// of the last rebuild.
	has     map[uint64]bool
	builtAt uint64
	// idle records, per range, the offset of its own source at which a
	// read found nothing durable, and the topic's append generation then.
	// Until the generation moves, a reader at or past that offset has
	// nothing to read there. Bounded by the active ranges: entries of
	// ranges no longer active are dropped on rebuild.
	idle map[uint64]idleMark
	// expiries remembers the earliest record expiry of the TTL batches
	// read (ttl.go), so that a batch read again is not walked again.
	expiries expiryMemo
}

type idleMark struct {
	end, gen uint64
}

// readsFor returns the topic's shared read state, with plans built. A
// reader told to read a range the plans lack (a group member assigned a
// range a split made) rebuilds them, at most once per generation of the
// watch: splits and merges fire it, so a range still missing after that
// is not active any more.
func (b *Broker) readsFor(at seen, topicID uint64, only []uint64) *topicReads {
	at.w.mu.Lock()
	r := at.w.reads
	if r == nil {
		r = &topicReads{idle: map[uint64]idleMark{}}
		at.w.reads = r
	}
	at.w.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.built || (r.builtAt != at.gen && r.lacksAny(only)) {
		b.rebuildLocked(r, topicID)
		r.builtAt = at.gen
	}
	return r
}

// lacksAny says some of ids has no plan.
//
// REQUIRES: r.mu held.
func (r *topicReads) lacksAny(ids []uint64) bool {
	for _, id := range ids {
		if !r.has[id] {
			return true
		}
	}
	return false
}

// rebuildLocked copies every active range's plan out of the metadata.
//
// REQUIRES: r.mu held.
func (b *Broker) rebuildLocked(r *topicReads, topicID uint64) {
	plans, lin := b.plans(position{topicID: topicID})
	r.plans = make([]*plan, len(plans))
	r.has = make(map[uint64]bool, len(plans))
	for i := range plans {
		r.plans[i] = &plans[i]
		r.has[plans[i].rangeID] = true
	}
	for id := range r.idle {
		if !r.has[id] {
			delete(r.idle, id)
		}
	}
	r.lin = lin
	r.built = true
}

// snapshot returns the plans a page reads (only the listed ranges when
// only is not nil), the lineage, and the index in the result where the
// page starts.
func (r *topicReads) snapshot(only []uint64) ([]*plan, lineage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	plans := r.plans
	if only != nil {
		plans = make([]*plan, 0, len(only))
		for _, p := range r.plans {
			if slices.Contains(only, p.rangeID) {
				plans = append(plans, p)
			}
		}
	}
	return plans, r.lin
}

// firstRange picks the range a reader's page starts at from the reader's
// own position: s, the sum of its cursor offsets, grows by the records
// each page reads, so a reader whose pages take one record from each of k
// ranges starts its next page k ranges on, going round all of them; s/n
// moves the start on by one more each time s passes a multiple of n, so
// pages whose record count is a multiple of the ranges still move on. No
// reader's pages can steer where another's start (a counter shared by the
// topic's readers let two readers in lockstep each see half the ranges
// forever).
func firstRange(entries []cursor.Entry, n int) int {
	if n == 0 {
		return 0
	}
	var s uint64
	for _, e := range entries {
		s += e.Offset
	}
	return int((s + s/uint64(n)) % uint64(n))
}

// isIdle says a read of p's own source from start would find nothing:
// the last read at or below start found nothing, and nothing has been
// appended to the topic since.
func (r *topicReads) isIdle(p *plan, start, gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.idle[p.rangeID]
	return ok && m.gen == gen && start >= m.end
}

// markIdle records that p's own source had nothing durable from end on,
// as of append generation gen (taken before the read).
func (r *topicReads) markIdle(p *plan, end, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.idle[p.rangeID]; ok && m.gen == gen && m.end <= end {
		return
	}
	r.idle[p.rangeID] = idleMark{end: end, gen: gen}
}

// refresh re-reads the metadata of ranges whose reads ran dry and says
// whether any of their plans changed: a new segment opened (first append,
// or a roll), or the range was split, merged or deleted, which rebuilds
// every plan. A range that ran dry with an unchanged plan is at its
// durable end, which appends alone move.
func (b *Broker) refresh(r *topicReads, topicID uint64, dry []*plan) bool {
	if len(dry) == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := map[uint64][]metadata.Segment{}
	rebuild := false
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		for _, p := range dry {
			rg, ok := st.Range(p.rangeID)
			if !ok || !rg.Active {
				rebuild = true
				return
			}
			if segs, ok := newSegments(st, p); ok {
				changed[p.rangeID] = segs
			}
		}
	})
	if rebuild {
		b.rebuildLocked(r, topicID)
		return true
	}
	if len(changed) == 0 {
		return false
	}
	plans := slices.Clone(r.plans)
	for i, p := range plans {
		if segs, ok := changed[p.rangeID]; ok {
			plans[i] = p.withSegments(segs)
		}
	}
	r.plans = plans
	return true
}

// newSegments returns the segments of p's range when they differ from
// what p knows: a segment opened, or the last one sealed (a roll with no
// segment after it yet). The usual answer, the same active segment, costs
// one lookup and no copy of the list.
func newSegments(st *metadata.State, p *plan) ([]metadata.Segment, bool) {
	known := p.self().segments
	if seg, ok := st.ActiveSegment(p.rangeID); ok {
		if n := len(known); n > 0 && known[n-1].ID == seg.ID && known[n-1].Active {
			return nil, false
		}
		return st.RangeSegments(p.rangeID), true
	}
	segs := st.RangeSegments(p.rangeID)
	if n := len(known); n == len(segs) && (n == 0 || !known[n-1].Active) {
		return nil, false
	}
	return segs, true
}

func (p *plan) self() *source { return &p.sources[len(p.sources)-1] }

// withSegments is p with its own source's segments replaced; ancestors are
// sealed, so their lists never change.
func (p *plan) withSegments(segs []metadata.Segment) *plan {
	q := *p
	q.sources = slices.Clone(p.sources)
	q.self().segments = segs
	return &q
}

// entrySet is a reader's cursor entries, kept in canonical order for the
// whole page. Reading a range takes the entries of its sources, advances
// them, and puts them back; what every other range's entries say is left
// untouched, as the cursor functions would leave it. A source's entries
// are one run of the order, found by binary search; a put that keeps each
// source's count (the usual case: a range's one entry moves on) writes
// them in place, so a page over a thousand ranges neither groups its
// cursor into a table nor sorts it again to answer (both grew with the
// ranges, not with the records read).
type entrySet struct {
	all []cursor.Entry // canonical order; the set's own copy
}

func newEntrySet(entries []cursor.Entry) *entrySet {
	all := slices.Clone(entries)
	if !slices.IsSortedFunc(all, cursor.Compare) {
		// Stable: equal entries keep the order they came in, so a set
		// answers the same list for the same cursor every time.
		slices.SortStableFunc(all, cursor.Compare)
	}
	return &entrySet{all: all}
}

// run returns the bounds of source id's entries in s.all.
func (s *entrySet) run(id uint64) (lo, hi int) {
	lo, _ = slices.BinarySearchFunc(s.all, id, func(e cursor.Entry, id uint64) int { return cmp.Compare(e.Source, id) })
	hi = lo
	for hi < len(s.all) && s.all[hi].Source == id {
		hi++
	}
	return lo, hi
}

// take returns the entries of the given sources, in canonical order.
func (s *entrySet) take(ids []uint64) []cursor.Entry {
	var out []cursor.Entry
	for _, id := range ids {
		lo, hi := s.run(id)
		out = append(out, s.all[lo:hi]...)
	}
	return cursor.Canonical(out)
}

// put replaces the entries of the given sources with entries (each of
// which must be of one of them).
func (s *entrySet) put(ids []uint64, entries []cursor.Entry) {
	if s.putInPlace(ids, entries) {
		return
	}
	// A source's count changed (a reader's first entry of a range, an
	// ancestor's entries folded into the range's): its run is cut out
	// and the new entries go in at their place, the set's own slice
	// growing as appends do.
	for _, id := range ids {
		lo, hi := s.run(id)
		s.all = slices.Delete(s.all, lo, hi)
	}
	for _, e := range entries {
		at, _ := slices.BinarySearchFunc(s.all, e, cursor.Compare)
		for at < len(s.all) && cursor.Compare(s.all[at], e) == 0 {
			at++ // after its equals, as a stable sort would place it
		}
		s.all = slices.Insert(s.all, at, e)
	}
}

// putInPlace is put when every source keeps its number of entries, and
// entries are canonical: each source's run is overwritten where it lies.
// It says whether it did so; if not, s is unchanged.
func (s *entrySet) putInPlace(ids []uint64, entries []cursor.Entry) bool {
	n := 0
	for _, id := range ids {
		lo, hi := s.run(id)
		n += hi - lo
	}
	if n != len(entries) || !slices.IsSortedFunc(entries, cursor.Compare) {
		return false
	}
	for i := 0; i < len(entries); {
		j := i + 1
		for j < len(entries) && entries[j].Source == entries[i].Source {
			j++
		}
		lo, hi := s.run(entries[i].Source)
		if hi-lo != j-i || !slices.Contains(ids, entries[i].Source) {
			return false
		}
		i = j
	}
	for i := 0; i < len(entries); {
		lo, hi := s.run(entries[i].Source)
		copy(s.all[lo:hi], entries[i:i+hi-lo])
		i += hi - lo
	}
	return true
}

// list returns every entry in canonical order. The set is not used after
// it: the slice is its own.
func (s *entrySet) list() []cursor.Entry {
	return s.all
}
