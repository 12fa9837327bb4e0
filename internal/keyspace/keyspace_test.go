package keyspace

import (
	"errors"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// TestHashGolden pins the key hash. These values are part of the on-disk and
// cursor contract: if this test fails, the change is wrong, not the test.
// The first three are the published XXH64 (seed 0) reference values.
func TestHashGolden(t *testing.T) {
	tests := []struct {
		key   string
		hash  uint64
		pos16 uint64
		pos32 uint64
	}{
		{"", 0xef46db3751d8e999, 61254, 4014398263},
		{"a", 0xd24ec4f1a98c6e5b, 53838, 3528377585},
		{"abc", 0x44bc2cf5ad770999, 17596, 1153182965},
		{"user-42", 0x397e9d3a76af7c81, 14718, 964599098},
		{"orders/2024/0001", 0x121802f2967bd768, 4632, 303563506},
		{"\x00\xff", 0xe0d97d9a03131d7d, 57561, 3772349850},
	}
	for _, tt := range tests {
		k := []byte(tt.key)
		if got := Hash(k); got != tt.hash {
			t.Errorf("Hash(%q) = %#x, want %#x", tt.key, got, tt.hash)
		}
		if got := Position(k, 16); got != tt.pos16 {
			t.Errorf("Position(%q, 16) = %d, want %d", tt.key, got, tt.pos16)
		}
		if got := Position(k, 32); got != tt.pos32 {
			t.Errorf("Position(%q, 32) = %d, want %d", tt.key, got, tt.pos32)
		}
		if got, want := Position(k, 1), tt.hash>>63; got != want {
			t.Errorf("Position(%q, 1) = %d, want %d", tt.key, got, want)
		}
	}
}

func TestPositionEdgeBits(t *testing.T) {
	k := []byte("abc")
	if got := Position(k, 0); got != 0 {
		t.Errorf("Position(k, 0) = %d, want 0", got)
	}
	if got := Position(k, 64); got != Hash(k) {
		t.Errorf("Position(k, 64) = %#x, want the whole hash", got)
	}
	if Position(nil, 16) != Position([]byte{}, 16) {
		t.Error("nil and empty keys must hash alike")
	}
}

func TestValidBits(t *testing.T) {
	for b := 0; b < 256; b++ {
		want := b >= 1 && b <= 32
		if got := ValidBits(uint8(b)); got != want {
			t.Errorf("ValidBits(%d) = %v, want %v", b, got, want)
		}
	}
}

func TestSpanBasics(t *testing.T) {
	s := Span{8, 16}
	if s.Size() != 8 || s.Log2Size() != 3 || !s.Valid() {
		t.Fatalf("Span{8,16}: size %d log2 %d valid %v", s.Size(), s.Log2Size(), s.Valid())
	}
	for _, tt := range []struct {
		pos  uint64
		want bool
	}{{7, false}, {8, true}, {15, true}, {16, false}} {
		if got := s.Contains(tt.pos); got != tt.want {
			t.Errorf("Contains(%d) = %v, want %v", tt.pos, got, tt.want)
		}
	}
	if !s.ContainsSpan(Span{8, 12}) || !s.ContainsSpan(s) || s.ContainsSpan(Span{4, 12}) {
		t.Error("ContainsSpan")
	}
	if !s.Overlaps(Span{15, 17}) || s.Overlaps(Span{16, 24}) || s.Overlaps(Span{0, 8}) {
		t.Error("Overlaps")
	}
	if got := Root(16); got != (Span{0, 1 << 16}) {
		t.Errorf("Root(16) = %v", got)
	}
	if got := Root(32); got != (Span{0, 1 << 32}) {
		t.Errorf("Root(32) = %v", got)
	}
}

func TestValid(t *testing.T) {
	for _, tt := range []struct {
		s    Span
		want bool
	}{
		{Span{0, 1}, true}, {Span{5, 6}, true}, {Span{4, 8}, true},
		{Span{0, 0}, false}, {Span{2, 6}, false}, {Span{0, 3}, false}, {Span{8, 4}, false},
	} {
		if got := tt.s.Valid(); got != tt.want {
			t.Errorf("%v.Valid() = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestSplitBuddyMerge(t *testing.T) {
	tests := []struct {
		s      Span
		lo, hi Span
		ok     bool
	}{
		{Span{0, 16}, Span{0, 8}, Span{8, 16}, true},
		{Span{8, 12}, Span{8, 10}, Span{10, 12}, true},
		{Span{6, 8}, Span{6, 7}, Span{7, 8}, true},
		{Span{7, 8}, Span{}, Span{}, false},
	}
	for _, tt := range tests {
		lo, hi, ok := tt.s.Split()
		if lo != tt.lo || hi != tt.hi || ok != tt.ok {
			t.Errorf("%v.Split() = %v %v %v, want %v %v %v", tt.s, lo, hi, ok, tt.lo, tt.hi, tt.ok)
		}
	}
	if got := (Span{8, 12}).Buddy(); got != (Span{12, 16}) {
		t.Errorf("Buddy = %v", got)
	}
	if got := (Span{12, 16}).Buddy(); got != (Span{8, 12}) {
		t.Errorf("Buddy = %v", got)
	}
	for _, tt := range []struct {
		a, b Span
		want Span
		ok   bool
	}{
		{Span{8, 12}, Span{12, 16}, Span{8, 16}, true},
		{Span{12, 16}, Span{8, 12}, Span{8, 16}, true},
		{Span{4, 8}, Span{8, 12}, Span{}, false}, // adjacent, not buddies
		{Span{0, 4}, Span{4, 6}, Span{}, false},  // different sizes
		{Span{1, 3}, Span{3, 5}, Span{}, false},  // unaligned
		{Span{4, 8}, Span{4, 8}, Span{}, false},  // itself
	} {
		got, ok := Merge(tt.a, tt.b)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Merge(%v, %v) = %v %v, want %v %v", tt.a, tt.b, got, ok, tt.want, tt.ok)
		}
		if AreBuddies(tt.a, tt.b) != tt.ok {
			t.Errorf("AreBuddies(%v, %v) != %v", tt.a, tt.b, tt.ok)
		}
	}
}

func TestInitial(t *testing.T) {
	got, err := Initial(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []Span{{0, 4}, {4, 8}, {8, 12}, {12, 16}}
	if len(got) != len(want) {
		t.Fatalf("Initial(4,4) = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Initial(4,4) = %v, want %v", got, want)
		}
	}
	for _, tt := range []struct {
		bits uint8
		n    int
		err  error
	}{
		{0, 1, ErrInvalidBits}, {33, 1, ErrInvalidBits},
		{4, 0, ErrInvalidCount}, {4, -2, ErrInvalidCount}, {4, 3, ErrInvalidCount},
		{4, 32, ErrInvalidCount}, {32, MaxInitialRanges * 2, ErrInvalidCount},
		{1, 2, nil}, {32, 1, nil}, {32, MaxInitialRanges, nil},
	} {
		_, err := Initial(tt.bits, tt.n)
		if !errors.Is(err, tt.err) {
			t.Errorf("Initial(%d, %d) error = %v, want %v", tt.bits, tt.n, err, tt.err)
		}
	}
}

func genValidSpan(t *rapid.T, bits uint8) Span {
	log := rapid.Uint8Range(0, bits).Draw(t, "log2")
	size := uint64(1) << log
	idx := rapid.Uint64Range(0, (uint64(1)<<bits)/size-1).Draw(t, "index")
	return Span{idx * size, idx*size + size}
}

func TestPropSplitHalvesTileParent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bits := rapid.Uint8Range(1, MaxBits).Draw(t, "bits")
		s := genValidSpan(t, bits)
		lo, hi, ok := s.Split()
		if s.Size() < 2 {
			if ok {
				t.Fatalf("%v split although size 1", s)
			}
			return
		}
		if !ok || lo.Start != s.Start || lo.End != hi.Start || hi.End != s.End || lo.Size() != hi.Size() {
			t.Fatalf("%v split into %v %v", s, lo, hi)
		}
		if !lo.Valid() || !hi.Valid() || !AreBuddies(lo, hi) || lo.Buddy() != hi || hi.Buddy() != lo {
			t.Fatalf("halves %v %v are not valid buddies", lo, hi)
		}
		if m, ok := Merge(hi, lo); !ok || m != s {
			t.Fatalf("Merge(%v, %v) = %v %v, want %v", hi, lo, m, ok, s)
		}
		if lo.Parent() != s || hi.Parent() != s {
			t.Fatalf("Parent of halves != %v", s)
		}
	})
}

func TestPropBuddiesMergeBack(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bits := rapid.Uint8Range(1, MaxBits).Draw(t, "bits")
		s := genValidSpan(t, bits)
		if s == Root(bits) {
			return
		}
		b := s.Buddy()
		if !b.Valid() || !AreBuddies(s, b) || !AreBuddies(b, s) || b.Overlaps(s) {
			t.Fatalf("%v and buddy %v", s, b)
		}
		m, ok := Merge(s, b)
		if !ok || !m.ContainsSpan(s) || !m.ContainsSpan(b) || m.Size() != 2*s.Size() || !Root(bits).ContainsSpan(m) {
			t.Fatalf("Merge(%v, %v) = %v %v", s, b, m, ok)
		}
	})
}

func TestPropInitialTilesRoot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bits := rapid.Uint8Range(1, MaxBits).Draw(t, "bits")
		maxLog := min(bits, 10) // keep the slices small
		n := 1 << rapid.Uint8Range(0, maxLog).Draw(t, "log2n")
		spans, err := Initial(bits, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) != n {
			t.Fatalf("got %d spans, want %d", len(spans), n)
		}
		if !sort.SliceIsSorted(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start }) {
			t.Fatal("not sorted")
		}
		next := uint64(0)
		for _, s := range spans {
			if s.Start != next || !s.Valid() || s.Size() != spans[0].Size() {
				t.Fatalf("gap, overlap or bad block at %v (expected start %d)", s, next)
			}
			next = s.End
		}
		if next != Root(bits).End {
			t.Fatalf("tiling ends at %d, want %d", next, Root(bits).End)
		}
	})
}

func TestPropPositionInRoot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.SliceOf(rapid.Byte()).Draw(t, "key")
		bits := rapid.Uint8Range(1, MaxBits).Draw(t, "bits")
		p := Position(key, bits)
		if !Root(bits).Contains(p) {
			t.Fatalf("Position %d outside Root(%d)", p, bits)
		}
		// One more bit refines the position inside the same block.
		if bits < MaxBits && Position(key, bits+1)>>1 != p {
			t.Fatalf("Position at %d bits does not refine %d", bits+1, p)
		}
	})
}
