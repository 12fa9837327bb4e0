package broker

import (
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/cursor"
)

// movedEntriesByMap is the count's pairing as first written: before
// grouped by source in a map. The sorted-slice version must agree with it
// on every input, sorted or not.
func movedEntriesByMap(before, after []cursor.Entry) (moved []move, fresh []cursor.Entry) {
	bySrc := map[uint64][]cursor.Entry{}
	for _, o := range before {
		bySrc[o.Source] = append(bySrc[o.Source], o)
	}
	for _, e := range after {
		from, found, same := uint64(0), false, false
		for _, o := range bySrc[e.Source] {
			if o.SliceStart <= e.SliceStart && entryEnd(o) >= entryEnd(e) {
				from, found = max(from, o.Offset), true
			}
			same = same || o.SliceStart == e.SliceStart && o.SliceBits == e.SliceBits
		}
		if found && e.Offset > from {
			moved = append(moved, move{from: from, to: e})
		}
		if !same {
			fresh = append(fresh, e)
		}
	}
	return moved, fresh
}

// TestMovedEntriesMatchesGroupingBySource compares the two on random
// lists, and on lists that are a page's: the entries before with a few
// moved on, replaced or added, the rest unchanged. The pairing's order is
// not part of its answer (the count sums it), so both answers are compared
// sorted.
func TestMovedEntriesMatchesGroupingBySource(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	entry := func() cursor.Entry {
		bits := uint8(rng.IntN(3)) + 62
		return cursor.Entry{Source: uint64(rng.IntN(6)), SliceStart: uint64(rng.IntN(4)) << 62,
			SliceBits: bits, Offset: uint64(rng.IntN(50))}
	}
	pageOf := func(before []cursor.Entry) []cursor.Entry {
		after := slices.Clone(before)
		for range rng.IntN(4) {
			switch i := rng.IntN(len(after) + 1); {
			case i == len(after):
				after = append(after, entry())
			case rng.IntN(2) == 0:
				after[i].Offset += uint64(rng.IntN(20))
			default:
				after[i] = entry()
			}
		}
		return after
	}
	var unchanged, pages int
	for i := range 40000 {
		before := make([]cursor.Entry, rng.IntN(12))
		for j := range before {
			before[j] = entry()
		}
		if i%2 == 0 {
			before = cursor.Canonical(before)
		}
		var after []cursor.Entry
		if i%4 < 2 {
			after = make([]cursor.Entry, rng.IntN(12))
			for j := range after {
				after[j] = entry()
			}
		} else {
			after = pageOf(before)
			pages++
		}
		kept, keptAfter := slices.Clone(before), slices.Clone(after)
		gotM, gotF := movedEntries(bySource(before), after)
		wantM, wantF := movedEntriesByMap(before, after)
		sortMoves(gotM)
		sortMoves(wantM)
		slices.SortFunc(gotF, cursor.Compare)
		slices.SortFunc(wantF, cursor.Compare)
		if !reflect.DeepEqual(gotM, wantM) || !reflect.DeepEqual(gotF, wantF) {
			t.Fatalf("case %d: before %v after %v:\nmoved %v fresh %v\nwant  %v fresh %v", i, before, after, gotM, gotF, wantM, wantF)
		}
		if !slices.Equal(kept, before) || !slices.Equal(keptAfter, after) {
			t.Fatalf("case %d: the pairing changed its input", i)
		}
		if len(wantM) == 0 && len(wantF) == 0 && len(after) > 0 {
			unchanged++
		}
	}
	if pages == 0 || unchanged == 0 {
		t.Fatalf("the cases never had a page (%d) or an unchanged list (%d)", pages, unchanged)
	}
}

func sortMoves(m []move) {
	slices.SortFunc(m, func(a, b move) int {
		if c := cursor.Compare(a.to, b.to); c != 0 {
			return c
		}
		if c := cmp.Compare(a.to.Offset, b.to.Offset); c != 0 {
			return c
		}
		return cmp.Compare(a.from, b.from)
	})
}
