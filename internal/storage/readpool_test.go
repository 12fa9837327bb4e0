package storage

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Sizes map to the smallest class that holds them: powers of two from
// 4 KiB to 2 MiB, and none above.
func TestReadPoolClasses(t *testing.T) {
	for _, c := range []struct{ n, class, size int }{
		{1, 0, 4 << 10}, {4 << 10, 0, 4 << 10}, {4<<10 + 1, 1, 8 << 10},
		{5000, 1, 8 << 10}, {64 << 10, 4, 64 << 10}, {64<<10 + 1, 5, 128 << 10},
		{256<<10 + 4<<10, 7, 512 << 10}, {2 << 20, 9, 2 << 20},
	} {
		class, size, ok := classOf(c.n)
		if !ok || class != c.class || size != c.size {
			t.Fatalf("classOf(%d) = %d, %d, %v; want %d, %d", c.n, class, size, ok, c.class, c.size)
		}
	}
	if _, _, ok := classOf(2<<20 + 1); ok {
		t.Fatal("a read larger than the largest class was given a class")
	}
}

// The pool reuses what it is given back, keeps at most its bound, and
// takes only buffers of a class's exact size.
func TestReadPoolReusesWithinItsBound(t *testing.T) {
	p := NewReadPool(64<<10, 4<<20)
	a := p.Get(5000)
	if len(a) != 5000 || cap(a) != 8<<10 {
		t.Fatalf("Get(5000): len %d cap %d", len(a), cap(a))
	}
	p.Put(a)
	b := p.Get(6000)
	if &b[:1][0] != &a[:1][0] {
		t.Fatal("a buffer of the same class was not reused")
	}
	var bufs [][]byte
	for range 8 {
		bufs = append(bufs, p.Get(16<<10))
	}
	for _, b := range bufs {
		p.Put(b)
	}
	st := p.Stats()
	if st.Held > 64<<10 || st.Held != 4*(16<<10) || st.Dropped != 4 {
		t.Fatalf("after putting back 8 × 16 KiB into a 64 KiB pool: %+v", st)
	}
	p.Put(make([]byte, 5000)) // not a class size: not kept
	if p.Stats().Held != st.Held {
		t.Fatal("the pool kept a buffer it did not make")
	}
	p.Put(b)
}

// The pool's buffers are chunks of its own slab up to its mapping bound,
// heap memory past it, and what it maps stays within the bound whatever
// the mix of sizes and the order they come back in; those it drops go back
// to the slab.
func TestReadPoolBoundsWhatItMaps(t *testing.T) {
	const mapped = 4 << 20 // two regions
	p := NewReadPool(256<<10, mapped)
	sizes := []int{4 << 10, 64 << 10, 16 << 10, 256 << 10, 1 << 20}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var bufs [][]byte
		for range 40 {
			bufs = append(bufs, p.Get(sizes[rng.IntN(len(sizes))]))
		}
		if st := p.Stats(); st.Mapped > mapped {
			t.Fatalf("round %d: %d bytes mapped, bound %d", round, st.Mapped, mapped)
		}
		rng.Shuffle(len(bufs), func(i, j int) { bufs[i], bufs[j] = bufs[j], bufs[i] })
		for _, b := range bufs {
			p.Put(b)
		}
		st := p.Stats()
		if st.Mapped > mapped || st.Held > 256<<10 || st.InUse > int(st.Held) {
			t.Fatalf("round %d, all back: %+v; want at most %d mapped, and no chunk in use but those held", round, st, mapped)
		}
	}
	if p.Stats().Allocated == 0 || p.Stats().Dropped == 0 {
		t.Fatalf("the rounds neither allocated nor dropped: %+v", p.Stats())
	}
}

// A buffer goes back when its last holder releases it; releasing more
// often than held, or retaining a released buffer, panics rather than hand
// one reader's bytes to another.
func TestReadBufCountsItsHolders(t *testing.T) {
	p := NewReadPool(1<<20, 4<<20)
	p.poison = true
	rb := newReadBuf(p, p.Get(4096))
	copy(rb.b, "batch")
	rb.Retain(2)
	rb.Release()
	rb.Release()
	if p.Stats().Held != 0 || string(rb.b[:5]) != "batch" {
		t.Fatal("the buffer went back while a holder was left")
	}
	b := rb.b
	rb.Release()
	if p.Stats().Held != 4096 || b[0] != poisonByte {
		t.Fatalf("the last release did not give the buffer back, poisoned: %+v", p.Stats())
	}
	mustPanic(t, "released too often", rb.Release)
	mustPanic(t, "retained after its release", func() { rb.Retain(1) })
}

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, want) {
			t.Fatalf("panic %v, want one saying %q", r, want)
		}
	}()
	f()
}

// ReadPooled returns what Read returns, byte for byte, for reads of every
// size from every offset, and after the buffers of earlier reads were
// released and reused.
func TestReadPooledMatchesRead(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), FS: vfs.OS()}) // a real file: pread, not a copy
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	id := SegmentID(1)
	if err := s.Create(id, 0); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	off := uint64(0)
	for i := range 300 {
		n := 1 + rng.IntN(8)
		recs := make([]segment.Record, n)
		for j := range recs {
			v := make([]byte, rng.IntN(12<<10))
			for k := range v {
				v[k] = byte(i + j + k)
			}
			recs[j] = segment.Record{Key: []byte{byte(i)}, Value: v, Timestamp: int64(i)}
		}
		batch, err := segment.EncodeBatch(nil, off, recs, segment.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, id, batch); err != nil {
			t.Fatal(err)
		}
		off += uint64(n)
	}
	var held []*ReadBuf
	for range 400 {
		from := rng.Uint64N(off)
		maxBytes := 1 + rng.IntN(300<<10)
		upTo := uint64(math.MaxUint64)
		if rng.IntN(4) == 0 {
			upTo = from + rng.Uint64N(off-from+1)
		}
		want, wantNext, err := s.Read(id, from, maxBytes, upTo)
		if err != nil {
			t.Fatal(err)
		}
		got, rb, next, err := s.ReadPooled(id, from, maxBytes, upTo)
		if err != nil || next != wantNext || !bytes.Equal(got, want) || (rb == nil) != (got == nil) {
			t.Fatalf("ReadPooled(%d, %d, %d): %d bytes next %d %v, Read: %d bytes next %d", from, maxBytes, upTo, len(got), next, err, len(want), wantNext)
		}
		held = append(held, rb)
		if len(held) > 8 { // release some while others are held
			k := rng.IntN(len(held))
			held[k].Release()
			held = append(held[:k], held[k+1:]...)
		}
	}
	for _, rb := range held {
		rb.Release()
	}
}
