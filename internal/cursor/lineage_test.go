package cursor

import (
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Lineage used by the table tests: 1 split into 2 and 3; 2 and 3 merged into 4.
func testAncestor(anc, desc uint64) bool {
	switch desc {
	case 2, 3:
		return anc == 1
	case 4:
		return anc == 1 || anc == 2 || anc == 3
	}
	return false
}

func e(src, start uint64, bits uint8, off uint64) Entry {
	return Entry{Source: src, SliceStart: start, SliceBits: bits, Offset: off}
}

func TestConsumed(t *testing.T) {
	entries := []Entry{e(1, 0, 2, 10), e(1, 4, 2, 3), e(3, 4, 2, 0), e(2, 0, 1, 5)}
	tests := []struct {
		name        string
		source, pos uint64
		offset      uint64
		want        bool
	}{
		{"own slice below offset", 1, 2, 9, true},
		{"own slice at offset", 1, 2, 10, false},
		{"other own slice", 1, 5, 2, true},
		{"descendant entry covers, any offset", 1, 1, 1 << 40, true},
		{"descendant entry with offset 0 still covers", 1, 6, 50, true},
		{"descendant offset does not deliver itself", 3, 6, 0, false},
		{"own entry of child", 2, 1, 4, true},
		{"own entry of child at offset", 2, 1, 5, false},
		{"uncovered position", 2, 3, 0, false},
		{"unrelated source", 9, 0, 0, false},
		{"ancestor entry does not cover child", 4, 0, 0, false},
	}
	for _, tt := range tests {
		if got := Consumed(entries, tt.source, tt.pos, tt.offset, testAncestor); got != tt.want {
			t.Errorf("%s: Consumed(%d, %d, %d) = %v, want %v", tt.name, tt.source, tt.pos, tt.offset, got, tt.want)
		}
	}
	if Consumed(entries, 1, 1, 1<<40, nil) {
		t.Error("nil isAncestor must mean no lineage")
	}
}

func TestStart(t *testing.T) {
	tests := []struct {
		name      string
		entries   []Entry
		source    uint64
		start     uint64
		bits      uint8
		base      uint64
		wantStart uint64
		wantDone  bool
	}{
		{"no entries", nil, 1, 0, 3, 5, 5, false},
		{"own entry covers slice", []Entry{e(1, 0, 3, 20)}, 1, 0, 2, 5, 20, false},
		{"own entry below base", []Entry{e(1, 0, 3, 2)}, 1, 0, 3, 5, 5, false},
		{"half covered takes the lower", []Entry{e(1, 0, 2, 20)}, 1, 0, 3, 5, 5, false},
		{"both halves", []Entry{e(1, 0, 2, 20), e(1, 4, 2, 30)}, 1, 0, 3, 0, 20, false},
		{"nested entries take the max", []Entry{e(1, 0, 3, 10), e(1, 0, 2, 40)}, 1, 0, 3, 0, 10, false},
		{"nested entries inside", []Entry{e(1, 0, 3, 10), e(1, 0, 2, 40)}, 1, 0, 2, 0, 40, false},
		{"descendant covers all", []Entry{e(2, 0, 2, 0), e(3, 4, 2, 7)}, 1, 0, 3, 0, 0, true},
		{"descendant covers half", []Entry{e(2, 0, 2, 0), e(1, 4, 2, 9)}, 1, 0, 3, 0, 9, false},
		{"descendant covers half, rest from base", []Entry{e(2, 0, 2, 0), e(1, 0, 3, 3)}, 1, 0, 3, 6, 6, false},
		{"merged child covers", []Entry{e(4, 0, 3, 1)}, 2, 0, 2, 0, 0, true},
		{"slice outside entries", []Entry{e(1, 0, 2, 9)}, 1, 4, 2, 1, 1, false},
		{"descendant entry bigger than slice", []Entry{e(2, 0, 3, 0)}, 1, 2, 1, 0, 0, true},
		{"unrelated source ignored", []Entry{e(9, 0, 3, 0)}, 1, 0, 3, 4, 4, false},
	}
	for _, tt := range tests {
		start, done := Start(tt.entries, tt.source, tt.start, tt.bits, tt.base, testAncestor)
		if start != tt.wantStart || done != tt.wantDone {
			t.Errorf("%s: Start = %d %v, want %d %v", tt.name, start, done, tt.wantStart, tt.wantDone)
		}
	}
}

func TestAdvance(t *testing.T) {
	tests := []struct {
		name    string
		entries []Entry
		source  uint64
		start   uint64
		bits    uint8
		offset  uint64
		want    []Entry
	}{
		{"first entry", nil, 1, 0, 3, 5, []Entry{e(1, 0, 3, 5)}},
		{"raise", []Entry{e(1, 0, 3, 5)}, 1, 0, 3, 9, []Entry{e(1, 0, 3, 9)}},
		{"never lower", []Entry{e(1, 0, 3, 9)}, 1, 0, 3, 5, []Entry{e(1, 0, 3, 9)}},
		{"implied by a bigger slice", []Entry{e(1, 0, 3, 9)}, 1, 0, 2, 5, []Entry{e(1, 0, 3, 9)}},
		{"bigger slice lower offset kept", []Entry{e(1, 0, 3, 3)}, 1, 0, 2, 5, []Entry{e(1, 0, 2, 5), e(1, 0, 3, 3)}},
		{"absorbs smaller same-source", []Entry{e(1, 0, 2, 3), e(1, 4, 2, 4)}, 1, 0, 3, 5, []Entry{e(1, 0, 3, 5)}},
		{"keeps smaller with higher offset", []Entry{e(1, 0, 2, 8), e(1, 4, 2, 4)}, 1, 0, 3, 5, []Entry{e(1, 0, 2, 8), e(1, 0, 3, 5)}},
		{"drops ancestors inside", []Entry{e(1, 0, 2, 30), e(1, 4, 2, 30)}, 2, 0, 2, 0, []Entry{e(1, 4, 2, 30), e(2, 0, 2, 0)}},
		{"keeps ancestor containing slice", []Entry{e(1, 0, 3, 30)}, 2, 0, 2, 0, []Entry{e(1, 0, 3, 30), e(2, 0, 2, 0)}},
		{"keeps descendants", []Entry{e(4, 0, 3, 1)}, 2, 0, 2, 7, []Entry{e(2, 0, 2, 7), e(4, 0, 3, 1)}},
	}
	for _, tt := range tests {
		in := slices.Clone(tt.entries)
		got := Advance(tt.entries, tt.source, tt.start, tt.bits, tt.offset, testAncestor)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Advance = %v, want %v", tt.name, got, tt.want)
		}
		if !reflect.DeepEqual(in, tt.entries) {
			t.Errorf("%s: Advance modified its input", tt.name)
		}
	}
}

// The model: a set of delivered (source, position, offset) triples over a
// tiny keyspace, updated by brute force.
const (
	modelBits    = 3
	modelSources = 5
	modelMaxOff  = 12 // largest offset Advance is given
	modelTop     = 20 // offsets checked: [0, modelTop)
)

type triple struct{ src, pos, off uint64 }

type model struct {
	delivered map[triple]bool
	isAnc     func(a, d uint64) bool
}

func (m *model) advance(src, start uint64, bits uint8, off uint64) {
	for p := start; p < start+1<<bits; p++ {
		for o := range uint64(modelTop) {
			if o < off {
				m.delivered[triple{src, p, o}] = true
			}
			for a := uint64(1); a <= modelSources; a++ {
				if m.isAnc(a, src) {
					m.delivered[triple{a, p, o}] = true
				}
			}
		}
	}
}

// start is the lowest offset >= base not delivered at some position of the
// slice; done when every position is delivered at every offset checked.
func (m *model) start(src, start uint64, bits uint8, base uint64) (uint64, bool) {
	best, done := uint64(modelTop), true
	for p := start; p < start+1<<bits; p++ {
		for o := base; o < modelTop; o++ {
			if !m.delivered[triple{src, p, o}] {
				best, done = min(best, o), false
				break
			}
		}
	}
	if done {
		return 0, true
	}
	return best, false
}

// drawLineage draws a random acyclic ancestry (ancestors have smaller ids),
// closed transitively as real lineage is.
func drawLineage(t *rapid.T) func(a, d uint64) bool {
	var rel [modelSources + 1][modelSources + 1]bool
	for d := uint64(2); d <= modelSources; d++ {
		for a := uint64(1); a < d; a++ {
			rel[a][d] = rapid.Bool().Draw(t, "edge")
		}
	}
	for k := 1; k <= modelSources; k++ {
		for a := 1; a <= modelSources; a++ {
			for d := 1; d <= modelSources; d++ {
				rel[a][d] = rel[a][d] || rel[a][k] && rel[k][d]
			}
		}
	}
	return func(a, d uint64) bool { return a <= modelSources && d <= modelSources && rel[a][d] }
}

func drawSlice(t *rapid.T) (uint64, uint8) {
	bits := rapid.Uint8Range(0, modelBits).Draw(t, "sliceBits")
	idx := rapid.Uint64Range(0, (1<<modelBits>>bits)-1).Draw(t, "sliceIndex")
	return idx << bits, bits
}

func TestPropLineageMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		isAnc := drawLineage(t)
		m := &model{delivered: map[triple]bool{}, isAnc: isAnc}
		var entries []Entry
		steps := rapid.IntRange(1, 12).Draw(t, "steps")
		for range steps {
			src := rapid.Uint64Range(1, modelSources).Draw(t, "source")
			start, bits := drawSlice(t)
			off := rapid.Uint64Range(0, modelMaxOff).Draw(t, "offset")
			entries = Advance(entries, src, start, bits, off, isAnc)
			m.advance(src, start, bits, off)

			if !slices.IsSortedFunc(entries, compareEntries) || !reflect.DeepEqual(Canonical(entries), entries) {
				t.Fatalf("entries not canonical: %v", entries)
			}
			if err := (Cursor{Entries: entries}).Validate(); err != nil {
				t.Fatalf("entries invalid: %v", err)
			}
			checkAgainstModel(t, m, entries, isAnc)
		}
	})
}

func checkAgainstModel(t *rapid.T, m *model, entries []Entry, isAnc func(a, d uint64) bool) {
	for src := uint64(1); src <= modelSources; src++ {
		for p := range uint64(1 << modelBits) {
			for o := range uint64(modelTop) {
				if got, want := Consumed(entries, src, p, o, isAnc), m.delivered[triple{src, p, o}]; got != want {
					t.Fatalf("Consumed(%d, %d, %d) = %v, model %v; entries %v", src, p, o, got, want, entries)
				}
			}
		}
		for bits := uint8(0); bits <= modelBits; bits++ {
			for start := uint64(0); start < 1<<modelBits; start += 1 << bits {
				base := uint64(start*3+uint64(bits)) % (modelMaxOff + 2)
				gs, gd := Start(entries, src, start, bits, base, isAnc)
				ws, wd := m.start(src, start, bits, base)
				if gs != ws || gd != wd {
					t.Fatalf("Start(%d, [%d,+2^%d), base %d) = %d %v, model %d %v; entries %v",
						src, start, bits, base, gs, gd, ws, wd, entries)
				}
			}
		}
	}
}
