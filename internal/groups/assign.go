package groups

import (
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Plan is the input of one group's assignment under one generation,
// copied out of the Coordinator. Computing it costs O(members × ranges),
// so an owner that serialises the Coordinator with a lock computes it
// after releasing the lock and hands the result back with Install: other
// groups, and everything else the lock guards, do not wait on it.
type Plan struct {
	Topic      uint64
	Group      string
	Generation uint64
	Ranges     []uint64 // the group's ranges, ascending
	Members    []string // the group's members, ascending
}

// Compute runs the assignment: Assign(p.Ranges, p.Members).
func (p *Plan) Compute() map[string][]uint64 { return Assign(p.Ranges, p.Members) }

// Assign maps every range to one member by rendezvous hashing. The result
// has a key for every member (nil when it gets no range), each value
// ascending. Duplicate ranges or members count once; input order does not
// matter. With no members the result is empty.
func Assign(ranges []uint64, members []string) map[string][]uint64 {
	out := make(map[string][]uint64, len(members))
	names := slices.Clone(members)
	slices.Sort(names)
	names = slices.Compact(names)
	for _, m := range names {
		out[m] = nil
	}
	if len(names) == 0 {
		return out
	}
	var buf []byte
	for _, r := range normalize(ranges) {
		best, bestScore := names[0], uint64(0)
		for i, m := range names {
			buf = binary.BigEndian.AppendUint64(buf[:0], r)
			buf = append(buf, m...)
			// Names are ascending, so on a tie the earlier (smaller) one
			// stays: ties go to the smaller name.
			if s := xxhash.Sum64(buf); i == 0 || s > bestScore {
				best, bestScore = m, s
			}
		}
		out[best] = append(out[best], r)
	}
	return out
}

// Score is the rendezvous weight of member for range r: xxhash64 of r as
// 8 big-endian bytes followed by the member name. Assign gives r to the
// member with the highest score.
func Score(r uint64, member string) uint64 {
	buf := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(member)), r)
	return xxhash.Sum64(append(buf, member...))
}
