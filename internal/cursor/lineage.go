package cursor

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
)

// The helpers below answer the broker's lineage questions from a cursor's
// entries. isAncestor(anc, desc) reports whether range anc is a strict
// ancestor of range desc (desc was split or merged, directly or not, from
// anc); a nil isAncestor means no range has ancestors. The rule they share:
//
//   - an entry of range s over slice S with Offset o delivers the records of s
//     at positions in S with offsets below o;
//   - it also delivers every record, at any offset, of every strict ancestor
//     of s at positions in S, because a lineage read drains an ancestor's
//     slice before it creates an entry for the child.
//
// Entries are expected to be valid (as Decode returns them): aligned slices
// that therefore nest or are disjoint. The answers stay exact for any
// intervals, but the meaning of a cursor is only defined for valid ones.

// Consumed reports whether the record of range source at key position pos
// and offset has been delivered according to entries: true if some entry with
// Source == source covers pos with offset < entry.Offset, or some entry whose
// Source is a strict descendant of source (isAncestor(source, e.Source))
// covers pos.
func Consumed(entries []Entry, source uint64, pos uint64, offset uint64, isAncestor func(anc, desc uint64) bool) bool {
	for _, e := range entries {
		if !covers(e, pos) {
			continue
		}
		if e.Source == source {
			if offset < e.Offset {
				return true
			}
		} else if ancestor(isAncestor, source, e.Source) {
			return true
		}
	}
	return false
}

// Start returns the lowest offset of source that may still hold an
// undelivered record whose key position is in [sliceStart,
// sliceStart+2^sliceBits), given that the source's first offset is base
// (offsets below base no longer exist, so start is never below base).
// done is true when every position of the slice is covered by a descendant
// entry, so nothing of source is left to read there; start is then 0.
func Start(entries []Entry, source, sliceStart uint64, sliceBits uint8, base uint64, isAncestor func(anc, desc uint64) bool) (start uint64, done bool) {
	lo, hi := sliceStart, sliceEnd(sliceStart, sliceBits)
	var own, desc []interval
	for _, e := range entries {
		iv := interval{max(e.SliceStart, lo), min(sliceEnd(e.SliceStart, e.SliceBits), hi), e.Offset}
		if iv.lo >= iv.hi {
			continue // outside the slice
		}
		if e.Source == source {
			own = append(own, iv)
		} else if ancestor(isAncestor, source, e.Source) {
			desc = append(desc, iv)
		}
	}
	return sweep(lo, hi, own, desc, base)
}

// interval is [lo, hi) with the offset of the entry it was clipped from.
type interval struct{ lo, hi, off uint64 }

// sweep walks the elementary pieces of [lo, hi) cut by every interval
// boundary. A piece is skipped when a descendant interval covers it;
// otherwise the records left there start at the highest offset of the own
// intervals covering it (or base). The answer is the lowest such start.
func sweep(lo, hi uint64, own, desc []interval, base uint64) (uint64, bool) {
	points := []uint64{lo, hi}
	for _, iv := range append(slices.Clip(own), desc...) {
		points = append(points, iv.lo, iv.hi)
	}
	slices.Sort(points)
	points = slices.Compact(points)
	byLo := func(a, b interval) int { return cmp.Compare(a.lo, b.lo) }
	slices.SortFunc(own, byLo)
	slices.SortFunc(desc, byLo)

	var (
		active  offHeap // own intervals started, max offset on top
		descEnd uint64  // furthest end of the descendant intervals started
		best    = uint64(math.MaxUint64)
		done    = true
	)
	for i := 0; i+1 < len(points); i++ {
		p := points[i]
		for len(own) > 0 && own[0].lo <= p {
			heap.Push(&active, own[0])
			own = own[1:]
		}
		for len(desc) > 0 && desc[0].lo <= p {
			descEnd = max(descEnd, desc[0].hi)
			desc = desc[1:]
		}
		for active.Len() > 0 && active[0].hi <= p {
			heap.Pop(&active)
		}
		if descEnd > p {
			continue // a descendant entry delivers the whole piece
		}
		done = false
		start := base
		if active.Len() > 0 {
			start = max(start, active[0].off)
		}
		best = min(best, start)
	}
	if done {
		return 0, true
	}
	return best, false
}

// Advance records that, for the slice [sliceStart, sliceStart+2^sliceBits),
// every record of source below offset has been delivered. It adds the entry
// (source, slice, offset), or keeps a same-source entry that already implies
// it (its slice contains the given slice and its Offset is at least offset),
// and drops the entries the new one implies: those of source whose slice is
// inside the given slice with Offset <= offset, and those of strict ancestors
// of source whose slice is inside the given slice. It returns a new slice in
// canonical order and does not modify entries.
func Advance(entries []Entry, source, sliceStart uint64, sliceBits uint8, offset uint64, isAncestor func(anc, desc uint64) bool) []Entry {
	q := Entry{Source: source, SliceStart: sliceStart, SliceBits: sliceBits, Offset: offset}
	out := make([]Entry, 0, len(entries)+1)
	implied := false
	for _, e := range entries {
		inside := contains(q, e)
		switch {
		case e.Source == source && inside && e.Offset <= offset:
			continue
		case e.Source == source && contains(e, q) && e.Offset >= offset:
			implied = true
		case e.Source != source && inside && ancestor(isAncestor, e.Source, source):
			continue
		}
		out = append(out, e)
	}
	if !implied {
		out = append(out, q)
	}
	return Canonical(out)
}

func ancestor(isAncestor func(anc, desc uint64) bool, anc, desc uint64) bool {
	return isAncestor != nil && isAncestor(anc, desc)
}

// sliceEnd is the exclusive end of a slice, saturated at MaxUint64.
func sliceEnd(start uint64, bits uint8) uint64 {
	if bits >= 64 {
		return math.MaxUint64
	}
	end := start + 1<<bits
	if end < start {
		return math.MaxUint64
	}
	return end
}

func covers(e Entry, pos uint64) bool {
	return pos >= e.SliceStart && pos < sliceEnd(e.SliceStart, e.SliceBits)
}

// contains reports whether a's slice contains b's slice.
func contains(a, b Entry) bool {
	return b.SliceStart >= a.SliceStart && sliceEnd(b.SliceStart, b.SliceBits) <= sliceEnd(a.SliceStart, a.SliceBits)
}

// offHeap is a max-heap of intervals by offset.
type offHeap []interval

func (h offHeap) Len() int           { return len(h) }
func (h offHeap) Less(i, j int) bool { return h[i].off > h[j].off }
func (h offHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *offHeap) Push(x any)        { *h = append(*h, x.(interval)) }
func (h *offHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
