package metadata

// Buddy arithmetic on ranges. A topic's keyspace is [0, 2^bits); every range
// is a block whose size is a power of two and whose Start is a multiple of
// its size. Splitting halves a block; two blocks merge only with their buddy,
// the other half of the block they would form.

func keyspaceSize(bits uint8) uint64 { return 1 << bits }

func isPow2(n uint64) bool { return n != 0 && n&(n-1) == 0 }

// aligned reports whether [start, start+size) is a buddy block.
func aligned(start, size uint64) bool { return isPow2(size) && start%size == 0 }

// halves returns the two halves of r's span; ok is false when r cannot split.
func halves(r Range) (lo, hi [2]uint64, ok bool) {
	size := r.Size()
	if size < 2 {
		return lo, hi, false
	}
	mid := r.Start + size/2
	return [2]uint64{r.Start, mid}, [2]uint64{mid, r.End}, true
}

// buddies reports whether a and b are the two halves of one block: equal
// size and a.Start XOR size == b.Start.
func buddies(a, b Range) bool {
	size := a.Size()
	return isPow2(size) && b.Size() == size && a.Start^size == b.Start
}
