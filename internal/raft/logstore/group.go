package logstore

import (
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// groupState is one group's live log. A published groupState is never
// changed: every transition returns a new one, sharing what it can, so
// readers hold one without a lock while a Save stages the next.
//
// ents[0] is a dummy entry at the compaction point, as in
// raft.MemoryStorage: its index and term answer Term(FirstIndex()-1), and
// ents[i] has index ents[0].Index + i.
type groupState struct {
	hard *pb.HardState // nil until one is saved
	snap *pb.Snapshot  // never nil; index 0 if none
	ents []*pb.Entry
	size int64 // encoded bytes of entries and snapshot data held
}

var emptyGroup = &groupState{
	snap: ownSnapshot(nil),
	ents: []*pb.Entry{dummyEntry(0, 0)},
}

func dummyEntry(index, term uint64) *pb.Entry {
	return &pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term)}
}

func (g *groupState) offset() uint64     { return g.ents[0].GetIndex() }
func (g *groupState) firstIndex() uint64 { return g.offset() + 1 }
func (g *groupState) lastIndex() uint64  { return g.offset() + uint64(len(g.ents)) - 1 }
func (g *groupState) snapIndex() uint64  { return g.snap.GetMetadata().GetIndex() }

func (g *groupState) clone() *groupState { c := *g; return &c }

func entriesSize(ents []*pb.Entry) int64 {
	var n int64
	for _, e := range ents {
		n += int64(proto.Size(e))
	}
	return n
}

// withReset replaces the log with a snapshot and a dummy entry.
func (g *groupState) withReset(dummy *pb.Entry, snap *pb.Snapshot) *groupState {
	c := g.clone()
	c.snap = ownSnapshot(snap)
	c.ents = []*pb.Entry{dummy}
	c.size = int64(len(c.snap.GetData()))
	return c
}

// withAppliedSnapshot is raft.MemoryStorage.ApplySnapshot: a snapshot from
// the leader replaces the whole log.
func (g *groupState) withAppliedSnapshot(snap *pb.Snapshot) (*groupState, error) {
	idx := snap.GetMetadata().GetIndex()
	if g.snapIndex() != 0 && g.snapIndex() >= idx {
		return nil, fmt.Errorf("%w: snapshot at %d, have %d", raft.ErrSnapOutOfDate, idx, g.snapIndex())
	}
	return g.withReset(dummyEntry(idx, snap.GetMetadata().GetTerm()), proto.Clone(snap).(*pb.Snapshot)), nil
}

// ownSnapshot fills in every field raft's getters and Ensure helpers would
// set, so that no reader ever writes to a published snapshot. snap must
// not be shared.
func ownSnapshot(snap *pb.Snapshot) *pb.Snapshot {
	snap = pb.EnsureSnapshot(snap)
	pb.EnsureConfState(snap.Metadata.ConfState)
	return snap
}

// withEntries is raft.MemoryStorage.Append: entries at or before the
// compaction point are skipped, a conflicting suffix is replaced, and a
// gap is refused rather than a panic.
func (g *groupState) withEntries(ents []*pb.Entry) (*groupState, error) {
	for i, e := range ents {
		if e.GetIndex() != ents[0].GetIndex()+uint64(i) {
			return nil, fmt.Errorf("%w: entry %d has index %d after %d", ErrInvalid, i, e.GetIndex(), ents[0].GetIndex()+uint64(i)-1)
		}
	}
	if len(ents) == 0 || ents[len(ents)-1].GetIndex() < g.firstIndex() {
		return g, nil
	}
	if first := g.firstIndex(); first > ents[0].GetIndex() {
		ents = ents[first-ents[0].GetIndex():]
	}
	off := ents[0].GetIndex() - g.offset()
	if off > uint64(len(g.ents)) {
		return nil, fmt.Errorf("%w: entries start at %d after last index %d", ErrInvalid, ents[0].GetIndex(), g.lastIndex())
	}
	c := g.clone()
	if off == uint64(len(g.ents)) {
		// NB: a plain append writes, at most, past the end of g.ents in a
		// shared array. No state that readers can hold reaches there:
		// every state that drops entries (an overwrite, a compaction, a
		// snapshot) gets an array of its own, so only states derived
		// from g, which supersede it, use those slots.
		c.ents = append(g.ents, ents...)
	} else {
		// The full slice expression makes append copy: entries from off
		// on may still be read through g.
		c.ents = append(g.ents[:off:off], ents...)
	}
	c.size += entriesSize(ents) - entriesSize(g.ents[off:])
	return c, nil
}

func (g *groupState) withHardState(hs *pb.HardState) *groupState {
	c := g.clone()
	c.hard = &pb.HardState{Term: proto.Uint64(hs.GetTerm()), Vote: proto.Uint64(hs.GetVote()), Commit: proto.Uint64(hs.GetCommit())}
	return c
}

// withSnapshot is raft.MemoryStorage.CreateSnapshot: the state machine's
// snapshot at an index the log holds; the entries stay. A snapshot without
// a ConfState keeps the previous one.
func (g *groupState) withSnapshot(snap *pb.Snapshot) (*groupState, error) {
	idx, term := snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	switch {
	case idx <= g.snapIndex():
		return nil, fmt.Errorf("%w: snapshot at %d, have %d", raft.ErrSnapOutOfDate, idx, g.snapIndex())
	case idx > g.lastIndex():
		return nil, fmt.Errorf("%w: snapshot at %d beyond last index %d", ErrInvalid, idx, g.lastIndex())
	case idx < g.offset():
		return nil, fmt.Errorf("%w: snapshot at %d before compaction point %d", raft.ErrCompacted, idx, g.offset())
	case g.ents[idx-g.offset()].GetTerm() != term:
		return nil, fmt.Errorf("%w: snapshot at %d has term %d, the log has %d", ErrInvalid, idx, term, g.ents[idx-g.offset()].GetTerm())
	}
	s := proto.Clone(snap).(*pb.Snapshot)
	if s.GetMetadata().GetConfState() == nil {
		s.Metadata.ConfState = proto.Clone(g.snap.GetMetadata().GetConfState()).(*pb.ConfState)
	}
	s = ownSnapshot(s)
	c := g.clone()
	c.snap = s
	c.size += int64(len(s.GetData()) - len(g.snap.GetData()))
	return c, nil
}

// withCompact is raft.MemoryStorage.Compact, limited to what a snapshot
// covers: compacting past the snapshot would leave a follower that needs
// the dropped entries with nothing to catch up from.
func (g *groupState) withCompact(index uint64) (*groupState, error) {
	switch {
	case index <= g.offset():
		return nil, fmt.Errorf("%w: compact to %d, already at %d", raft.ErrCompacted, index, g.offset())
	case index > g.lastIndex():
		return nil, fmt.Errorf("%w: compact to %d beyond last index %d", ErrInvalid, index, g.lastIndex())
	case index > g.snapIndex():
		return nil, fmt.Errorf("%w: compact to %d past the snapshot at %d", ErrInvalid, index, g.snapIndex())
	}
	i := index - g.offset()
	c := g.clone()
	c.ents = make([]*pb.Entry, 1, uint64(len(g.ents))-i)
	c.ents[0] = dummyEntry(index, g.ents[i].GetTerm())
	c.ents = append(c.ents, g.ents[i+1:]...)
	c.size -= entriesSize(g.ents[1 : i+1])
	return c, nil
}

// GroupStorage is one group's raft.Storage. It reads the state made
// durable by the Store's last Save, Compact, SetSnapshot or RemoveGroup;
// a group with no state reads as a new, empty log. Safe for concurrent use.
// Its errors are raft's sentinels, unwrapped: raft compares them with ==.
type GroupStorage struct {
	s     *Store
	group uint64
}

var _ raft.Storage = (*GroupStorage)(nil)

func (gs *GroupStorage) state() *groupState {
	gs.s.mu.RLock()
	defer gs.s.mu.RUnlock()
	if g, ok := gs.s.groups[gs.group]; ok {
		return g
	}
	return emptyGroup
}

// InitialState returns the saved HardState (nil if none) and the
// snapshot's ConfState.
func (gs *GroupStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	g := gs.state()
	var hs *pb.HardState
	if g.hard != nil {
		hs = proto.Clone(g.hard).(*pb.HardState)
	}
	return hs, proto.Clone(g.snap.GetMetadata().GetConfState()).(*pb.ConfState), nil
}

// Entries returns entries [lo, hi), at most maxSize encoded bytes but at
// least one.
func (gs *GroupStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	g := gs.state()
	off := g.offset()
	switch {
	case lo <= off:
		return nil, raft.ErrCompacted
	case hi > g.lastIndex()+1 || lo > hi || len(g.ents) == 1:
		return nil, raft.ErrUnavailable
	}
	ents := g.ents[lo-off : hi-off]
	n, size := 0, uint64(0)
	for n < len(ents) {
		size += uint64(proto.Size(ents[n]))
		if n > 0 && size > maxSize {
			break
		}
		n++
	}
	// The caller may append to the slice; the capacity limit makes that
	// copy instead of writing into the group's log.
	return ents[:n:n], nil
}

// Term returns the term of entry i, for i in [FirstIndex()-1, LastIndex()].
func (gs *GroupStorage) Term(i uint64) (uint64, error) {
	g := gs.state()
	switch {
	case i < g.offset():
		return 0, raft.ErrCompacted
	case i > g.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return g.ents[i-g.offset()].GetTerm(), nil
}

// LastIndex returns the index of the last entry.
func (gs *GroupStorage) LastIndex() (uint64, error) { return gs.state().lastIndex(), nil }

// FirstIndex returns the index of the first entry that may be available.
func (gs *GroupStorage) FirstIndex() (uint64, error) { return gs.state().firstIndex(), nil }

// Snapshot returns a copy of the newest snapshot.
func (gs *GroupStorage) Snapshot() (*pb.Snapshot, error) {
	return proto.Clone(gs.state().snap).(*pb.Snapshot), nil
}
