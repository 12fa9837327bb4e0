package placement

import (
	"fmt"

	"github.com/malachi-log/malachi/internal/keyspace"
)

const (
	// DefaultVnodes is the number of vnodes of a ring created without one.
	DefaultVnodes = 8
	// MaxVnodes bounds the ring: every vnode is a Raft group on several
	// nodes, and a token must stay distinct from its neighbours.
	MaxVnodes = 1 << 16
)

// Ring is the topic-to-vnode map: Vnodes equal arcs of a 2^32 ring. The
// zero value has DefaultVnodes vnodes.
type Ring struct {
	Vnodes int
}

// Validate reports a vnode count outside [1, MaxVnodes]; zero means
// DefaultVnodes and is valid.
func (r Ring) Validate() error {
	if r.Vnodes < 0 || r.Vnodes > MaxVnodes {
		return fmt.Errorf("placement: %d vnodes: want 1..%d (0 for the default %d)", r.Vnodes, MaxVnodes, DefaultVnodes)
	}
	return nil
}

// Count is the number of vnodes. It panics on a ring that fails Validate:
// silently clamping would remap topics.
func (r Ring) Count() int {
	if err := r.Validate(); err != nil {
		panic(err)
	}
	if r.Vnodes == 0 {
		return DefaultVnodes
	}
	return r.Vnodes
}

// Point is the topic's position on the ring: the top 32 bits of
// keyspace.Hash of its name.
func Point(topic string) uint32 {
	return uint32(keyspace.Hash([]byte(topic)) >> 32)
}

// Token is the ring position of vnode v: floor(v * 2^32 / Count()).
func (r Ring) Token(v uint32) uint32 {
	return uint32(uint64(v) << 32 / uint64(r.Count()))
}

// VnodeOf is the vnode that owns topic: the first token at or after the
// topic's Point, wrapping to vnode 0.
func (r Ring) VnodeOf(topic string) uint32 {
	return r.vnodeOfPoint(Point(topic))
}

// vnodeOfPoint is the smallest v with Token(v) >= p, or 0 past the last
// token. Token(v) >= p holds exactly when v*2^32/n >= p (p is an integer),
// that is when v >= ceil(p*n / 2^32).
func (r Ring) vnodeOfPoint(p uint32) uint32 {
	n := uint64(r.Count())
	v := (uint64(p)*n + 1<<32 - 1) >> 32
	if v == n {
		return 0
	}
	return uint32(v)
}
