package raft

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Update is what one group must make durable in one cycle. Any field may
// be empty; Entries replace any conflicting suffix of the group's log.
type Update struct {
	Group     uint64
	HardState *pb.HardState
	Entries   []*pb.Entry
	// Snapshot, when not empty, was received from a leader: it replaces
	// the group's log up to its index and is written before Entries.
	Snapshot *pb.Snapshot
}

// LogStore is the node's shared durable Raft log. The host calls Save once
// per cycle with the updates of every group, so one fsync covers them all.
// internal/raft/logstore provides the durable implementation; MemLogStore
// serves tests.
type LogStore interface {
	// Save makes every update durable before returning. An error leaves
	// the store's content for these groups undefined and stops the host.
	Save(updates []Update) error
	// Storage is the read side raft uses for one group. It must reflect
	// every Save, SetSnapshot and Compact that returned.
	Storage(group uint64) etcdraft.Storage
	// SetSnapshot records a snapshot the host took of its own applied
	// state; the log is not truncated (that is Compact's job).
	SetSnapshot(group uint64, snap *pb.Snapshot) error
	// Compact discards the group's entries before index, which must not
	// be above the group's latest snapshot.
	Compact(group, index uint64) error
	// RemoveGroup deletes everything stored for the group.
	RemoveGroup(group uint64) error
	// Groups lists the groups with stored state, for recovery.
	Groups() []uint64
}

// MemLogStore is a LogStore over raft.MemoryStorage. It keeps exactly what
// Save was given, so a host rebuilt over the same MemLogStore sees what a
// restarted node would find on disk.
type MemLogStore struct {
	mu     sync.Mutex
	groups map[uint64]*etcdraft.MemoryStorage
	saves  int
}

// NewMemLogStore returns an empty in-memory log store.
func NewMemLogStore() *MemLogStore {
	return &MemLogStore{groups: make(map[uint64]*etcdraft.MemoryStorage)}
}

func (s *MemLogStore) storage(group uint64) *etcdraft.MemoryStorage {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, ok := s.groups[group]
	if !ok {
		ms = etcdraft.NewMemoryStorage()
		s.groups[group] = ms
	}
	return ms
}

// Save applies every update in order: snapshot, entries, then hard state.
func (s *MemLogStore) Save(updates []Update) error {
	for _, u := range updates {
		ms := s.storage(u.Group)
		if !etcdraft.IsEmptySnap(u.Snapshot) {
			if err := ms.ApplySnapshot(u.Snapshot); err != nil && !errors.Is(err, etcdraft.ErrSnapOutOfDate) {
				return fmt.Errorf("group %d: apply snapshot: %w", u.Group, err)
			}
		}
		if err := ms.Append(u.Entries); err != nil {
			return fmt.Errorf("group %d: append: %w", u.Group, err)
		}
		if !etcdraft.IsEmptyHardState(u.HardState) {
			if err := ms.SetHardState(u.HardState); err != nil {
				return fmt.Errorf("group %d: hard state: %w", u.Group, err)
			}
		}
	}
	s.mu.Lock()
	s.saves++
	s.mu.Unlock()
	return nil
}

// Saves reports how many times Save was called: one per host cycle that
// had something to persist.
func (s *MemLogStore) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

// Storage returns the group's MemoryStorage.
func (s *MemLogStore) Storage(group uint64) etcdraft.Storage { return s.storage(group) }

// SetSnapshot records a locally taken snapshot at snap's index.
func (s *MemLogStore) SetSnapshot(group uint64, snap *pb.Snapshot) error {
	md := snap.GetMetadata()
	_, err := s.storage(group).CreateSnapshot(md.GetIndex(), md.GetConfState(), snap.GetData())
	if errors.Is(err, etcdraft.ErrSnapOutOfDate) {
		return nil
	}
	return err
}

// Compact discards entries before index.
func (s *MemLogStore) Compact(group, index uint64) error {
	err := s.storage(group).Compact(index)
	if errors.Is(err, etcdraft.ErrCompacted) {
		return nil
	}
	return err
}

// RemoveGroup forgets the group.
func (s *MemLogStore) RemoveGroup(group uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.groups, group)
	return nil
}

// Groups lists the groups that have a hard state or a snapshot.
func (s *MemLogStore) Groups() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for g, ms := range s.groups {
		hs, _, _ := ms.InitialState()
		snap, _ := ms.Snapshot()
		if !etcdraft.IsEmptyHardState(hs) || !etcdraft.IsEmptySnap(snap) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}
