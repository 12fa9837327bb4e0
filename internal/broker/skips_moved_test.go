package broker

import (
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

func TestMovedEntriesMatchesGroupingBySource(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	entry := func() cursor.Entry {
		bits := uint8(rng.IntN(3)) + 62
		return cursor.Entry{Source: uint64(rng.IntN(6)), SliceStart: uint64(rng.IntN(4)) << 62,
			SliceBits: bits, Offset: uint64(rng.IntN(50))}
	}
	for i := range 20000 {
		before := make([]cursor.Entry, rng.IntN(12))
		for j := range before {
			before[j] = entry()
		}
		if i%2 == 0 {
			before = cursor.Canonical(before)
		}
		after := make([]cursor.Entry, rng.IntN(12))
		for j := range after {
			after[j] = entry()
		}
		kept := append([]cursor.Entry(nil), before...)
		gotM, gotF := movedEntries(bySource(before), after)
		wantM, wantF := movedEntriesByMap(before, after)
		if !reflect.DeepEqual(gotM, wantM) || !reflect.DeepEqual(gotF, wantF) {
			t.Fatalf("case %d: before %v after %v:\nmoved %v fresh %v\nwant  %v fresh %v", i, before, after, gotM, gotF, wantM, wantF)
		}
		if !slices.Equal(kept, before) {
			t.Fatalf("case %d: bySource changed its input", i)
		}
	}
}
