package slab

import (
	"bytes"
	"sync"
	"testing"
)

// TestChunksAreDisjointAndAligned takes chunks of every size, fills each
// with its own byte, and checks each kept its bytes, starts at a multiple
// of its size inside one region, and that Stats counts them.
func TestChunksAreDisjointAndAligned(t *testing.T) {
	p := NewPool(Limit)
	var got [][]byte
	for k := minShift; k <= maxShift; k++ {
		for i := range min(300, 3*RegionSize>>k+1) { // into a fourth region
			n := 1<<k - i // any size of the class rounds up to it
			b := p.Get(n)
			if len(b) != 0 || cap(b) != 1<<k {
				t.Fatalf("Get(%d): len %d cap %d, want 0 and %d", n, len(b), cap(b), 1<<k)
			}
			if base(b)%uintptr(1<<k) != 0 || p.regions[base(b)&^(RegionSize-1)] == nil {
				t.Fatalf("Get(%d) at %#x: not a chunk of a region", n, base(b))
			}
			got = append(got, append(b, bytes.Repeat([]byte{byte(len(got))}, 1<<k)...))
		}
	}
	want := 0
	for _, b := range got {
		want += cap(b)
	}
	if _, inUse := p.stats(); inUse != want {
		t.Fatalf("in use %d, want %d", inUse, want)
	}
	for i, b := range got {
		if !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, len(b))) {
			t.Fatalf("chunk %d was written by another", i)
		}
		if !p.put(b) {
			t.Fatalf("chunk %d: Put does not know it", i)
		}
	}
	mapped, inUse := p.stats()
	if inUse != 0 || mapped > classes*keptEmpty*RegionSize {
		t.Fatalf("all back: %d in use, %d mapped (at most %d kept)", inUse, mapped, classes*keptEmpty*RegionSize)
	}
}

// TestRegionsGoBackToTheKernel fills several regions of one size, hands
// every chunk back, and checks that all but the kept one are unmapped, and
// that a chunk of a kept region is handed out again.
func TestRegionsGoBackToTheKernel(t *testing.T) {
	p := NewPool(Limit)
	const regions = 3
	var got [][]byte
	for range regions * (RegionSize / MaxSize) {
		got = append(got, p.Get(MaxSize))
	}
	if mapped, _ := p.stats(); mapped != regions*RegionSize {
		t.Fatalf("mapped %d, want %d", mapped, regions*RegionSize)
	}
	for _, b := range got {
		p.put(b)
	}
	if mapped, _ := p.stats(); mapped != keptEmpty*RegionSize {
		t.Fatalf("mapped %d after all came back, want %d", mapped, keptEmpty*RegionSize)
	}
	b := p.Get(MaxSize)
	if p.regions[base(b)&^(RegionSize-1)] == nil {
		t.Fatal("a chunk after the burst did not come from the kept region")
	}
	if mapped, _ := p.stats(); mapped != keptEmpty*RegionSize {
		t.Fatalf("mapped %d, want the kept region only", mapped)
	}
}

// TestBeyondTheLimitTheHeapServes bounds a pool to one region: the chunks
// past it come from the heap, and Put reports them as not its own.
func TestBeyondTheLimitTheHeapServes(t *testing.T) {
	p := NewPool(RegionSize)
	var own, heap int
	var got [][]byte
	for range 2 * RegionSize / MaxSize {
		b := p.Get(MaxSize)
		got = append(got, b)
		if p.regions[base(b)&^(RegionSize-1)] != nil {
			own++
		} else {
			heap++
		}
	}
	if own != RegionSize/MaxSize || heap != RegionSize/MaxSize {
		t.Fatalf("%d chunks from the region and %d from the heap, want %d each", own, heap, RegionSize/MaxSize)
	}
	for i, b := range got {
		if p.put(b) != (i < own) {
			t.Fatalf("chunk %d: Put = %v", i, !(i < own))
		}
	}
	if big := p.Get(MaxSize + 1); cap(big) != MaxSize+1 || p.put(big) {
		t.Fatalf("a request above MaxSize: cap %d", cap(big))
	}
	if b := p.TryGet(MinSize); b != nil { // a second region: past the limit
		t.Fatalf("TryGet past the limit: cap %d, want nil", cap(b))
	}
	if b := p.TryGet(MaxSize + 1); b != nil {
		t.Fatalf("TryGet above MaxSize: cap %d, want nil", cap(b))
	}
	// All chunks are back; the region kept for the next burst serves.
	if b := p.TryGet(MaxSize); cap(b) != MaxSize || !p.put(b) {
		t.Fatal("TryGet within the limit did not hand out a chunk")
	}
}

// TestMisusePanics checks that a chunk put twice, or a slice that is not a
// chunk's start, is refused loudly rather than handed to a second owner.
func TestMisusePanics(t *testing.T) {
	p := NewPool(Limit)
	b := p.Get(MinSize)
	inner := p.Get(4 * MinSize)
	cases := map[string]func(){
		"twice":        func() { p.put(b); p.put(b) },
		"not a start":  func() { p.put(inner[MinSize:]) },
		"not its size": func() { p.put(inner[:0:MinSize]) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
	if p.put(make([]byte, 0, MinSize)) || p.put(nil) {
		t.Fatal("Put claimed heap memory")
	}
}

// TestConcurrentOwners has goroutines take, fill, check and hand back
// chunks of every size at once: no chunk is given to two owners.
func TestConcurrentOwners(t *testing.T) {
	p := NewPool(Limit)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var held [][]byte
			for i := range 20000 {
				k := i % 6 // mostly small chunks, many to a region
				if i%16 == 0 {
					k = i / 16 % classes // every size, up to a whole region
				}
				b := p.Get(MinSize << k)
				b = append(b, bytes.Repeat([]byte{byte(g)}, cap(b))...)
				held = append(held, b)
				if len(held) > 64 || i%7 == 0 {
					h := held[0]
					held = held[1:]
					if bytes.Count(h, []byte{byte(g)}) != len(h) {
						t.Errorf("goroutine %d: a chunk it held was written by another", g)
						return
					}
					p.put(h)
				}
			}
			for _, h := range held {
				p.put(h)
			}
		})
	}
	wg.Wait()
	if _, inUse := p.stats(); inUse != 0 {
		t.Fatalf("%d bytes still in use", inUse)
	}
}

// TestPackagePool checks Get, Put and Stats of the process's pool.
func TestPackagePool(t *testing.T) {
	_, before := Stats()
	b := Get(3000)
	if cap(b) != 4096 {
		t.Fatalf("cap %d, want 4096", cap(b))
	}
	_, during := Stats()
	own := Put(b)
	_, after := Stats()
	if !own || during != before+4096 || after != before {
		t.Fatalf("in use %d, then %d, then %d", before, during, after)
	}
}

// TestLargeBuffers takes large buffers, checks their size and alignment
// and that Stats counts them, and hands them back; FreeLarge ignores
// anything else.
func TestLargeBuffers(t *testing.T) {
	p := NewPool(Limit)
	a, b := p.Large(1), p.Large(3*RegionSize+5)
	if cap(a) != RegionSize || cap(b) != 4*RegionSize || len(a) != 0 || len(b) != 0 {
		t.Fatalf("caps %d and %d, lens %d and %d", cap(a), cap(b), len(a), len(b))
	}
	if base(a)%RegionSize != 0 || base(b)%RegionSize != 0 {
		t.Fatal("a large buffer is not aligned to a region")
	}
	a = append(a, bytes.Repeat([]byte{1}, RegionSize)...)
	b = append(b, bytes.Repeat([]byte{2}, 4*RegionSize)...)
	if bytes.Count(a, []byte{1}) != RegionSize {
		t.Fatal("the buffers overlap")
	}
	if mapped, _ := p.stats(); mapped != 5*RegionSize {
		t.Fatalf("mapped %d, want %d", mapped, 5*RegionSize)
	}
	p.freeLarge(make([]byte, 10))
	p.freeLarge(nil)
	p.freeLarge(b[:0])
	p.freeLarge(a)
	if mapped, _ := p.stats(); mapped != 0 {
		t.Fatalf("mapped %d after both came back", mapped)
	}
	small := NewPool(RegionSize)
	if c := small.Large(RegionSize + 1); cap(c) != RegionSize+1 || len(small.large) != 0 {
		t.Fatalf("beyond the limit: cap %d, %d mapped buffers", cap(c), len(small.large))
	}
}
