package metadata

import (
	"cmp"
	"fmt"
	"slices"
)

// Reasons a delete_segment gives (Command.Reason).
const (
	ReasonOperator  = ""          // an operator's delete: anywhere in the range
	ReasonRetention = "retention" // age, bytes or records: the range's first segment only
	ReasonTTL       = "ttl"       // every record expired: the first segment only
	// ReasonLost: every copy of a sealed segment is gone for good (the
	// heal planner's "lost", confirmed by the broker): anywhere in the
	// range, and only while its replica list is still Command.Expect, so
	// a copy recorded meanwhile refuses it. Its records are skipped like
	// retention's; a failover's seal recorded no count, and End-Base then
	// stands for it as an upper bound.
	ReasonLost = "lost"
)

// Retention bookkeeping limits.
const (
	// MaxDeletedSpans bounds Range.Deleted; past it the two oldest spans
	// merge and their count becomes an upper bound.
	MaxDeletedSpans = 64
	// MaxDeletedIDs is how many deleted segment ids a state remembers
	// (WasDeleted), oldest forgotten first.
	MaxDeletedIDs = 16384
	// MaxLostIDs is how many segment ids deleted with ReasonLost a state
	// remembers apart (WasLost), oldest forgotten first. They are few
	// (each is every copy of a segment gone with its holders removed), and
	// kept apart so retention's churn never pushes them out.
	MaxLostIDs = 4096
)

// DeletedSpan is a run [Base, End) of a range's offsets whose segments
// were deleted, holding Records records. Skip is true when the records
// were deleted before they expired (retention or an operator), so a
// reader that had not read them missed them; false for "ttl", whose
// records were all expired and would have been filtered anyway. Bound
// marks a span made by merging spans that were not alike (past
// MaxDeletedSpans): its count is then an upper bound.
type DeletedSpan struct {
	Base    uint64 `json:"base"`
	End     uint64 `json:"end"`
	Records uint64 `json:"records"`
	Skip    bool   `json:"skip,omitempty"`
	Bound   bool   `json:"bound,omitempty"`
	// Lost marks a span of segments recorded lost (ReasonLost): every
	// copy was gone, not deleted by a rule. Only spans alike in it merge;
	// past MaxDeletedSpans, a merged span is Lost if any part was.
	Lost bool `json:"lost,omitempty"`
	// At is when the latest of the span's segments was deleted (the
	// command's Now): a group commit passing a span deleted after the
	// group's previous commit may pass records the group read before
	// they went, so its count is then only an upper bound.
	At int64 `json:"at,omitempty"`
}

// DeletedBetween counts the records of Skip spans within offsets
// [from, to). A span partly inside counts its overlap when its offsets are
// dense (Records == End-Base); otherwise the overlap, capped at Records,
// is an upper bound and bound is true, as it is for any Bound span.
func (r Range) DeletedBetween(from, to uint64) (n uint64, bound bool) {
	for _, sp := range r.Deleted {
		lo, hi := max(from, sp.Base), min(to, sp.End)
		if !sp.Skip || lo >= hi {
			continue
		}
		whole := lo == sp.Base && hi == sp.End
		n += min(sp.Records, hi-lo)
		bound = bound || sp.Bound || !whole && sp.Records != sp.End-sp.Base
	}
	return n, bound
}

// validReason: one of the Reason* values.
func validReason(r string) bool {
	return r == ReasonOperator || r == ReasonRetention || r == ReasonTTL || r == ReasonLost
}

// recordDeletion notes a sealed segment's deletion in its range: the span,
// and Trimmed when the segment was the range's first. rr.segs no longer
// holds seg.
func (rr *rangeRec) recordDeletion(seg *Segment, reason string, wasFirst bool, now int64) {
	if seg.End > seg.Base {
		sp := DeletedSpan{Base: seg.Base, End: seg.End, Records: seg.Records, Skip: reason != ReasonTTL, At: now}
		if reason == ReasonLost {
			sp.Lost = true
			if seg.Records == 0 {
				sp.Records, sp.Bound = seg.End-seg.Base, true
			}
		}
		i, _ := slices.BinarySearchFunc(rr.r.Deleted, sp.Base, func(d DeletedSpan, b uint64) int {
			return cmp.Compare(d.Base, b)
		})
		if i > 0 && rr.r.Deleted[i-1].End > sp.Base {
			// A span capSpans merged across a live segment already
			// covers this one's offsets: add to it rather than overlap.
			d := &rr.r.Deleted[i-1]
			d.Records = addSat(d.Records, sp.Records)
			d.Skip, d.Bound, d.At = d.Skip || sp.Skip, true, max(d.At, sp.At)
			d.Lost = d.Lost || sp.Lost
		} else {
			rr.r.Deleted = slices.Insert(rr.r.Deleted, i, sp)
			i = rr.mergeAround(i)
			rr.mergeAround(i - 1)
		}
		for len(rr.r.Deleted) > MaxDeletedSpans {
			rr.capSpans()
		}
	}
	if wasFirst {
		first := rr.r.NextOffset
		if len(rr.segs) > 0 {
			first = min(rr.segs[0].Base, first)
		}
		rr.r.Trimmed = max(rr.r.Trimmed, first)
	}
}

// mergeAround merges span i with span i+1 when they are alike: equal Skip
// and Lost, and no live segment between them, so the merged count stays exact. It
// returns the index of the span that now holds span i.
func (rr *rangeRec) mergeAround(i int) int {
	d := rr.r.Deleted
	if i < 0 || i+1 >= len(d) || d[i].Skip != d[i+1].Skip || d[i].Lost != d[i+1].Lost || rr.liveBetween(d[i].End, d[i+1].Base) {
		return i
	}
	d[i] = DeletedSpan{Base: d[i].Base, End: d[i+1].End, Records: d[i].Records + d[i+1].Records,
		Skip: d[i].Skip, Bound: d[i].Bound || d[i+1].Bound, At: max(d[i].At, d[i+1].At), Lost: d[i].Lost}
	rr.r.Deleted = slices.Delete(d, i+1, i+2)
	return i
}

// capSpans merges the two oldest spans whatever they are. Unless they
// were alike the merged count is only an upper bound of what it claims.
func (rr *rangeRec) capSpans() {
	d := rr.r.Deleted
	a, b := d[0], d[1]
	d[0] = DeletedSpan{Base: a.Base, End: b.End, Records: a.Records + b.Records, Skip: a.Skip || b.Skip, At: max(a.At, b.At),
		Bound: a.Bound || b.Bound || a.Skip != b.Skip || rr.liveBetween(a.End, b.Base), Lost: a.Lost || b.Lost}
	rr.r.Deleted = slices.Delete(d, 1, 2)
}

// liveBetween reports whether a segment of the range starts in [from, to).
func (rr *rangeRec) liveBetween(from, to uint64) bool {
	return slices.ContainsFunc(rr.segs, func(s *Segment) bool { return s.Base >= from && s.Base < to })
}

// deletedIDs remembers the last MaxDeletedIDs deleted segment ids, so a
// node that missed a delete (it caught up from a snapshot) can still tell
// that a file on its disk belongs to a deleted segment.
type deletedIDs struct {
	order []uint64 // oldest first
	set   map[uint64]bool
}

func (d *deletedIDs) add(ids ...uint64) { d.addBounded(MaxDeletedIDs, ids...) }

// addBounded adds ids, keeping the last limit of them.
func (d *deletedIDs) addBounded(limit int, ids ...uint64) {
	if d.set == nil {
		d.set = make(map[uint64]bool)
	}
	for _, id := range ids {
		if d.set[id] {
			continue
		}
		d.order = append(d.order, id)
		d.set[id] = true
	}
	if over := len(d.order) - limit; over > 0 {
		for _, id := range d.order[:over] {
			delete(d.set, id)
		}
		// Appends reallocate once the front is used up, so the
		// dropped prefix is freed then: amortised O(1) per id.
		d.order = d.order[over:]
	}
}

// WasDeleted reports whether segment id is among the last MaxDeletedIDs
// segments this state deleted (delete_segment or delete_topic).
func (s *State) WasDeleted(id uint64) bool { return s.deleted.set[id] }

// WasLost reports whether segment id is among the last MaxLostIDs
// segments deleted with ReasonLost. A node that comes back holding such a
// segment's file keeps it aside rather than deleting it: the delete said
// no copy was left, and this one is.
func (s *State) WasLost(id uint64) bool { return s.lost.set[id] }

// skipCount is a group's count of records deleted before it read them.
type skipCount struct {
	n     uint64
	bound bool
	// at is the Now of the group's last commit_offsets, 0 before any.
	at int64
}

// countSkips adds to the group's skip counter the records deleted between
// the position it had and the one each entry advances it to. An entry
// counts only against a stored entry of its source whose slice contains
// its own (a first commit adds nothing: a reader from the start missed
// nothing it was promised). Entries are taken widest first, each starting
// from the furthest of the stored and already counted positions, so two
// entries of one commit never count the same records twice. Only sources
// with deleted skip spans are looked at, and each lookup probes the at most
// MaxBits+1 aligned slices containing the entry's, so a commit costs
// O(entries) whatever the group holds.
func (s *State) countSkips(tr *topicRec, group string, stored, add []GroupEntry) {
	hasSkips := func(src uint64) bool {
		return slices.ContainsFunc(s.ranges[src].r.Deleted, func(d DeletedSpan) bool { return d.Skip })
	}
	add = slices.DeleteFunc(mergeEntries(nil, add), func(e GroupEntry) bool { return !hasSkips(e.Source) })
	if len(add) == 0 {
		return
	}
	old, seen := make(slicePositions), make(slicePositions)
	for _, e := range stored {
		if hasSkips(e.Source) {
			old.note(e)
		}
	}
	slices.SortStableFunc(add, func(a, b GroupEntry) int { return int(b.SliceBits) - int(a.SliceBits) })
	sc := tr.skips[group]
	perSource := make(map[uint64]*sourceSkips)
	for _, e := range add {
		from, ok := old.furthest(e, tr.t.Bits)
		if !ok {
			continue
		}
		if prev, ok := seen.furthest(e, tr.t.Bits); ok {
			from = max(from, prev)
		}
		seen.note(e)
		if e.Offset <= from {
			continue
		}
		r := s.ranges[e.Source].r
		if n, bound := r.DeletedBetween(from, e.Offset); n > 0 {
			ps := perSource[e.Source]
			if ps == nil {
				ps = &sourceSkips{from: from, to: e.Offset}
				perSource[e.Source] = ps
			}
			ps.n = addSat(ps.n, n)
			ps.from, ps.to = min(ps.from, from), max(ps.to, e.Offset)
			sc.bound = sc.bound || bound || e.SliceStart > r.Start || e.sliceEnd() < r.End ||
				r.deletedSince(from, e.Offset, sc.at)
		}
	}
	// Narrow entries each count every deleted record of their offsets,
	// whatever its key; a commit never passes more than the range deleted
	// over the offsets its entries span, so that caps the sum.
	for src, ps := range perSource {
		cover, _ := s.ranges[src].r.DeletedBetween(ps.from, ps.to)
		sc.n = addSat(sc.n, min(ps.n, cover))
	}
	if sc.n > 0 {
		tr.skips[group] = sc
	}
}

// deletedSince reports whether a skip span within [from, to) was deleted
// no earlier than at: records a reader may have read before they went
// (at the same millisecond too: the order is unknown).
func (r Range) deletedSince(from, to uint64, at int64) bool {
	return slices.ContainsFunc(r.Deleted, func(d DeletedSpan) bool {
		return d.Skip && d.At >= at && d.Base < to && from < d.End
	})
}

// sourceSkips is what one commit's entries of one source counted, and the
// offsets they spanned.
type sourceSkips struct {
	n, from, to uint64
}

// sliceKey names one aligned slice of one source.
type sliceKey struct {
	source, start uint64
	bits          uint8
}

// slicePositions is the highest offset noted for each slice.
type slicePositions map[sliceKey]uint64

func (p slicePositions) note(e GroupEntry) {
	k := sliceKey{e.Source, e.SliceStart, e.SliceBits}
	p[k] = max(p[k], e.Offset)
}

// furthest is the highest offset noted for a slice of e's source that
// contains e's slice: aligned slices nest, so those are e's own and its
// ancestors, one per width up to the topic's keyspace.
func (p slicePositions) furthest(e GroupEntry, topicBits uint8) (uint64, bool) {
	var off uint64
	found := false
	for bits := e.SliceBits; bits <= topicBits; bits++ {
		k := sliceKey{e.Source, e.SliceStart &^ (1<<bits - 1), bits}
		if o, ok := p[k]; ok {
			off, found = max(off, o), true
		}
	}
	return off, found
}

// GroupSkipped returns how many records the group's commits on the topic
// passed over after they were deleted (retention or an operator, never
// ttl); bound is true when the count is an upper bound. ok is false when
// the topic or the group's position does not exist.
func (s *State) GroupSkipped(topic, group string) (n uint64, bound bool, ok bool) {
	tr, found := s.byName[topic]
	if !found {
		return 0, false, false
	}
	if _, found := tr.groups[group]; !found {
		return 0, false, false
	}
	sc := tr.skips[group]
	return sc.n, sc.bound, true
}

// checkRetention: a range's spans are ordered, disjoint, within
// [0, NextOffset], at most MaxDeletedSpans, each holding no more records
// than offsets; Trimmed is within [0, NextOffset] and below every
// remaining segment.
func checkRetention(rr *rangeRec) error {
	r := rr.r
	if len(r.Deleted) > MaxDeletedSpans {
		return fmt.Errorf("%d deleted spans, at most %d", len(r.Deleted), MaxDeletedSpans)
	}
	var prevEnd uint64
	for i, sp := range r.Deleted {
		if sp.End <= sp.Base || sp.Records > sp.End-sp.Base || sp.End > r.NextOffset || i > 0 && sp.Base < prevEnd {
			return fmt.Errorf("deleted span %d [%d,%d) records=%d is empty, overfull, past %d or out of order",
				i, sp.Base, sp.End, sp.Records, r.NextOffset)
		}
		prevEnd = sp.End
	}
	if r.Trimmed > r.NextOffset || len(rr.segs) > 0 && rr.segs[0].Base < r.Trimmed {
		return fmt.Errorf("trimmed %d past next offset %d or above a remaining segment", r.Trimmed, r.NextOffset)
	}
	return nil
}

// checkDeletedIDs: the record is bounded, without repeats, and names only
// ids this state allocated and no longer holds.
func (s *State) checkDeletedIDs() error {
	d := &s.deleted
	if len(d.order) > MaxDeletedIDs || len(d.order) != len(d.set) {
		return fmt.Errorf("deleted ids: %d listed, %d indexed, at most %d", len(d.order), len(d.set), MaxDeletedIDs)
	}
	for _, id := range d.order {
		if !d.set[id] || id == 0 || id > s.lastSegment || ShardOf(id) != s.shard || s.segments[id] != nil {
			return fmt.Errorf("deleted id %d: unindexed, foreign, beyond the counter or still held", id)
		}
	}
	l := &s.lost
	if len(l.order) > MaxLostIDs || len(l.order) != len(l.set) {
		return fmt.Errorf("lost ids: %d listed, %d indexed, at most %d", len(l.order), len(l.set), MaxLostIDs)
	}
	for _, id := range l.order {
		if !l.set[id] || id == 0 || id > s.lastSegment || ShardOf(id) != s.shard || s.segments[id] != nil {
			return fmt.Errorf("lost id %d: unindexed, foreign, beyond the counter or still held", id)
		}
	}
	return nil
}

// checkSkips: skip counters belong to groups with a position.
func checkSkips(tr *topicRec) error {
	for g, sc := range tr.skips {
		if _, ok := tr.groups[g]; !ok || sc.n == 0 && (sc.bound || sc.at == 0) {
			return fmt.Errorf("skip counter of group %q without a position or empty", g)
		}
	}
	return nil
}

// addSat adds without wrapping: a count that would pass 2^64-1 stays
// there, so an upper bound never turns into a small number.
func addSat(a, b uint64) uint64 {
	if a > ^uint64(0)-b {
		return ^uint64(0)
	}
	return a + b
}
