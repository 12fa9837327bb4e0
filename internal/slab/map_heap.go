//go:build !linux || race

package slab

// OffHeap reports whether regions are mapped apart from the Go heap, so
// that their bytes are not in the runtime's heap statistics.
const OffHeap = false

// mapRegion takes a region from the heap, aligned inside an allocation of
// twice its size, where huge pages cannot be asked for (not Linux) or
// should not be: the race detector watches heap memory only, and the tests
// run under it must still see races on the bytes of chunks. The pool's
// bookkeeping is the same as with mapped regions.
func mapRegion() ([]byte, error) {
	mem := make([]byte, 2*RegionSize)
	skip := int((RegionSize - base(mem)%RegionSize) % RegionSize)
	return mem[skip : skip+RegionSize : skip+RegionSize], nil
}

// unmapRegion leaves r to the collector.
func unmapRegion([]byte) {}
