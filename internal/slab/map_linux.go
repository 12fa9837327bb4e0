//go:build linux && !race

package slab

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// OffHeap reports whether regions are mapped apart from the Go heap, so
// that their bytes are not in the runtime's heap statistics.
const OffHeap = true

// mapRegion maps n bytes, a multiple of RegionSize, aligned to RegionSize,
// so that the kernel can back them with huge pages, and asks it to. Where
// transparent huge pages are off the advice is refused or ignored, and the
// memory still serves, on small pages.
func mapRegion(n int) ([]byte, error) {
	// Map RegionSize more, then keep the aligned n bytes inside and unmap
	// the rest (a head, a tail, or both, each whole pages).
	size := uintptr(n) + RegionSize
	p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	start := uintptr(p)
	aligned := (start + RegionSize - 1) &^ (RegionSize - 1)
	if head := aligned - start; head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	if tail := start + size - (aligned + uintptr(n)); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, aligned+uintptr(n)-start), tail)
	}
	r := unsafe.Slice((*byte)(unsafe.Add(p, aligned-start)), n)
	_ = unix.Madvise(r, unix.MADV_HUGEPAGE)
	return r, nil
}

// unmapRegion gives r, of which nothing is used any more, to the kernel.
func unmapRegion(r []byte) { _ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(r)), uintptr(len(r))) }
