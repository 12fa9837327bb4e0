// Package slab hands out byte chunks of 1 KiB to 2 MiB carved from 2 MiB
// regions of memory mapped apart from the Go heap, which the kernel is
// asked to back with transparent huge pages, and large buffers (Large)
// mapped likewise.
//
// Why: on a virtual machine a TLB miss walks the guest's page tables and
// the host's, and the first touch of a page faults to the host; with 4 KiB
// pages both are dear. Two users pay them most:
//   - A producer writing to many ranges appends each record to one of as
//     many partly filled chunks, so that consecutive records land on
//     different pages: taking its chunks from huge pages cut the client's
//     CPU per record by about 40% over 2,000,000 records (docs/perf.md,
//     "Chunks from huge pages"; less over longer runs, where first touches
//     weigh less).
//   - A node's reads go into pooled buffers (storage.ReadPool); a reader of
//     many ranges holds many at once, and the first read after a quiet
//     spell touches fresh pages by the thousand.
//
// The Go heap does not ask for huge pages (the runtime dropped
// MADV_HUGEPAGE), and most machines leave transparent huge pages to the
// programs that ask (enabled=madvise), so the chunks come from mappings of
// our own.
//
// A chunk is handed back explicitly with Put, and only then: unlike heap
// memory it is not collected, so a chunk its owner drops stays taken. The
// pool is bounded for that reason (Limit bytes mapped; beyond it Get
// allocates on the heap), and a region is unmapped once all its chunks are
// back, but for one of each size kept for the next burst (a region of
// which some chunks are still taken stays mapped whole). Putting back a
// chunk that is free, or a slice that is not a chunk's whole, panics:
// either would hand the same memory to two owners. (A stale second Put of
// a chunk given out again meanwhile cannot be told from its new owner's.)
//
// Under the race detector, which watches only the Go heap, and on systems
// other than Linux, the regions are heap memory (map_heap.go): the same
// bookkeeping, on small pages.
package slab

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// Sizes of the chunks Get hands out from the regions: powers of two from
// MinSize to MaxSize. A request for more than MaxSize is allocated on the
// heap.
const (
	MinSize    = 1 << minShift
	MaxSize    = 1 << maxShift
	RegionSize = 2 << 20 // a huge page on amd64 and arm64 (4 KiB base pages)

	minShift = 10
	maxShift = 21 // a whole region
	classes  = maxShift - minShift + 1
	// Limit bounds the bytes mapped: chunks given out, free ones, and
	// the regions kept empty, by the process's pool. It is far above what
	// the producers of one process hold (each bounds its own buffer, 64 MiB
	// by default). A node's reads take their chunks from a pool of their
	// own (storage.ReadPool).
	Limit = 1 << 30
	// keptEmpty is how many regions of each size with no chunk given out
	// stay mapped for the next burst rather than going back to the
	// kernel: at most 2 MiB per size idle (24 MiB in all), and a producer
	// whose one batch comes and goes does not map and carve a region for
	// each.
	keptEmpty = 1
)

// region is RegionSize bytes carved into chunks of one size.
type region struct {
	mem   []byte
	shift uint8
	free  []uint16 // indexes of the chunks not given out
	taken []uint64 // bit i: chunk i is given out
}

// chunks is how many chunks r holds.
func (r *region) chunks() int { return RegionSize >> r.shift }

// Pool is a set of regions and the chunks carved from them, bounded by the
// bytes it maps. The package's functions use the process's pool; an owner
// that needs a bound of its own on what its chunks keep mapped (a region
// stays mapped while any chunk of it is taken) makes its own (NewPool).
// One mutex guards it: a chunk lives for many records or a whole read, so
// Get and Put are far rarer than the writes into chunks.
type Pool struct {
	mu      sync.Mutex
	regions map[uintptr]*region // by base address
	partial [classes][]*region  // regions of each size with free chunks
	empty   [classes]int        // of those, the ones with no chunk given out
	mapped  int
	inUse   int
	large   map[uintptr][]byte // Large's buffers, by base address
	limit   int                // most bytes mapped
	heap    bool               // mapping failed once: the heap serves from now on
}

var the = NewPool(Limit)

// NewPool returns a pool that maps at most limit bytes.
func NewPool(limit int) *Pool {
	return &Pool{regions: make(map[uintptr]*region), large: make(map[uintptr][]byte), limit: limit}
}

// Get returns an empty slice of capacity n rounded up to a power of two
// (at least MinSize): a chunk of a region if n <= MaxSize and the pool is
// within Limit, else heap memory, which Put ignores.
func Get(n int) []byte { return the.Get(n) }

// Get is the package's Get for p.
func (p *Pool) Get(n int) []byte {
	k := max(bits.Len(uint(max(n, 1)-1)), minShift)
	if k > maxShift {
		return make([]byte, 0, n)
	}
	if b := p.get(k); b != nil {
		return b
	}
	return make([]byte, 0, 1<<k)
}

// TryGet is Get without the heap: nil when no region can serve n (above
// MaxSize, past the pool's limit, or no mappings here).
func (p *Pool) TryGet(n int) []byte {
	k := max(bits.Len(uint(max(n, 1)-1)), minShift)
	if k > maxShift {
		return nil
	}
	return p.get(k)
}

// Put hands back a chunk Get returned, whose bytes are used no more, and
// reports whether it was one of the pool's (false: heap memory, left to
// the collector or to the caller's own pool).
func Put(b []byte) bool { return the.put(b) }

// Put is the package's Put for p's chunks.
func (p *Pool) Put(b []byte) bool { return p.put(b) }

// Stats reports the bytes mapped and the bytes of chunks given out.
func Stats() (mapped, inUse int) { return the.stats() }

// Stats is the package's Stats for p.
func (p *Pool) Stats() (mapped, inUse int) { return p.stats() }

func (p *Pool) stats() (mapped, inUse int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mapped, p.inUse
}

func (p *Pool) get(k int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heap {
		return nil
	}
	c := k - minShift
	if len(p.partial[c]) == 0 {
		r := p.mapLocked(uint8(k))
		if r == nil {
			return nil
		}
		p.partial[c] = append(p.partial[c], r)
		p.empty[c]++
	}
	r := p.partial[c][len(p.partial[c])-1]
	if len(r.free) == r.chunks() {
		p.empty[c]--
	}
	i := r.free[len(r.free)-1]
	r.free = r.free[:len(r.free)-1]
	r.taken[i/64] |= 1 << (i % 64)
	if len(r.free) == 0 {
		p.partial[c] = p.partial[c][:len(p.partial[c])-1]
	}
	p.inUse += 1 << k
	off := int(i) << k
	return r.mem[off:off:(off + 1<<k)]
}

// mapLocked maps a region of 1<<k-byte chunks, all free, within Limit; nil
// if it cannot. The last chunk is handed out first, so that a region fills
// from its start.
func (p *Pool) mapLocked(k uint8) *region {
	if p.mapped+RegionSize > p.limit {
		return nil
	}
	mem, err := mapRegion(RegionSize)
	if err != nil {
		p.heap = true // no mappings here: the heap serves from now on
		return nil
	}
	r := &region{mem: mem, shift: k}
	n := r.chunks()
	r.free = make([]uint16, n)
	for i := range r.free {
		r.free[i] = uint16(n - 1 - i)
	}
	r.taken = make([]uint64, (n+63)/64)
	p.regions[base(mem)] = r
	p.mapped += RegionSize
	return r
}

func (p *Pool) put(b []byte) bool {
	if cap(b) == 0 {
		return false
	}
	addr := base(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.regions[addr&^(RegionSize-1)]
	if r == nil {
		return false
	}
	size := uintptr(1) << r.shift
	off := addr - base(r.mem)
	if uintptr(cap(b)) != size || off%size != 0 {
		panic(fmt.Sprintf("slab: Put of %d bytes at offset %d of a region of %d-byte chunks", cap(b), off, size))
	}
	i := uint16(off >> r.shift)
	if r.taken[i/64]&(1<<(i%64)) == 0 {
		panic(fmt.Sprintf("slab: chunk %d of a region of %d-byte chunks put twice", i, size))
	}
	r.taken[i/64] &^= 1 << (i % 64)
	r.free = append(r.free, i)
	p.inUse -= int(size)
	c := int(r.shift) - minShift
	if len(r.free) == 1 { // it was full: it has room again
		p.partial[c] = append(p.partial[c], r)
	}
	if len(r.free) == r.chunks() { // all back (a region of one chunk: both)
		if p.empty[c] < keptEmpty {
			p.empty[c]++
		} else {
			p.unmapLocked(c, r)
		}
	}
	return true
}

// unmapLocked gives r, a region of size class c with every chunk back, to
// the kernel.
func (p *Pool) unmapLocked(c int, r *region) {
	for j, q := range p.partial[c] {
		if q == r {
			p.partial[c] = append(p.partial[c][:j], p.partial[c][j+1:]...)
			break
		}
	}
	delete(p.regions, base(r.mem))
	p.mapped -= RegionSize
	unmapRegion(r.mem)
}

// base is the address of b's first byte (of its capacity, if empty).
func base(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Large returns an empty buffer of capacity n rounded up to a multiple of
// RegionSize, from a mapping of its own on huge pages, for one owner that
// hands it back with FreeLarge: a buffer of megabytes refilled over and
// over (the node journal's round) otherwise takes a TLB miss every 4 KiB.
// Beyond Limit, or where it cannot be mapped, it is heap memory.
func Large(n int) []byte { return the.Large(n) }

// FreeLarge hands back a buffer of Large, whose bytes are used no more;
// any other slice, nil included, is left alone.
func FreeLarge(b []byte) { the.freeLarge(b) }

func (p *Pool) Large(n int) []byte {
	size := (max(n, 1) + RegionSize - 1) &^ (RegionSize - 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heap || p.mapped+size > p.limit {
		return make([]byte, 0, n)
	}
	mem, err := mapRegion(size)
	if err != nil {
		return make([]byte, 0, n) // this size only: chunks may still map
	}
	p.large[base(mem)] = mem
	p.mapped += size
	return mem[:0]
}

func (p *Pool) freeLarge(b []byte) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mem, ok := p.large[base(b)]
	if !ok {
		return
	}
	delete(p.large, base(b))
	p.mapped -= len(mem)
	unmapRegion(mem)
}
