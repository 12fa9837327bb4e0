package cursor

import (
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestMerge(t *testing.T) {
	tests := []struct {
		name string
		a, b []Entry
		want []Entry
	}{
		{"empty", nil, nil, []Entry{}},
		{"disjoint sources", []Entry{e(1, 0, 3, 5)}, []Entry{e(2, 0, 3, 7)}, []Entry{e(1, 0, 3, 5), e(2, 0, 3, 7)}},
		{"same slice keeps the higher", []Entry{e(1, 0, 3, 9)}, []Entry{e(1, 0, 3, 5)}, []Entry{e(1, 0, 3, 9)}},
		{"same slice either order", []Entry{e(1, 0, 3, 5)}, []Entry{e(1, 0, 3, 9)}, []Entry{e(1, 0, 3, 9)}},
		{"wider and further absorbs", []Entry{e(1, 0, 2, 4), e(1, 4, 2, 6)}, []Entry{e(1, 0, 3, 6)}, []Entry{e(1, 0, 3, 6)}},
		{"wider but behind keeps the narrower", []Entry{e(1, 0, 2, 8), e(1, 4, 2, 2)}, []Entry{e(1, 0, 3, 5)}, []Entry{e(1, 0, 2, 8), e(1, 0, 3, 5)}},
		{"narrower and behind is implied", []Entry{e(1, 0, 3, 9)}, []Entry{e(1, 4, 1, 3)}, []Entry{e(1, 0, 3, 9)}},
		{"implied through a dropped container", []Entry{e(1, 0, 3, 9), e(1, 0, 2, 7)}, []Entry{e(1, 0, 1, 8)}, []Entry{e(1, 0, 3, 9)}},
		{"sibling slices stay apart", []Entry{e(1, 0, 1, 9)}, []Entry{e(1, 2, 1, 3)}, []Entry{e(1, 0, 1, 9), e(1, 2, 1, 3)}},
		{"other sources never absorb", []Entry{e(1, 0, 2, 30)}, []Entry{e(2, 0, 2, 0)}, []Entry{e(1, 0, 2, 30), e(2, 0, 2, 0)}},
	}
	for _, tt := range tests {
		a, b := slices.Clone(tt.a), slices.Clone(tt.b)
		got := Merge(tt.a, tt.b)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Merge = %v, want %v", tt.name, got, tt.want)
		}
		if !reflect.DeepEqual(a, tt.a) || !reflect.DeepEqual(b, tt.b) {
			t.Errorf("%s: Merge modified its input", tt.name)
		}
	}
}

func TestNotImplied(t *testing.T) {
	by := []Entry{e(1, 0, 3, 9), e(2, 0, 2, 4)}
	tests := []struct {
		name string
		add  []Entry
		want []Entry
	}{
		{"same slice behind", []Entry{e(1, 0, 3, 5)}, nil},
		{"same slice equal", []Entry{e(1, 0, 3, 9)}, nil},
		{"same slice ahead", []Entry{e(1, 0, 3, 10)}, []Entry{e(1, 0, 3, 10)}},
		{"inside and behind", []Entry{e(1, 4, 2, 9)}, nil},
		{"wider than the stored entry", []Entry{e(1, 0, 4, 1)}, []Entry{e(1, 0, 4, 1)}},
		{"ancestor inside a descendant's slice", []Entry{e(1, 0, 1, 1<<40)}, nil},
		{"ancestor beyond a descendant's slice", []Entry{e(1, 8, 3, 1)}, []Entry{e(1, 8, 3, 1)}},
		// An entry of a child with offset 0 still says its ancestors are
		// done in its slice; only a descendant entry implies that.
		{"child entry at 0 beside an ancestor entry", []Entry{e(3, 4, 2, 0)}, []Entry{e(3, 4, 2, 0)}},
		{"descendant is not implied by an ancestor", []Entry{e(4, 0, 2, 0)}, []Entry{e(4, 0, 2, 0)}},
	}
	for _, tt := range tests {
		if got := NotImplied(tt.add, by, testAncestor); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: NotImplied = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	entries := []Entry{e(1, 0, 3, 9), e(1, 0, 1, 12), e(1, 4, 1, 11), e(2, 0, 2, 4), e(3, 4, 2, 1)}
	all := func(uint64) bool { return true }
	tests := []struct {
		name  string
		start uint64
		bits  uint8
		keep  func(uint64) bool
		want  []Entry
	}{
		{"narrows containers, keeps what is inside", 0, 2, all, []Entry{e(1, 0, 1, 12), e(1, 0, 2, 9), e(2, 0, 2, 4)}},
		{"leaves out other slices", 4, 2, all, []Entry{e(1, 4, 1, 11), e(1, 4, 2, 9), e(3, 4, 2, 1)}},
		{"leaves out other sources", 4, 2, func(s uint64) bool { return s != 1 }, []Entry{e(3, 4, 2, 1)}},
		{"whole keyspace is everything", 0, 3, all, Canonical(entries)},
	}
	for _, tt := range tests {
		in := slices.Clone(entries)
		if got := Clip(entries, tt.start, tt.bits, tt.keep); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Clip = %v, want %v", tt.name, got, tt.want)
		}
		if !reflect.DeepEqual(in, entries) {
			t.Errorf("%s: Clip modified its input", tt.name)
		}
	}
}

// drawPosition builds a position by random Advance steps, recording the
// same steps in m.
func drawPosition(t *rapid.T, m *model, isAnc func(a, d uint64) bool, label string) []Entry {
	var entries []Entry
	for range rapid.IntRange(0, 8).Draw(t, label+"Steps") {
		src := rapid.Uint64Range(1, modelSources).Draw(t, label+"Source")
		start, bits := drawSlice(t)
		off := rapid.Uint64Range(0, modelMaxOff).Draw(t, label+"Offset")
		entries = Advance(entries, src, start, bits, off, isAnc)
		m.advance(src, start, bits, off)
	}
	return entries
}

// Two positions advanced independently (two members reading, or one
// member's stale cursor beside the stored position) merge into one that
// delivers exactly what either delivered, whichever comes first; and
// leaving out what the other already implies changes nothing.
func TestPropMergeIsUnion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		isAnc := drawLineage(t)
		m := &model{delivered: map[triple]bool{}, isAnc: isAnc}
		a := drawPosition(t, m, isAnc, "a")
		b := drawPosition(t, m, isAnc, "b")
		for _, got := range [][]Entry{
			Merge(a, b),
			Merge(b, a),
			Merge(a, NotImplied(b, a, isAnc)),
			Merge(b, NotImplied(a, b, isAnc)),
		} {
			if !slices.IsSortedFunc(got, compareEntries) || !reflect.DeepEqual(Canonical(got), got) {
				t.Fatalf("merge not canonical: %v", got)
			}
			checkAgainstModel(t, m, got, isAnc)
		}
		if !reflect.DeepEqual(Merge(a, b), Merge(b, a)) {
			t.Fatalf("Merge depends on argument order: %v vs %v", Merge(a, b), Merge(b, a))
		}
	})
}

// Clip keeps exactly what a position says about the slice, when every
// source is kept.
func TestPropClipKeepsTheSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		isAnc := drawLineage(t)
		m := &model{delivered: map[triple]bool{}, isAnc: isAnc}
		entries := drawPosition(t, m, isAnc, "p")
		start, bits := drawSlice(t)
		clipped := Clip(entries, start, bits, func(uint64) bool { return true })
		for src := uint64(1); src <= modelSources; src++ {
			for p := range uint64(1 << modelBits) {
				in := p >= start && p < start+1<<bits
				for o := range uint64(modelTop) {
					want := in && Consumed(entries, src, p, o, isAnc)
					if got := Consumed(clipped, src, p, o, isAnc); got != want {
						t.Fatalf("Consumed(%d, %d, %d) = %v on the clip, want %v; clip %v of %v", src, p, o, got, want, clipped, entries)
					}
				}
			}
		}
	})
}
