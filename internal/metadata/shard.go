package metadata

import "fmt"

// Shards make ids unique across the states of a cluster. The metadata of a
// cluster is split into vnodes, each a State of its own; a State made by
// NewShard allocates its topic, range and segment ids in its shard's block
// of the id space:
//
//	id = shard << ShardShift | counter,   counter in [1, 2^ShardShift)
//
// so any id names the shard (vnode) that allocated it (ShardOf), and ids of
// different shards never collide. Shard 0 is the single-node state of New:
// its ids are the plain counters they always were, and its snapshot bytes
// are unchanged. The shard is kept in the snapshot.

const (
	// ShardShift is the bit position of the shard in an id: 48 bits of
	// counter per shard, 16 bits of shard.
	ShardShift = 48
	// MaxShard is the largest shard.
	MaxShard = 1<<(64-ShardShift) - 1
	// MaxShardSegmentCounter bounds the counter part of an open_segment's
	// MinID in a sharded state, as MaxSegmentID does in shard 0: far below
	// the block's end, so the counter never runs into the next shard.
	MaxShardSegmentCounter = 1 << 46
)

// ShardOf returns the shard that allocated id (0 for the ids of a
// single-node state).
func ShardOf(id uint64) uint16 { return uint16(id >> ShardShift) }

// shardBase is the id below the shard's first id.
func shardBase(shard uint16) uint64 { return uint64(shard) << ShardShift }

// NewShard returns an empty state that allocates ids in shard's block.
// NewShard(0) is New().
func NewShard(shard uint16) *State {
	s := New()
	s.shard = shard
	base := shardBase(shard)
	s.lastTopic, s.lastRange, s.lastSegment = base, base, base
	return s
}

// Shard returns the state's shard.
func (s *State) Shard() uint16 { return s.shard }

// validMinID reports whether an open_segment's MinID may be used here. A
// sharded state takes only a floor inside its own block: a floor from
// another shard says nothing about this one, and is refused so that a
// caller passing the wrong floor hears of it.
func (s *State) validMinID(minID uint64) bool {
	if s.shard == 0 {
		return minID <= MaxSegmentID
	}
	return minID == 0 || ShardOf(minID) == s.shard && minID-shardBase(s.shard) <= MaxShardSegmentCounter
}

// checkShard: the counters and every id lie in the shard's block.
func (s *State) checkShard() error {
	if s.shard == 0 {
		return nil
	}
	base := shardBase(s.shard)
	for _, c := range []uint64{s.lastTopic, s.lastRange, s.lastSegment} {
		if c < base || ShardOf(c) != s.shard {
			return fmt.Errorf("counter %d outside shard %d", c, s.shard)
		}
	}
	for id := range s.topics {
		if id <= base {
			return fmt.Errorf("topic %d outside shard %d", id, s.shard)
		}
	}
	for id := range s.ranges {
		if id <= base {
			return fmt.Errorf("range %d outside shard %d", id, s.shard)
		}
	}
	for id := range s.segments {
		if id <= base {
			return fmt.Errorf("segment %d outside shard %d", id, s.shard)
		}
	}
	return nil
}
