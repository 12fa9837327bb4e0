package placement

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/malachi-log/malachi/internal/keyspace"
)

// DefaultFactor is the replication factor used when a request gives none.
const DefaultFactor = 3

// Node is a live node as placement sees it.
type Node struct {
	ID uint64
	// Attributes are the node's labels (rack=a, zone=z1); SpreadBy names
	// one of them.
	Attributes map[string]string
}

// ranked is a node with its HRW score for one key.
type ranked struct {
	node  Node
	score uint64
}

// score is the HRW weight of node id for key: xxhash64(key || id).
func score(key []byte, id uint64) uint64 {
	buf := make([]byte, 0, len(key)+8)
	buf = append(buf, key...)
	return keyspace.Hash(binary.BigEndian.AppendUint64(buf, id))
}

// rank orders nodes by descending score for key, ties to the smaller id.
func rank(key []byte, nodes []Node) []ranked {
	out := make([]ranked, len(nodes))
	for i, n := range nodes {
		out[i] = ranked{node: n, score: score(key, n.ID)}
	}
	slices.SortFunc(out, func(a, b ranked) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.node.ID, b.node.ID)
	})
	return out
}

func vnodeKey(vnode uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{'v'}, vnode)
}

func segmentKey(topic string, rangeID, segment uint64) []byte {
	key := binary.AppendUvarint([]byte{'s'}, uint64(len(topic)))
	key = append(key, topic...)
	key = binary.BigEndian.AppendUint64(key, rangeID)
	return binary.BigEndian.AppendUint64(key, segment)
}

// clampFactor applies the default and clamps factor to n nodes.
func clampFactor(factor, n int) int {
	if factor <= 0 {
		factor = DefaultFactor
	}
	return min(factor, n)
}

// VnodeReplicas is the replica set of vnode over the live nodes: the
// factor nodes with the highest HRW score (DefaultFactor when factor <= 0,
// clamped to the number of nodes), best first. A node id listed twice
// counts once. Input order does not matter.
func VnodeReplicas(vnode uint32, nodes []Node, factor int) []uint64 {
	nodes = uniqueByID(nodes)
	factor = clampFactor(factor, len(nodes))
	out := make([]uint64, 0, factor)
	for _, r := range rank(vnodeKey(vnode), nodes)[:factor] {
		out = append(out, r.node.ID)
	}
	return out
}

// uniqueByID drops later nodes with an id seen before. The result is
// sorted by id, which keeps it independent of input order.
func uniqueByID(nodes []Node) []Node {
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b Node) bool { return a.ID == b.ID })
}
