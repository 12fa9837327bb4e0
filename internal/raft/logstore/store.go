package logstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/malachi-log/malachi/internal/vfs"
)

var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("logstore: closed")
	// ErrFailed wraps the write, sync or rename error that made the store
	// fail-stop. Reopen to recover what the disk holds.
	ErrFailed = errors.New("logstore: failed")
	// ErrCorrupt wraps damage found by Open that is not a torn tail of the
	// newest file. The files are left as they are.
	ErrCorrupt = errors.New("logstore: corrupt")
	// ErrTooLarge refuses an update over a size bound of Options.
	ErrTooLarge = errors.New("logstore: too large")
	// ErrFull refuses an update that would hold more than
	// Options.MaxLiveBytes or Options.MaxGroups: compact first.
	ErrFull = errors.New("logstore: full")
	// ErrInvalid refuses an update that breaks the log's rules (a gap in
	// the entries, a snapshot whose term does not match the log, ...).
	ErrInvalid = errors.New("logstore: invalid update")
)

// Defaults for Options fields left at zero.
const (
	DefaultFileBytes        = 64 << 20
	DefaultMaxSaveBytes     = 8 << 20
	DefaultMaxSnapshotBytes = 8 << 20
	DefaultMaxLiveBytes     = 1 << 30
	DefaultMaxGroups        = 4096

	// MaxRecordBytes bounds MaxSaveBytes and MaxSnapshotBytes so that
	// every record stays under the format's record limit.
	MaxRecordBytes = maxRecord / 2
	// snapMetaAllowance is room for a snapshot's metadata (its ConfState)
	// beyond its data.
	snapMetaAllowance = 1 << 20
	// maxKeptBuf bounds the write buffer kept between writes.
	maxKeptBuf = 1 << 20
)

// Options bound the store. Zero fields take the defaults above.
type Options struct {
	// FileBytes is the size past which the next write first starts a new
	// file (with a dump of the live state) and deletes the older ones. A
	// file also grows to twice its dump before rotating, so a large live
	// state does not rotate on every Save.
	FileBytes int64
	// MaxSaveBytes bounds the encoded entries of one Save.
	MaxSaveBytes int
	// MaxSnapshotBytes bounds one snapshot's data.
	MaxSnapshotBytes int
	// MaxLiveBytes bounds the entries and snapshot data held for all
	// groups: an update that would pass it is refused with ErrFull until
	// compaction makes room. Recovery loads whatever the disk holds.
	MaxLiveBytes int64
	// MaxGroups bounds the groups held, and the updates in one Save.
	MaxGroups int
}

func (o Options) withDefaults() (Options, error) {
	o.FileBytes = orDefault(o.FileBytes, DefaultFileBytes)
	o.MaxSaveBytes = orDefault(o.MaxSaveBytes, DefaultMaxSaveBytes)
	o.MaxSnapshotBytes = orDefault(o.MaxSnapshotBytes, DefaultMaxSnapshotBytes)
	o.MaxLiveBytes = orDefault(o.MaxLiveBytes, DefaultMaxLiveBytes)
	o.MaxGroups = orDefault(o.MaxGroups, DefaultMaxGroups)
	if o.FileBytes < 0 || o.MaxSaveBytes < 0 || o.MaxSnapshotBytes < 0 || o.MaxLiveBytes < 0 || o.MaxGroups < 0 {
		return o, fmt.Errorf("logstore: negative option in %+v", o)
	}
	if o.MaxSaveBytes > MaxRecordBytes || o.MaxSnapshotBytes > MaxRecordBytes {
		return o, fmt.Errorf("logstore: MaxSaveBytes and MaxSnapshotBytes may be at most %d", MaxRecordBytes)
	}
	return o, nil
}

func orDefault[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Update is what one group's Ready asks to persist. Within an Update the
// snapshot is applied first, then the entries, then the hard state, as
// raft requires.
type Update struct {
	Group uint64
	// HardState replaces the saved one; nil leaves it unchanged. Its
	// commit index may not pass the last entry.
	HardState *pb.HardState
	// Entries are appended; any saved entries from the first one's index
	// on are replaced (raft's rule for a conflicting suffix). Entries
	// already compacted away are skipped. A gap is refused.
	Entries []*pb.Entry
	// Snapshot, if not nil, is a snapshot received from the leader: it
	// replaces the group's log (raft.MemoryStorage.ApplySnapshot).
	Snapshot *pb.Snapshot
}

// Store is the durable Raft log of every group on a node. Writers (Save,
// Compact, SetSnapshot, RemoveGroup) are serialised, and each costs one
// write and one fsync; readers (GroupStorage) run concurrently and see
// only what is durable.
type Store struct {
	fs   vfs.FS
	dir  string
	opts Options

	// wmu serialises the writers and guards the fields below. Writers
	// read groups holding wmu alone: only they change it.
	wmu      sync.Mutex
	active   vfs.File // the file appended to; nil once closed
	seq      uint64   // its sequence number
	size     int64    // its length
	dumpSize int64    // its header and dump
	live     int64    // sum of the groups' sizes
	failure  error    // set once: fail-stop
	closed   bool
	buf      []byte // reused by each write, up to maxKeptBuf

	// mu guards groups for readers; writers hold it to publish.
	mu     sync.RWMutex
	groups map[uint64]*groupState
}

// Groups returns the ids of the groups with durable state, ascending.
func (s *Store) Groups() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]uint64, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Storage returns the raft.Storage of a group. A group with no durable
// state reads as an empty log until a Save gives it one.
func (s *Store) Storage(group uint64) *GroupStorage { return &GroupStorage{s: s, group: group} }

// batch is the records and staged group states of one write. A nil staged
// state removes its group.
type batch struct {
	buf    []byte
	staged map[uint64]*groupState
}

// current returns the state group has with the batch so far applied.
// REQUIRES: s.wmu is held.
func (s *Store) current(b *batch, group uint64) *groupState {
	if g, ok := b.staged[group]; ok {
		if g == nil {
			return emptyGroup
		}
		return g
	}
	if g, ok := s.groups[group]; ok {
		return g
	}
	return emptyGroup
}

// Save makes the updates durable with one write and one fsync, then
// visible through Storage. An update the log's rules refuse (ErrInvalid,
// raft.ErrSnapOutOfDate, ErrTooLarge, ErrFull) refuses the whole Save and
// writes nothing. A failed write or fsync fails the store (ErrFailed).
//
// Save takes no context: it waits only for the disk, which a context
// cannot interrupt, and for another writer's disk write.
func (s *Store) Save(updates []Update) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.checkSizes(updates); err != nil {
		return err
	}
	b := &batch{buf: s.buf[:0], staged: make(map[uint64]*groupState, len(updates))}
	for _, u := range updates {
		if err := s.stage(b, u); err != nil {
			return fmt.Errorf("group %d: %w", u.Group, err)
		}
	}
	return s.commit(b)
}

// checkSizes applies the size bounds of Options to a Save.
func (s *Store) checkSizes(updates []Update) error {
	if len(updates) > s.opts.MaxGroups {
		return fmt.Errorf("%w: %d updates in one Save, the bound is %d", ErrTooLarge, len(updates), s.opts.MaxGroups)
	}
	var total int64
	for _, u := range updates {
		total += entriesSize(u.Entries)
		if u.Snapshot != nil {
			if err := s.checkSnapshot(u.Snapshot); err != nil {
				return fmt.Errorf("group %d: %w", u.Group, err)
			}
		}
	}
	if total > int64(s.opts.MaxSaveBytes) {
		return fmt.Errorf("%w: %d bytes of entries in one Save, the bound is %d", ErrTooLarge, total, s.opts.MaxSaveBytes)
	}
	return nil
}

func (s *Store) checkSnapshot(snap *pb.Snapshot) error {
	if n := len(snap.GetData()); n > s.opts.MaxSnapshotBytes {
		return fmt.Errorf("%w: snapshot of %d bytes, the bound is %d", ErrTooLarge, n, s.opts.MaxSnapshotBytes)
	}
	if n := proto.Size(snap); n > s.opts.MaxSnapshotBytes+snapMetaAllowance {
		return fmt.Errorf("%w: snapshot metadata of %d bytes", ErrTooLarge, n-len(snap.GetData()))
	}
	return nil
}

// stage applies one update to the batch: its records and staged state.
// REQUIRES: s.wmu is held.
func (s *Store) stage(b *batch, u Update) error {
	g := s.current(b, u.Group)
	var err error
	if u.Snapshot != nil {
		if g, err = g.withAppliedSnapshot(u.Snapshot); err != nil {
			return err
		}
		b.buf = appendReset(b.buf, u.Group, g.ents[0], g.snap)
	}
	if len(u.Entries) > 0 {
		if g, err = g.withEntries(u.Entries); err != nil {
			return err
		}
		b.buf = appendEntries(b.buf, u.Group, u.Entries)
	}
	if u.HardState != nil {
		// Raft never commits past its log; a hard state that does would
		// make raft panic when it restarts from this log.
		if c := u.HardState.GetCommit(); c > g.lastIndex() {
			return fmt.Errorf("%w: commit %d beyond last index %d", ErrInvalid, c, g.lastIndex())
		}
		g = g.withHardState(u.HardState)
		b.buf = appendHardState(b.buf, u.Group, u.HardState)
	}
	if u.Snapshot != nil || len(u.Entries) > 0 || u.HardState != nil {
		b.staged[u.Group] = g
	}
	return nil
}

// Compact drops the group's entries up to and including index, once the
// state machine's snapshot covers them (SetSnapshot at index or later):
// raft.MemoryStorage.Compact. It is durable when it returns.
func (s *Store) Compact(group, index uint64) error {
	return s.write(group, func(b *batch) error {
		g, err := s.current(b, group).withCompact(index)
		if err != nil {
			return err
		}
		b.staged[group], b.buf = g, appendCompact(b.buf, group, index)
		return nil
	})
}

// SetSnapshot records a snapshot the state machine took at an index the
// log holds, with the term the log has there: raft.MemoryStorage.
// CreateSnapshot. A snapshot without a ConfState keeps the previous one.
// Entries stay until Compact. It is durable when it returns.
func (s *Store) SetSnapshot(group uint64, snap *pb.Snapshot) error {
	return s.write(group, func(b *batch) error {
		if err := s.checkSnapshot(snap); err != nil {
			return err
		}
		g, err := s.current(b, group).withSnapshot(snap)
		if err != nil {
			return err
		}
		b.staged[group], b.buf = g, appendSnapshot(b.buf, group, g.snap)
		return nil
	})
}

// RemoveGroup drops a group and all its state, durably. Removing a group
// the store does not hold does nothing.
func (s *Store) RemoveGroup(group uint64) error {
	return s.write(group, func(b *batch) error {
		if _, ok := s.groups[group]; ok {
			b.staged[group], b.buf = nil, appendRemove(b.buf, group)
		}
		return nil
	})
}

// write runs one writer that changes a single group.
func (s *Store) write(group uint64, fill func(*batch) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	b := &batch{staged: map[uint64]*groupState{}}
	if err := fill(b); err != nil {
		return fmt.Errorf("group %d: %w", group, err)
	}
	return s.commit(b)
}

// usable returns why the store takes no writes, if it does not.
// REQUIRES: s.wmu is held.
func (s *Store) usable() error {
	if s.closed {
		return ErrClosed
	}
	return s.failure
}

// commit checks the bounds on what the batch would hold, rotates if the
// file is due, writes the batch and its commit record with one write,
// fsyncs, and publishes the staged states.
// REQUIRES: s.wmu is held.
func (s *Store) commit(b *batch) error {
	if len(b.buf) == 0 {
		return nil
	}
	live, groups := s.projected(b)
	if live > s.opts.MaxLiveBytes && live > s.live {
		return fmt.Errorf("%w: %d bytes of live log, the bound is %d", ErrFull, live, s.opts.MaxLiveBytes)
	}
	if groups > s.opts.MaxGroups && groups > len(s.groups) {
		return fmt.Errorf("%w: %d groups, the bound is %d", ErrFull, groups, s.opts.MaxGroups)
	}
	if err := s.maybeRotate(); err != nil {
		return err
	}
	buf := appendCommit(b.buf)
	if _, err := s.active.WriteAt(buf, s.size); err != nil {
		return s.fail(err)
	}
	if err := s.active.Sync(); err != nil {
		return s.fail(err)
	}
	s.size += int64(len(buf))
	s.live = live
	if cap(buf) <= maxKeptBuf {
		s.buf = buf
	}
	s.mu.Lock()
	for id, g := range b.staged {
		if g == nil {
			delete(s.groups, id)
		} else {
			s.groups[id] = g
		}
	}
	s.mu.Unlock()
	return nil
}

// projected returns the live bytes and group count once b is published.
// REQUIRES: s.wmu is held.
func (s *Store) projected(b *batch) (live int64, groups int) {
	live, groups = s.live, len(s.groups)
	for id, g := range b.staged {
		old, had := s.groups[id]
		if had {
			live -= old.size
			groups--
		}
		if g != nil {
			live += g.size
			groups++
		}
	}
	return live, groups
}

// fail makes the store fail-stop. After a failed write the file's tail is
// unknown, and after a failed fsync Linux may drop the dirty pages and
// report the next fsync clean: carrying on could acknowledge a Save the
// disk lacks. Reopening recovers exactly what the disk holds; readers
// keep the state of the last successful write.
// REQUIRES: s.wmu is held.
func (s *Store) fail(err error) error {
	s.failure = fmt.Errorf("%w: %w", ErrFailed, err)
	return s.failure
}

// Close closes the active file. Storage keeps serving the state held in
// memory; writers get ErrClosed.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.active.Close()
	s.active = nil
	return err
}
