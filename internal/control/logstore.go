package control

import (
	"errors"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/malachi-log/malachi/internal/raft"
	"github.com/malachi-log/malachi/internal/raft/logstore"
)

// durableLog adapts the node's durable raft log (logstore.Store) to the
// host's raft.LogStore. The two differ in three places, all handled here
// the way raft.MemLogStore (the host's reference) handles them:
//   - the host passes a Ready's hard state and snapshot even when empty;
//     the store reads a non-nil one as a change, so empty ones become nil;
//   - a received snapshot no newer than the stored one is dropped (the
//     store refuses the whole Save for it, which would stop the host);
//   - a local snapshot or compaction the store already has
//     (ErrSnapOutOfDate, ErrCompacted) is not an error.
type durableLog struct{ s *logstore.Store }

var _ raft.LogStore = durableLog{}

func (d durableLog) Save(updates []raft.Update) error {
	out := make([]logstore.Update, 0, len(updates))
	for _, u := range updates {
		lu := logstore.Update{Group: u.Group, Entries: u.Entries}
		if !etcdraft.IsEmptyHardState(u.HardState) {
			lu.HardState = u.HardState
		}
		if !etcdraft.IsEmptySnap(u.Snapshot) && d.newer(u.Group, u.Snapshot) {
			lu.Snapshot = u.Snapshot
		}
		if lu.HardState == nil && lu.Snapshot == nil && len(lu.Entries) == 0 {
			continue
		}
		out = append(out, lu)
	}
	if len(out) == 0 {
		return nil
	}
	return d.s.Save(out)
}

func (d durableLog) newer(group uint64, snap *pb.Snapshot) bool {
	have, err := d.s.Storage(group).Snapshot()
	if err != nil {
		return true // let Save decide
	}
	return have.GetMetadata().GetIndex() == 0 || snap.GetMetadata().GetIndex() > have.GetMetadata().GetIndex()
}

func (d durableLog) Storage(group uint64) etcdraft.Storage { return d.s.Storage(group) }

func (d durableLog) SetSnapshot(group uint64, snap *pb.Snapshot) error {
	if err := d.s.SetSnapshot(group, snap); err != nil && !errors.Is(err, etcdraft.ErrSnapOutOfDate) {
		return err
	}
	return nil
}

func (d durableLog) Compact(group, index uint64) error {
	if err := d.s.Compact(group, index); err != nil && !errors.Is(err, etcdraft.ErrCompacted) {
		return err
	}
	return nil
}

func (d durableLog) RemoveGroup(group uint64) error { return d.s.RemoveGroup(group) }

func (d durableLog) Groups() []uint64 { return d.s.Groups() }
