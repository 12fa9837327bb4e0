// Package keyspace maps record keys to positions in a topic's keyspace and
// does the buddy-block arithmetic that ranges split and merge by.
//
// # Positions
//
// A topic has a keyspace [0, 2^bits) with bits in [1, MaxBits]. A key's
// position is the top bits of a 64-bit hash of the key bytes:
//
//	Position(key, bits) = Hash(key) >> (64 - bits)
//
// Hash is xxhash64 (XXH64, github.com/cespare/xxhash/v2) with seed 0 over the
// raw key bytes. The hash is part of the on-disk and cursor contract: ranges
// stored by the control plane, cursor slices handed to clients and every
// routing decision depend on it, so it must never change. keyspace_test.go
// pins golden values; a change that breaks them breaks every existing
// deployment. Taking the top bits (not a modulus) means a key's position at
// bits+1 is its position at bits with one more bit appended, so the key stays
// inside the same buddy block whatever the keyspace size.
//
// A nil key and an empty key hash the same (the hash sees no bytes); callers
// that route keyless records differently must do so before calling Position.
//
// # Spans and buddies
//
// A range covers a Span: a half-open interval [Start, End) whose size is a
// power of two and whose Start is a multiple of that size. Such blocks form a
// binary tree over the keyspace, rooted at Root(bits):
//
//	[0,8)
//	├── [0,4)
//	│   ├── [0,2)   [2,4)
//	└── [4,8)
//	    ├── [4,6)   [6,8)
//
// Split halves a block; the two halves are buddies (Start XOR Size gives the
// other's Start) and Merge joins buddies back into their parent. Any two
// aligned blocks either nest or are disjoint, never partially overlap, which
// is what keeps lineage reads and cursor slices simple. The package is pure:
// no I/O, no clock, no goroutines, no locks.
package keyspace

import (
	"errors"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

const (
	// DefaultBits is the keyspace size of a topic created without one.
	DefaultBits = 16
	// MaxBits is the largest keyspace: positions then fit in 32 bits.
	MaxBits = 32
	// MaxInitialRanges bounds the ranges a topic may start with, so a
	// request cannot make Initial allocate without bound.
	MaxInitialRanges = 1 << 16
)

var (
	// ErrInvalidBits is returned for a keyspace size outside [1, MaxBits].
	ErrInvalidBits = errors.New("keyspace: invalid keyspace bits")
	// ErrInvalidCount is returned by Initial for a range count that is not a
	// power of two, exceeds 2^bits or exceeds MaxInitialRanges.
	ErrInvalidCount = errors.New("keyspace: invalid range count")
)

// Hash is the frozen key hash: xxhash64, seed 0, over the key bytes.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// Position folds key into [0, 2^bits) by keeping the top bits of Hash.
// bits should satisfy ValidBits; 0 yields 0 and values of 64 or more yield
// the whole hash.
func Position(key []byte, bits uint8) uint64 {
	switch {
	case bits == 0:
		return 0
	case bits >= 64:
		return Hash(key)
	}
	return Hash(key) >> (64 - bits)
}

// ValidBits reports whether b is a usable keyspace size: 1..MaxBits.
func ValidBits(b uint8) bool { return b >= 1 && b <= MaxBits }

// Span is the block [Start, End) of a keyspace. A valid span has a size that
// is a power of two and a Start aligned to that size (see Valid).
type Span struct{ Start, End uint64 }

// Root returns the whole keyspace [0, 2^bits). bits should satisfy ValidBits.
func Root(bits uint8) Span { return Span{0, 1 << bits} }

// Valid reports whether s is a non-empty, power-of-two sized, aligned block.
func (s Span) Valid() bool {
	size := s.Size()
	return s.End > s.Start && size&(size-1) == 0 && s.Start&(size-1) == 0
}

// Size is End - Start.
func (s Span) Size() uint64 { return s.End - s.Start }

// Log2Size is log2(Size()) for a valid span.
func (s Span) Log2Size() uint8 { return uint8(bits.TrailingZeros64(s.Size())) }

// Contains reports whether pos lies in [Start, End).
func (s Span) Contains(pos uint64) bool { return pos >= s.Start && pos < s.End }

// ContainsSpan reports whether o lies entirely inside s (s contains itself).
func (s Span) ContainsSpan(o Span) bool { return o.Start >= s.Start && o.End <= s.End }

// Overlaps reports whether s and o share at least one position.
func (s Span) Overlaps(o Span) bool { return s.Start < o.End && o.Start < s.End }

// Split returns the lower and upper halves of s; ok is false when s is too
// small to split (Size() < 2).
func (s Span) Split() (lo, hi Span, ok bool) {
	if s.Size() < 2 {
		return Span{}, Span{}, false
	}
	mid := s.Start + s.Size()/2
	return Span{s.Start, mid}, Span{mid, s.End}, true
}

// Buddy returns the other half of s's parent block. The buddy of a root lies
// outside the keyspace; callers never merge a root.
func (s Span) Buddy() Span {
	size := s.Size()
	start := s.Start ^ size
	return Span{start, start + size}
}

// Parent returns the block s is a half of (the union of s and its Buddy).
func (s Span) Parent() Span {
	size := s.Size() * 2
	start := s.Start &^ (size - 1)
	return Span{start, start + size}
}

// AreBuddies reports whether a and b are the two halves of one block: both
// valid, equal size, and a.Start XOR size == b.Start.
func AreBuddies(a, b Span) bool {
	return a.Valid() && b.Valid() && a.Size() == b.Size() && a.Start^a.Size() == b.Start
}

// Merge returns the parent block of two buddies, in either order.
func Merge(a, b Span) (Span, bool) {
	if !AreBuddies(a, b) {
		return Span{}, false
	}
	return a.Parent(), true
}

// Initial tiles Root(bits) with n equal blocks in ascending order. n must be a
// power of two, at most 2^bits and at most MaxInitialRanges.
func Initial(bits uint8, n int) ([]Span, error) {
	if !ValidBits(bits) {
		return nil, ErrInvalidBits
	}
	if n < 1 || n&(n-1) != 0 || n > MaxInitialRanges || uint64(n) > uint64(1)<<bits {
		return nil, ErrInvalidCount
	}
	size := (uint64(1) << bits) / uint64(n)
	spans := make([]Span, n)
	for i := range spans {
		start := uint64(i) * size
		spans[i] = Span{start, start + size}
	}
	return spans, nil
}
