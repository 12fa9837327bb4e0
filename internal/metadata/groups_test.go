package metadata

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// covered reports whether entries say the record of source at key
// position pos and offset off was consumed (same-source entries only: the
// state machine does not reason about lineage).
func covered(entries []GroupEntry, source, pos, off uint64) bool {
	for _, e := range entries {
		if e.Source == source && pos >= e.SliceStart && pos < e.sliceEnd() && off < e.Offset {
			return true
		}
	}
	return false
}

func drawGroupEntries(t *rapid.T, label string) []GroupEntry {
	var out []GroupEntry
	for range rapid.IntRange(0, 8).Draw(t, label+"Count") {
		bits := rapid.Uint8Range(0, 3).Draw(t, label+"Bits")
		idx := rapid.Uint64Range(0, (8>>bits)-1).Draw(t, label+"Index")
		out = append(out, GroupEntry{
			Source:     rapid.Uint64Range(1, 3).Draw(t, label+"Source"),
			SliceStart: idx << bits,
			SliceBits:  bits,
			Offset:     rapid.Uint64Range(0, 12).Draw(t, label+"Offset"),
		})
	}
	return out
}

// Two members' commits, in either order and however stale, leave the
// group at the union of what each committed: nothing moves back, and the
// stored form stays sorted without an entry another one implies.
func TestPropMergeEntriesIsUnion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := mergeEntries(nil, drawGroupEntries(t, "a"))
		b := drawGroupEntries(t, "b")
		ab := mergeEntries(a, b)
		if ba := mergeEntries(mergeEntries(nil, b), a); !slices.Equal(ab, ba) {
			t.Fatalf("order matters: %v vs %v", ab, ba)
		}
		for src := uint64(1); src <= 3; src++ {
			for pos := range uint64(8) {
				for off := range uint64(14) {
					want := covered(a, src, pos, off) || covered(b, src, pos, off)
					if got := covered(ab, src, pos, off); got != want {
						t.Fatalf("record %d@%d offset %d: consumed %v, want %v; %v + %v = %v", src, pos, off, got, want, a, b, ab)
					}
				}
			}
		}
		for i, e := range ab {
			if i > 0 && compareEntries(ab[i-1], e) >= 0 {
				t.Fatalf("not sorted or duplicated: %v", ab)
			}
			for j, o := range ab {
				if i != j && o.Source == e.Source && within(e, o) && o.Offset >= e.Offset {
					t.Fatalf("%v implied by %v but kept: %v", e, o, ab)
				}
			}
		}
	})
}

// within reports whether e's slice lies inside o's slice.
func within(e, o GroupEntry) bool {
	return e.SliceStart >= o.SliceStart && e.sliceEnd() <= o.sliceEnd()
}
