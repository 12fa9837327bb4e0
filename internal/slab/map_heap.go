//go:build !linux || race

package slab

// OffHeap reports whether regions are mapped apart from the Go heap, so
// that their bytes are not in the runtime's heap statistics.
const OffHeap = false

// mapRegion takes n bytes (a multiple of RegionSize) from the heap,
// aligned to RegionSize inside an allocation of RegionSize more, where huge pages cannot be asked for (not Linux) or
// should not be: the race detector watches heap memory only, and the tests
// run under it must still see races on the bytes of chunks. The pool's
// bookkeeping is the same as with mapped regions.
func mapRegion(n int) ([]byte, error) {
	mem := make([]byte, n+RegionSize)
	skip := int((RegionSize - base(mem)%RegionSize) % RegionSize)
	return mem[skip : skip+n : skip+n], nil
}

// unmapRegion leaves r to the collector.
func unmapRegion([]byte) {}
