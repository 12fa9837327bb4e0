package broker

import (
	"context"
	"sync"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/metastore"
)

// metaPlane is where the broker's metadata lives: the local metadata
// store on a single node (localMeta), the control plane's replicated
// groups in a cluster (*control.Node). Each view names what it needs, so
// a cluster serves it from the one group that holds it:
//
//   - ViewTopic, ViewID: the vnode of a topic, range or segment id (a
//     topic's ranges and segments are allocated in its vnode's shard);
//   - ViewTopicName: the vnode a topic name maps to on the ring;
//   - ViewRoot: users, ACLs and the cluster secret;
//   - ViewEach: every vnode in turn, for listings and node-wide counts.
//
// A view's fn runs under the group's read lock: it must be short and must
// not call the broker back. A view that cannot be served (a cluster node
// that has not joined yet, an id of no group) returns an error without
// calling fn; callers treat that as "not found", which is what a replica
// that is behind would answer too.
type metaPlane interface {
	Apply(ctx context.Context, cmd metadata.Command) (metadata.Result, error)
	ViewID(id uint64, fn func(*metadata.State)) error
	ViewTopic(id uint64, fn func(*metadata.State)) error
	ViewTopicName(name string, fn func(*metadata.State)) error
	ViewRoot(fn func(*metadata.State)) error
	ViewEach(fn func(group uint64, st *metadata.State)) error
	// Barrier returns once the local replica of group has applied what
	// was committed before the call (a no-op on a single node).
	Barrier(ctx context.Context, group uint64) error
	Err() error
	Close() error
}

// localMeta is the single-node metaPlane: every view reads the one state
// of the local metadata store (shard 0), whatever it asks for.
type localMeta struct{ s *metastore.Store }

func (m localMeta) Apply(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	return m.s.Apply(ctx, cmd)
}

func (m localMeta) view(fn func(*metadata.State)) error {
	m.s.View(fn)
	return nil
}

func (m localMeta) ViewID(_ uint64, fn func(*metadata.State)) error        { return m.view(fn) }
func (m localMeta) ViewTopic(_ uint64, fn func(*metadata.State)) error     { return m.view(fn) }
func (m localMeta) ViewTopicName(_ string, fn func(*metadata.State)) error { return m.view(fn) }
func (m localMeta) ViewRoot(fn func(*metadata.State)) error                { return m.view(fn) }

func (m localMeta) ViewEach(fn func(uint64, *metadata.State)) error {
	return m.view(func(st *metadata.State) { fn(0, st) })
}

func (m localMeta) Barrier(context.Context, uint64) error { return nil }
func (m localMeta) Err() error                            { return m.s.Err() }
func (m localMeta) Close() error                          { return m.s.Close() }

// segFloors keeps, per shard, one past the highest segment id the store
// has held in that shard: the lowest id open_segment may hand out there
// (metadata.Command.MinID). A sharded state refuses a floor from another
// shard, so a cluster node keeps one floor per vnode; a single node has
// only shard 0.
type segFloors struct {
	mu sync.Mutex
	by map[uint16]uint64
}

// raise keeps the floor of id's shard above id.
func (f *segFloors) raise(id uint64) {
	s := metadata.ShardOf(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = make(map[uint16]uint64)
	}
	if id >= f.by[s] {
		f.by[s] = id + 1
	}
}

// floorFor is the floor for a segment of rangeID's shard (0: none yet).
func (f *segFloors) floorFor(rangeID uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.by[metadata.ShardOf(rangeID)]
}

// plausibleSegmentID reports whether id could have been handed out by
// open_segment: below metadata.MaxSegmentID in shard 0, and within the
// counter bound of its shard's block otherwise. A file with another id is
// a stray that must not push a floor past what open_segment accepts.
func plausibleSegmentID(id uint64) bool {
	s := metadata.ShardOf(id)
	if s == 0 {
		return id < metadata.MaxSegmentID
	}
	return id-uint64(s)<<metadata.ShardShift < metadata.MaxShardSegmentCounter
}
