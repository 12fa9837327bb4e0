package placement

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestRingGolden pins the topic-to-vnode mapping of the default ring. The
// mapping is durable: if this test fails, existing clusters would route
// topics to the wrong vnode.
func TestRingGolden(t *testing.T) {
	cases := []struct {
		topic string
		point uint32
		vnode uint32
	}{
		{"", 0xef46db37, 0}, // past the last token: wraps to vnode 0
		{"orders", 0x0f4f95cf, 1},
		{"payments", 0x65839f69, 4},
		{"clicks.v2", 0x1a3533c3, 1},
		{"a", 0xd24ec4f1, 7},
	}
	r := Ring{}
	for _, c := range cases {
		if got := Point(c.topic); got != c.point {
			t.Errorf("Point(%q) = %#08x, want %#08x", c.topic, got, c.point)
		}
		if got := r.VnodeOf(c.topic); got != c.vnode {
			t.Errorf("VnodeOf(%q) = %d, want %d", c.topic, got, c.vnode)
		}
	}
	want := []uint32{0, 0x20000000, 0x40000000, 0x60000000, 0x80000000, 0xa0000000, 0xc0000000, 0xe0000000}
	for v, tok := range want {
		if got := r.Token(uint32(v)); got != tok {
			t.Errorf("Token(%d) = %#08x, want %#08x", v, got, tok)
		}
	}
}

// TestVnodeOfIsFirstTokenAtOrAfter checks VnodeOf against the definition,
// a linear scan of the tokens, for random topics and ring sizes.
func TestVnodeOfIsFirstTokenAtOrAfter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := Ring{Vnodes: rapid.IntRange(1, 1000).Draw(t, "vnodes")}
		topic := rapid.String().Draw(t, "topic")
		p := Point(topic)
		want := uint32(0)
		for v := range uint32(r.Count()) {
			if r.Token(v) >= p {
				want = v
				break
			}
		}
		if got := r.VnodeOf(topic); got != want {
			t.Fatalf("VnodeOf(%q) on %d vnodes = %d, want %d (point %#08x)", topic, r.Count(), got, want, p)
		}
	})
}

func TestRingValidate(t *testing.T) {
	for _, c := range []struct {
		vnodes int
		ok     bool
		count  int
	}{{-1, false, 0}, {0, true, DefaultVnodes}, {1, true, 1}, {MaxVnodes, true, MaxVnodes}, {MaxVnodes + 1, false, 0}} {
		r := Ring{Vnodes: c.vnodes}
		if err := r.Validate(); (err == nil) != c.ok {
			t.Errorf("Ring{%d}.Validate() = %v, want ok=%v", c.vnodes, err, c.ok)
		}
		if c.ok && r.Count() != c.count {
			t.Errorf("Ring{%d}.Count() = %d, want %d", c.vnodes, r.Count(), c.count)
		}
		if !c.ok {
			assertPanics(t, func() { r.Count() })
		}
	}
}

func assertPanics(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	f()
}

// TestRingSpreadsTopics checks that many topics use every vnode of a small
// ring, which a broken point or token computation would not.
func TestRingSpreadsTopics(t *testing.T) {
	r := Ring{}
	seen := make(map[uint32]int)
	for i := range 1000 {
		seen[r.VnodeOf(fmt.Sprintf("topic-%d", i))]++
	}
	if len(seen) != r.Count() {
		t.Fatalf("1000 topics reached %d of %d vnodes: %v", len(seen), r.Count(), seen)
	}
}
