//go:build linux && !race

package slab

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// OffHeap reports whether regions are mapped apart from the Go heap, so
// that their bytes are not in the runtime's heap statistics.
const OffHeap = true

// mapRegion maps RegionSize bytes aligned to RegionSize, so that the
// kernel can back them with one huge page, and asks it to. Where
// transparent huge pages are off the advice is refused or ignored, and
// the region still serves, on small pages.
func mapRegion() ([]byte, error) {
	// Map twice the size, then keep the aligned RegionSize inside and
	// unmap the rest (a head, a tail, or both, each whole pages).
	p, err := unix.MmapPtr(-1, 0, nil, 2*RegionSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	start := uintptr(p)
	aligned := (start + RegionSize - 1) &^ (RegionSize - 1)
	if head := aligned - start; head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	if tail := start + 2*RegionSize - (aligned + RegionSize); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, aligned+RegionSize-start), tail)
	}
	r := unsafe.Slice((*byte)(unsafe.Add(p, aligned-start)), RegionSize)
	_ = unix.Madvise(r, unix.MADV_HUGEPAGE)
	return r, nil
}

// unmapRegion gives r, all of whose chunks are back, to the kernel.
func unmapRegion(r []byte) { _ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(r)), uintptr(len(r))) }
