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

// Every size up to the largest class maps to the smallest class that
// holds it, and the classes grow by at most 1.5 times.
func TestReadPoolClasses(t *testing.T) {
	last := 0
	for n := 1; n <= 1<<maxClassShift; n += 1 + n/97 {
		c, size, ok := classOf(n)
		if !ok || size < n || c < 0 || c >= numClasses {
			t.Fatalf("classOf(%d) = %d, %d, %v", n, c, size, ok)
		}
		if c > 0 {
			_, below, _ := classOf(size - 1)
			if below != size {
				t.Fatalf("classOf(%d) = %d, but %d bytes took class size %d", n, size, size-1, below)
			}
		}
		if size < last {
			t.Fatalf("class sizes shrink: %d after %d", size, last)
		}
		last = size
	}
	for c := 1; c < numClasses; c++ {
		prev := classSize(t, c-1)
		if s := classSize(t, c); s > prev*3/2 || s <= prev {
			t.Fatalf("class %d is %d bytes after %d", c, s, prev)
		}
	}
	if _, _, ok := classOf(1<<maxClassShift + 1); ok {
		t.Fatal("a read larger than the largest class was given a class")
	}
}

func classSize(t *testing.T, c int) int {
	t.Helper()
	for n := 1; n <= 1<<maxClassShift; n *= 2 {
		for _, m := range []int{n, n * 3 / 2} {
			if got, size, _ := classOf(m); got == c {
				return size
			}
		}
	}
	t.Fatalf("no size maps to class %d", c)
	return 0
}

// The pool reuses what it is given back, keeps at most its bound, and
// takes only buffers of a class's exact size.
func TestReadPoolReusesWithinItsBound(t *testing.T) {
	p := NewReadPool(64 << 10)
	a := p.Get(5000)
	if len(a) != 5000 || cap(a) != 6<<10 {
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
}

// A buffer goes back when its last holder releases it; releasing more
// often than held, or retaining a released buffer, panics rather than hand
// one reader's bytes to another.
func TestReadBufCountsItsHolders(t *testing.T) {
	p := NewReadPool(1 << 20)
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
