package storage

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/slab"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Reads into pooled buffers. A fetch answer carries the batches it read
// to the socket from the buffer they were read into; taking that buffer
// from a pool, and giving it back once the answer is written, spares
// every read an allocation the runtime zeroes and the garbage collector
// later frees (together a quarter of a consuming node's CPU).
//
// A buffer is given back only when its last holder releases it: a buffer
// reused while an answer still refers to it would send one reader's
// bytes to another. Holders count themselves (ReadBuf.Retain). In builds
// with the race detector a released buffer is overwritten at once, so a
// use after release shows as a CRC failure rather than passing unseen.

// Size classes: powers of two from 4 KiB to 2 MiB, the sizes of the slab's
// chunks, which the buffers are (see Get).
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 21 // 2 MiB, slab.MaxSize
	numClasses    = maxClassShift - minClassShift + 1
)

// classOf returns the smallest class whose buffers hold n bytes, and its
// size; ok is false when n is larger than the largest class.
func classOf(n int) (class, size int, ok bool) {
	shift := max(bits.Len(uint(max(n, 1)-1)), minClassShift) // 1<<shift >= n
	if shift > maxClassShift {
		return 0, 0, false
	}
	return shift - minClassShift, 1 << shift, true
}

// ReadPool holds released read buffers for reuse, at most max bytes of
// them; past that a released buffer goes back to the slab or, heap memory,
// to the garbage collector.
//
// Its buffers are chunks of a slab pool of its own (see Get), which maps
// at most the bytes NewReadPool was given; past that they are heap memory. That bound is on
// what stays mapped, free chunks and partly used regions included, not on
// the chunks given out: a region stays mapped whole while any chunk of it
// is taken or held here. Slab memory is not collected, so a buffer whose
// holders never release it stays taken (see broker's readhold.go); the
// bound keeps such buffers from growing the node without limit, at the
// price of reads on small pages once they fill it.
type ReadPool struct {
	mu   sync.Mutex
	free [numClasses][][]byte
	held int64
	max  int64
	// chunks is where new buffers come from.
	chunks *slab.Pool
	// poison overwrites each released buffer (see poisonReleased).
	poison bool
	stats  ReadPoolStats
}

// ReadPoolStats counts a pool's work.
type ReadPoolStats struct {
	Reused, Allocated, Dropped uint64
	// Held is the bytes of released buffers the pool keeps.
	Held int64
	// Mapped is the bytes its slab maps, and InUse those of its chunks
	// given out or held.
	Mapped, InUse int
}

// NewReadPool returns a pool that keeps at most maxBytes of free buffers,
// and maps at most mapBytes of huge pages for them.
func NewReadPool(maxBytes int64, mapBytes int) *ReadPool {
	return &ReadPool{max: maxBytes, chunks: slab.NewPool(mapBytes), poison: poisonReleased}
}

// DefaultReadPoolBytes bounds the free buffers of the shared pool the
// store reads into, and DefaultReadPoolMapped the huge pages its buffers
// come from: twice the free ones, room for the answers in flight besides.
const (
	DefaultReadPoolBytes  = 64 << 20
	DefaultReadPoolMapped = 2 * DefaultReadPoolBytes
)

// sharedReadPool is the pool Store.ReadPooled reads into: one for the
// process, as the node's reads all share one memory budget.
var sharedReadPool = NewReadPool(DefaultReadPoolBytes, DefaultReadPoolMapped)

// SharedReadPoolStats reports the shared pool's counters.
func SharedReadPoolStats() ReadPoolStats { return sharedReadPool.Stats() }

// Stats reports the pool's counters.
func (p *ReadPool) Stats() ReadPoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.Held = p.held
	st.Mapped, st.InUse = p.chunks.Stats()
	return st
}

// Get returns a buffer of len n (contents undefined), from the pool when
// one of its class is free, else a chunk of its slab (within its mapping
// bound): huge pages, so that a burst of reads (a reader of many ranges
// holds a buffer for each) touches fresh memory a huge page at a time
// rather than faulting every 4 KiB, which on a virtual machine was most
// of the cost of the first pages read after a quiet spell (docs/perf.md).
func (p *ReadPool) Get(n int) []byte {
	c, size, ok := classOf(n)
	if !ok {
		return make([]byte, n)
	}
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		p.held -= int64(cap(b))
		p.stats.Reused++
		p.mu.Unlock()
		return b[:n]
	}
	p.stats.Allocated++
	p.mu.Unlock()
	if b := p.chunks.TryGet(size); b != nil {
		return b[:n]
	}
	return make([]byte, n, size)
}

// Put takes b back. Only buffers whose capacity is exactly a class size
// are kept (those Get made); the caller must not touch b again. Past the
// pool's bound a buffer goes back to the slab, or, heap memory, to the
// collector.
func (p *ReadPool) Put(b []byte) {
	c, size, ok := classOf(cap(b))
	if !ok || size != cap(b) {
		return
	}
	b = b[:cap(b)]
	if p.poison {
		for i := range b {
			b[i] = poisonByte
		}
	}
	p.mu.Lock()
	if p.held+int64(size) <= p.max {
		p.free[c] = append(p.free[c], b)
		p.held += int64(size)
		p.mu.Unlock()
		return
	}
	p.stats.Dropped++
	p.mu.Unlock()
	p.chunks.Put(b[:0])
}

// poisonByte fills released buffers when poisoning: a batch header of
// these bytes fails its length and CRC checks.
const poisonByte = 0xdb

// ReadBuf is one pooled buffer that read batches lie in, shared by the
// answers that carry them. It goes back to its pool once every holder has
// released it; the reader that gets it holds one reference.
type ReadBuf struct {
	b    []byte
	pool *ReadPool
	refs atomic.Int32
}

func newReadBuf(p *ReadPool, b []byte) *ReadBuf {
	if b == nil {
		return nil
	}
	r := &ReadBuf{b: b, pool: p}
	r.refs.Store(1)
	return r
}

// Retain adds n holders. Only a holder may add others: a buffer already
// released may be in another reader's hands.
func (r *ReadBuf) Retain(n int) {
	if r == nil || n == 0 {
		return
	}
	if r.refs.Add(int32(n)) <= int32(n) {
		panic("storage: read buffer retained after its release")
	}
}

// Release drops one holder; the last gives the buffer back. Releasing
// more often than held panics: the buffer may already serve another read.
func (r *ReadBuf) Release() {
	if r == nil {
		return
	}
	switch n := r.refs.Add(-1); {
	case n == 0:
		b := r.b
		r.b = nil
		r.pool.Put(b)
	case n < 0:
		panic(fmt.Sprintf("storage: read buffer released too often (%d more than held)", -n))
	}
}

// Len is the buffer's size: what holding it costs.
func (r *ReadBuf) Len() int {
	if r == nil {
		return 0
	}
	return cap(r.b)
}

// ReadPooled is Read into a buffer of the shared read pool. buf holds the
// returned batches (nil when none are returned); the caller releases it
// once nothing refers to batches any more, and must not use them after.
func (s *Store) ReadPooled(id SegmentID, from uint64, maxBytes int, upTo uint64) (batches []byte, buf *ReadBuf, next uint64, err error) {
	_, h, err := s.acquire(id)
	if err != nil {
		return nil, nil, from, err
	}
	defer s.release(h)
	out, held, next, err := h.log.ReadInto(from, maxBytes, upTo, sharedReadPool)
	return out, newReadBuf(sharedReadPool, held), next, err
}

var _ segment.Buffers = (*ReadPool)(nil)

// BatchHeaderAt is segment.Segment.BatchHeaderAt for segment id: the
// header of its durable batch based at from, when its index places one
// there.
func (s *Store) BatchHeaderAt(id SegmentID, from uint64) (segment.BatchHeader, bool) {
	_, h, err := s.acquire(id)
	if err != nil {
		return segment.BatchHeader{}, false
	}
	defer s.release(h)
	return h.log.BatchHeaderAt(from)
}
