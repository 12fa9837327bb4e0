package storage

import (
	"bytes"
	"context"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Every size up to the largest class maps to the smallest class that
// holds it: the power of two at or above it, from 4 KiB.
func TestReadPoolClasses(t *testing.T) {
	for n := 1; n <= 1<<maxClassShift; n += 1 + n/97 {
		c, size, ok := classOf(n)
		want := max(1<<bits.Len(uint(n-1)), 1<<minClassShift)
		if !ok || size != want || c < 0 || c >= numClasses || 1<<(minClassShift+c) != size {
			t.Fatalf("classOf(%d) = %d, %d, %v; want size %d", n, c, size, ok, want)
		}
	}
	if _, _, ok := classOf(1<<maxClassShift + 1); ok {
		t.Fatal("a read larger than the largest class was given a class")
	}
}

// The pool reuses what it is given back, keeps at most its bound, and
// takes only buffers of a class's exact size.
func TestReadPoolReusesWithinItsBound(t *testing.T) {
	p := NewReadPool(64<<10, 1<<20)
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

// The pool's buffers are slab chunks up to its off-heap bound, heap memory
// past it; those it drops go back to the slab, so the count comes back to
// what the free buffers hold.
func TestReadPoolBoundsItsSlabChunks(t *testing.T) {
	p := NewReadPool(32<<10, 64<<10)
	var bufs [][]byte
	for range 6 {
		bufs = append(bufs, p.Get(16<<10))
	}
	if got := p.Stats().OffHeap; got != 64<<10 {
		t.Fatalf("off heap %d after six 16 KiB buffers, want the bound, 64 KiB", got)
	}
	for _, b := range bufs {
		p.Put(b)
	}
	st := p.Stats()
	if st.Held != 32<<10 || st.OffHeap != 32<<10 {
		t.Fatalf("after all came back: %+v, want 32 KiB held, all of it off heap", st)
	}
}

// A buffer goes back when its last holder releases it; releasing more
// often than held, or retaining a released buffer, panics rather than hand
// one reader's bytes to another.
func TestReadBufCountsItsHolders(t *testing.T) {
	p := NewReadPool(1<<20, 1<<20)
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
