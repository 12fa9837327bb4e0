package cursor

import (
	"cmp"
	"slices"
)

// The helpers below combine positions. They let a consumer group keep one
// stored position that several members advance independently: a member's
// commit is merged into it (Merge), carries only what the member itself
// read (Clip), and leaves out what the stored position already says
// (NotImplied). None of them can move a position backwards.

// Merge returns the union of a and b in canonical order: every record
// delivered according to a or to b is delivered according to the result,
// and nothing else is. An entry is left out when another entry of the same
// source implies it (its slice contains the entry's slice and its Offset is
// at least the entry's). The inputs are not modified.
func Merge(a, b []Entry) []Entry {
	all := slices.Concat(a, b)
	// Within a source, by slice start, containing slices before the slices
	// inside them (aligned slices nest or are disjoint), and of equal slices
	// the highest offset first: a single pass with a stack of the kept
	// entries that contain the current one then finds every implied entry.
	slices.SortFunc(all, func(x, y Entry) int {
		return cmp.Or(
			cmp.Compare(x.Source, y.Source),
			cmp.Compare(x.SliceStart, y.SliceStart),
			cmp.Compare(y.SliceBits, x.SliceBits),
			cmp.Compare(y.Offset, x.Offset),
		)
	})
	out := make([]Entry, 0, len(all))
	var open []Entry // kept entries of the current source, each inside the one before
	for _, e := range all {
		for len(open) > 0 && (open[len(open)-1].Source != e.Source || !contains(open[len(open)-1], e)) {
			open = open[:len(open)-1]
		}
		// Every open entry contains e and the last has the highest offset
		// of them: it was kept, so it is above all it sits inside.
		if len(open) > 0 && open[len(open)-1].Offset >= e.Offset {
			continue
		}
		out = append(out, e)
		open = append(open, e)
	}
	return Canonical(out)
}

// NotImplied returns the entries of add that some single entry of by does
// not already imply, in canonical order: an entry of the same source whose
// slice contains the entry's with an Offset at least the entry's, or an
// entry of a strict descendant of the entry's source whose slice contains
// the entry's (which delivers all of it). Merging the result into by gives
// the same position as merging add. The inputs are not modified.
func NotImplied(add, by []Entry, isAncestor func(anc, desc uint64) bool) []Entry {
	bySource := make(map[uint64][]Entry)
	for _, e := range by {
		bySource[e.Source] = append(bySource[e.Source], e)
	}
	var out []Entry
	for _, e := range Canonical(add) {
		if !impliedBy(e, bySource, isAncestor) {
			out = append(out, e)
		}
	}
	return out
}

func impliedBy(e Entry, bySource map[uint64][]Entry, isAncestor func(anc, desc uint64) bool) bool {
	for _, o := range bySource[e.Source] {
		if contains(o, e) && o.Offset >= e.Offset {
			return true
		}
	}
	for src, es := range bySource {
		if src == e.Source || !ancestor(isAncestor, e.Source, src) {
			continue
		}
		for _, o := range es {
			if contains(o, e) {
				return true
			}
		}
	}
	return false
}

// Clip returns, in canonical order, what entries say about the slice
// [sliceStart, sliceStart+2^sliceBits) for the sources keep accepts: their
// entries inside the slice, and their entries containing it narrowed to
// it. Entries of other sources and outside the slice are left out. Every
// record the result delivers, entries deliver too. The input is not
// modified.
func Clip(entries []Entry, sliceStart uint64, sliceBits uint8, keep func(source uint64) bool) []Entry {
	s := Entry{SliceStart: sliceStart, SliceBits: sliceBits}
	var out []Entry
	for _, e := range entries {
		if !keep(e.Source) {
			continue
		}
		switch {
		case contains(s, e):
			out = append(out, e)
		case contains(e, s):
			out = append(out, Entry{Source: e.Source, SliceStart: sliceStart, SliceBits: sliceBits, Offset: e.Offset})
		}
	}
	return Canonical(out)
}
