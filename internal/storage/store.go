package storage

import (
	"container/list"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/metrics/hist"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// SegmentID names a segment; the control plane allocates them.
type SegmentID uint64

// Config configures a Store. Zero values take the defaults.
type Config struct {
	Dir string
	FS  vfs.FS // default vfs.OS()
	// MaxOpenFiles bounds the cache of open sealed-segment handles
	// (default 256). Active segments stay open and are not counted: their
	// handle carries the index and checksums appends extend, so the store
	// does not close them; whoever creates active segments bounds how many
	// exist (the broker, through its range limit).
	MaxOpenFiles int
	// MaxPendingBytes bounds the bytes queued but not yet acknowledged;
	// AppendAsync blocks beyond it (default 64 MiB). A single batch larger
	// than the bound is admitted when nothing else is pending.
	MaxPendingBytes int64
	// IndexIntervalBytes is the sparse index spacing (default 4096).
	IndexIntervalBytes int
	// NoJournal turns the node journal off: each round then fdatasyncs
	// every segment file it wrote. A journal left by an earlier run is
	// replayed either way.
	NoJournal bool
	// JournalFileBytes is the journal file size from which the store moves
	// to a new file and checkpoints the old one (default 64 MiB).
	JournalFileBytes int64
	// JournalPrealloc writes a zero-filled journal file of JournalFileBytes
	// in the background when the store has no checkpointed one to recycle
	// (a new node), so that its first journal file already overwrites
	// allocated blocks. Recycled files need nothing.
	JournalPrealloc bool
	// MinFreeBytes is the free space below which CheckSpace makes the
	// store refuse appends with ErrNoSpace (space.go). Default: the
	// MaxPendingBytes, what a round can still hold; negative: no reserve.
	MinFreeBytes int64
	// FreeBytes reads the free space of the filesystem holding Dir. The
	// default, with the OS filesystem, is statfs; with another FS the free
	// space is unknown and only ENOSPC marks the disk full.
	FreeBytes func() (int64, error)
}

// Defaults for Config.
const (
	DefaultMaxOpenFiles       = 256
	DefaultMaxPendingBytes    = 64 << 20
	DefaultIndexIntervalBytes = 4096
	// MaxPendingBytesLimit caps Config.MaxPendingBytes.
	MaxPendingBytesLimit = 1 << 30
)

func (c *Config) setDefaults() error {
	if c.Dir == "" {
		return errors.New("storage: Config.Dir is required")
	}
	// A journal round holds at most MaxPendingBytes plus one batch, and
	// its length field is 32 bits.
	if c.MaxPendingBytes > MaxPendingBytesLimit {
		return fmt.Errorf("storage: MaxPendingBytes %d above %d", c.MaxPendingBytes, int64(MaxPendingBytesLimit))
	}
	if c.MaxOpenFiles < 0 || c.MaxPendingBytes < 0 || c.IndexIntervalBytes < 0 || c.JournalFileBytes < 0 {
		return errors.New("storage: negative limit in Config")
	}
	if c.FS == nil {
		c.FS = vfs.OS()
	}
	if c.FreeBytes == nil && c.FS == vfs.OS() {
		dir := c.Dir
		c.FreeBytes = func() (int64, error) { return statFree(dir) }
	}
	if c.MaxOpenFiles == 0 {
		c.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if c.JournalFileBytes == 0 {
		c.JournalFileBytes = DefaultJournalFileBytes
	}
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = c.MaxPendingBytes
	}
	return nil
}

// Errors. ErrSealed, ErrOffsetRegression and ErrCorrupt are the segment
// package's values, so errors.Is works across both packages.
var (
	ErrNotFound         = errors.New("segment not found")
	ErrExists           = errors.New("segment exists")
	ErrSealed           = segment.ErrSealed
	ErrOffsetRegression = segment.ErrOffsetRegression
	ErrCorrupt          = segment.ErrCorrupt
	ErrClosed           = errors.New("store closed")
	// ErrFailed: a write or fsync failed; the store takes no more writes
	// (fail-stop) until it is closed and reopened, which rereads the disk.
	ErrFailed = errors.New("store failed")
	// ErrBadBatch: AppendAsync was given bytes that are not one valid batch.
	ErrBadBatch = errors.New("bad batch")
	// ErrPending: the segment's create is in the node journal, whose
	// replay waits for space (replay_wait.go). The copy exists, its file
	// not yet, so it must never read as ErrNotFound: a peer asking whether
	// this node holds a copy would take that for "no copy".
	ErrPending = fmt.Errorf("%w: segment waits for the journal's replay", ErrNoSpace)
)

// IsCorrupt reports whether err reports damaged stored data.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// Footer describes a sealed segment.
type Footer = segment.Footer

// Info describes a segment.
type Info struct {
	ID   SegmentID
	Base uint64
	// Owner is the tag given to CreateFor (0 when none was recorded or the
	// segment is sealed and not open: only an active segment's is kept).
	Owner uint32
	// End is the offset after the last accepted batch, queued or durable:
	// the lowest base offset the next append may use.
	End uint64
	// DurableEnd is the offset after the last durable batch (fsynced, in
	// the journal or the file); reads stop there, and a fenced copy
	// answers it (Fence). Ends reports both ends without building an Info.
	DurableEnd uint64
	// Bytes, Records, MaxExpiry and MaxTimestamp describe the durable batches.
	Bytes        int64
	Records      uint64
	MaxExpiry    int64 // 0 when some record never expires (or none exist)
	MaxTimestamp int64
	Sealed       bool
	Footer       *Footer
	// Readable is false when Open could not read the segment's structure
	// (its header, or a sealed segment's footer): Base, End and the counts
	// are then unknown (zero), and Damage says why.
	Readable bool
	// Fenced is set once a Seal or Delete began, or a Fence or Latch
	// latched the copy (restored at Open from its marker): the segment
	// takes no more appends. Fenced but not Sealed means a Seal failed
	// part-way (or is in progress) and may be retried, or a copy waits for
	// the seal a failover decides.
	Fenced bool
	// EndPastDamage, for a segment found damaged at Open, is the offset
	// after the last valid batch anywhere in its file, past the damage:
	// reads stop at DurableEnd, but offsets up to here were handed out.
	EndPastDamage uint64
	// Damage is non-nil (IsCorrupt) when Open, or opening a sealed file,
	// found the segment's structure damaged; such a segment takes no
	// appends and no seal. Damage that only a CRC check finds is reported
	// by Read and Verify, not recorded here.
	Damage error
}

// SealOptions refine Seal.
type SealOptions struct {
	// End, when non-zero, is the explicit end offset to record; it must be
	// at least the segment's durable end. Zero records the durable end.
	// With Exact it is taken as it is, zero included.
	End uint64
	// Generation is recorded in the footer.
	Generation uint32
	// Exact seals a replica copy at exactly End, the end the control
	// plane recorded for the segment, never padding it: a copy that ends
	// below End is refused (EndError wrapping ErrBehind) and one that ends
	// above it too (ErrAhead), unless TruncateAbove. Both are refused
	// before the copy is fenced, so a copy that is behind can still catch
	// up. A padded follower would claim offsets it never held, and its
	// footer would not match the primary's.
	Exact bool
	// TruncateAbove, with Exact, first cuts the batches above End
	// (Truncate): the control plane's seal says they were never
	// acknowledged (W6). Only the seal may say so, hence an option.
	TruncateAbove bool
}

// Stats are cumulative counters of a Store.
type Stats struct {
	Rounds uint64 // group-commit rounds that wrote or synced something
	Syncs  uint64 // fdatasync calls on segment files
	// JournalSyncs counts fdatasyncs of the node journal (one per round
	// with the journal on); Checkpoints, journal files retired.
	JournalSyncs uint64
	Checkpoints  uint64
	// ReplayedBatches counts batches Open appended from the journal.
	ReplayedBatches uint64
	Batches         uint64 // batches acknowledged durable
	Bytes           uint64 // bytes acknowledged durable
	// TruncatedBytes is the size of torn tails removed at Open.
	TruncatedBytes uint64
}

type counters struct {
	rounds, syncs, batches, bytes, truncated atomic.Uint64
	journalSyncs, checkpoints, replayed      atomic.Uint64
	// syncLatency times each fdatasync a commit round waits for (a
	// segment file's, or the journal's); roundBatches and roundBytes are
	// what each round acknowledged.
	syncLatency, roundBatches, roundBytes *hist.Histogram
}

func (c *counters) init() {
	c.syncLatency = hist.New(hist.LatencyBounds)
	c.roundBatches = hist.New(hist.CountBounds)
	c.roundBytes = hist.New(hist.ByteBounds)
}

// Histograms are the store's distributions: SyncLatency in nanoseconds
// per fdatasync a commit round waited for; RoundBatches and RoundBytes
// per group-commit round that acknowledged something.
type Histograms struct {
	SyncLatency, RoundBatches, RoundBytes hist.Snapshot
}

// Histograms reads the store's distributions.
func (s *Store) Histograms() Histograms {
	return Histograms{
		SyncLatency:  s.stats.syncLatency.Snapshot(),
		RoundBatches: s.stats.roundBatches.Snapshot(),
		RoundBytes:   s.stats.roundBytes.Snapshot(),
	}
}

// handle is an open segment file shared by readers and, while the segment
// is active, the commit goroutine. It is closed when the last reference is
// dropped after the handle was retired (evicted, deleted, store closed).
type handle struct {
	log     *segment.Segment
	refs    int
	retired bool
	elem    *list.Element // position in Store.lru while cached
}

// seg is a Store's record of one segment. Fields are guarded by Store.mu
// unless noted.
type seg struct {
	id    SegmentID
	base  uint64
	ready bool // Create finished
	// creating is closed, and set to nil, when the CreateFor that
	// reserved the segment returns, whether or not it made it, or when
	// the Delete or Quarantine that holds the id (detach) is done with
	// the files of the copy it took out of service.
	creating  chan struct{}
	queuedEnd uint64 // end including queued appends
	fenced    bool   // Seal, Delete or Fence began: no more appends
	fenceKept bool   // Fence's marker is durable: the latch outlives a restart
	cutting   bool   // Truncate runs: no appends until it returns
	sealed    bool
	gone      bool // deleted
	footer    *Footer
	damage    error
	// endPastDamage: see Info.EndPastDamage.
	endPastDamage uint64
	h             *handle // nil for a sealed segment not in the cache

	// sealMu serialises Fence, Truncate, Seal and Delete (not guarded by
	// Store.mu); its waiters honour their ctx.
	sealMu sealLock
	openMu sync.Mutex // serialises opening a sealed handle
}

// Store is a node's directory of segments. See the package doc.
type Store struct {
	cfg  Config
	fs   vfs.FS
	opts segment.Options

	mu      sync.Mutex
	segs    map[SegmentID]*seg
	queue   []request
	spare   []request
	pending int64         // bytes queued and not yet acknowledged
	space   chan struct{} // closed when pending shrinks or the store stops
	closing bool          // Close began: no new work
	givenUp bool          // StopWaitingForSpace: no round waits for space
	closed  bool          // Close finished: handles closed
	failed  error         // sticky, wraps ErrFailed (ErrNoSpace while openPending)
	full    error         // out of space until CheckSpace finds room; wraps ErrNoSpace
	// openPending: Open left the journal's replay or start waiting for
	// space (replay_wait.go); startup, owned by the commit goroutine, is
	// what remains (it is cleared, and its replayed flag set, under mu, so
	// lookups can tell a copy the replay has still to create).
	openPending bool
	startup     *startup
	lru         *list.List // *seg with a cached sealed handle, most recent first

	wake   chan struct{} // cap 1: work was queued
	exited chan struct{} // closed when the commit goroutine returns
	stats  counters

	// The node journal (nil when off): written by the commit goroutine,
	// which hands full files to the checkpoint goroutine through ckpt.
	jr       *journal
	ckpt     chan checkpoint
	ckptDone chan struct{} // closed when the checkpoint goroutine returns
	spares   chan string   // cap 1: a checkpointed journal file to recycle

	// known holds every segment id a file in the directory may have been
	// named after since Open began (noteID): a create of any other skips
	// looking for a predecessor's sidecars.
	known *knownIDs
	// createMu lets one segment file be created at a time with the
	// journal on: creates in one directory take the kernel's directory
	// lock, and many at once cost more CPU for no less time. The journal
	// record that makes a create durable is written outside it, so
	// concurrent creates still share a round's fsync.
	createMu sync.Mutex

	// removals counts segment files taken out of the directory (removed,
	// or moved into QuarantineDir), each counted once the operation
	// returned; removalsDurable is the count a later successful fsync of
	// the directory covers (syncDir). While it lags, a removal may come
	// undone at a power loss, and a create of the same id must not make a
	// copy durable beside it (settleRemovals).
	removals        atomic.Uint64
	removalsDurable atomic.Uint64
}

// removeFile removes one file from the store's directory and counts it as
// a removal that a directory fsync has still to make durable.
func (s *Store) removeFile(path string) error {
	err := s.fs.Remove(path)
	if err == nil {
		s.removals.Add(1)
	}
	return err
}

// syncDir fsyncs the store's directory. Every removal counted before it
// began is durable once it returns nil.
func (s *Store) syncDir() error {
	n := s.removals.Load()
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return err
	}
	for {
		d := s.removalsDurable.Load()
		if n <= d || s.removalsDurable.CompareAndSwap(d, n) {
			return nil
		}
	}
}

// settleRemovals makes every removal so far durable before segment id is
// created. A Delete or Quarantine whose last directory fsync failed has
// its files gone from the directory but perhaps not from the disk; a
// create of the same id whose copy is durable through its journal record
// alone would then come back, after a power loss, beside the old copy's
// .log and .seal, and Open would serve the old copy in its place.
func (s *Store) settleRemovals(id SegmentID) error {
	if s.removalsDurable.Load() >= s.removals.Load() {
		return nil
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("storage: segment %d not created: an earlier removal of segment files is not durable and the directory fsync failed again: %w", id, err)
	}
	return nil
}

// noteID records that a file named after id may exist from now on.
func (s *Store) noteID(id SegmentID) { s.known.note(id) }

func (s *Store) path(id SegmentID, ext string) string {
	return filepath.Join(s.cfg.Dir, fmt.Sprintf("%020d%s", uint64(id), ext))
}

// Close stops taking appends, lets the commit goroutine write and sync
// everything already queued and fire its callbacks, then closes all files.
// It returns the store's failure, if it failed.
func (s *Store) Close() error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		s.signalSpaceLocked()
	}
	s.mu.Unlock()
	s.kick()
	<-s.exited
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		for _, sg := range s.segs {
			if sg.h != nil && !sg.sealed {
				sg.h.refs-- // the store's own reference to an active handle
			}
			s.retireLocked(sg)
		}
	}
	return s.failed
}

// lookup returns a ready segment.
func (s *Store) lookup(id SegmentID) (*seg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookupLocked(id)
}

func (s *Store) lookupLocked(id SegmentID) (*seg, error) {
	if s.closing {
		return nil, ErrClosed
	}
	sg := s.segs[id]
	if sg == nil || !sg.ready {
		return nil, s.missingLocked(id)
	}
	return sg, nil
}

// missingLocked is the error for a segment id without a ready copy:
// ErrPending while a replay waiting for space has still to create it,
// else ErrNotFound.
func (s *Store) missingLocked(id SegmentID) error {
	if u := s.startup; u != nil && !u.replayed && u.plan.creates[id] {
		return fmt.Errorf("%w: %d", ErrPending, id)
	}
	return fmt.Errorf("%w: %d", ErrNotFound, id)
}

// Info describes segment id.
func (s *Store) Info(id SegmentID) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.segs[id]
	if sg == nil || !sg.ready {
		return Info{}, s.missingLocked(id)
	}
	return s.infoLocked(sg), nil
}

func (s *Store) infoLocked(sg *seg) Info {
	in := Info{ID: sg.id, Base: sg.base, End: sg.queuedEnd, Sealed: sg.sealed, Damage: sg.damage,
		Readable: sg.footer != nil || sg.h != nil, Fenced: sg.fenced, EndPastDamage: sg.endPastDamage}
	switch {
	case sg.footer != nil:
		ft := *sg.footer
		in.Footer = &ft
		in.DurableEnd, in.Bytes, in.Records = ft.End, ft.Bytes, ft.Records
		in.MaxExpiry, in.MaxTimestamp = ft.MaxExpiry, ft.MaxTimestamp
	case sg.h != nil:
		in.Owner = sg.h.log.Owner()
		_, d := sg.h.log.Stats()
		in.DurableEnd, in.Bytes, in.Records = d.End, d.Bytes, d.Records
		in.MaxExpiry, in.MaxTimestamp = d.MaxExpiry, d.MaxTimestamp
	}
	return in
}

// List describes every segment, sorted by ID.
func (s *Store) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, len(s.segs))
	for _, sg := range s.segs {
		if sg.ready {
			out = append(out, s.infoLocked(sg))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Rounds: s.stats.rounds.Load(), Syncs: s.stats.syncs.Load(),
		Batches: s.stats.batches.Load(), Bytes: s.stats.bytes.Load(),
		TruncatedBytes: s.stats.truncated.Load(),
		JournalSyncs:   s.stats.journalSyncs.Load(), Checkpoints: s.stats.checkpoints.Load(),
		ReplayedBatches: s.stats.replayed.Load(),
	}
}

// Create creates an empty active segment with base offset base and makes
// its existence durable before returning.
func (s *Store) Create(id SegmentID, base uint64) error {
	return s.CreateFor(id, base, 0)
}

// CreateFor is Create with an owner tag written into the segment's header,
// reported by Info while the segment is active, so that whoever adopts the
// file after a restart can check it was made for them.
func (s *Store) CreateFor(id SegmentID, base uint64, owner uint32) error {
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return ErrClosed
	case s.failed != nil:
		s.mu.Unlock()
		return s.failed
	case s.full != nil:
		full := s.full // read under the lock: CheckSpace may clear it
		s.mu.Unlock()
		return full
	case s.segs[id] != nil && s.segs[id].creating != nil:
		// Another CreateFor of id is under way: its outcome decides
		// ours. Answering ErrExists now would send a caller that then
		// reads the copy (a fence racing the first append to create a
		// follower's copy) to a segment not yet visible: ErrNotFound.
		// Or a Delete or Quarantine of id is still removing or moving
		// the old copy's files, which would take the new copy's with
		// them (its .log, or a fence marker written meanwhile).
		wait := s.segs[id].creating
		s.mu.Unlock()
		<-wait
		return s.CreateFor(id, base, owner)
	case s.segs[id] != nil:
		s.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrExists, id)
	}
	sg := &seg{id: id, base: base, queuedEnd: base, creating: make(chan struct{})}
	s.segs[id] = sg // reserved: not ready, so invisible to everything else
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		close(sg.creating)
		sg.creating = nil
		s.mu.Unlock()
	}()

	journaled := s.jr != nil
	if journaled {
		// Without the journal a create waits for its own fsyncs, which
		// concurrent creates share: those are not serialized.
		s.createMu.Lock()
	}
	err := s.settleRemovals(id)
	if err == nil && s.known.known(id) {
		err = s.clearLeftovers(id)
	}
	s.noteID(id) // before the file exists: a later create of id looks
	var log *segment.Segment
	if err == nil {
		log, err = s.createFiles(id, base, owner, !journaled)
	}
	if journaled {
		s.createMu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.closing {
		_ = log.Close()
		err = ErrClosed
	}
	if err != nil {
		delete(s.segs, id)
		if isNoSpace(err) {
			// Refused, nothing kept: create again once space returns.
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
			if s.full == nil {
				s.full = err
			}
		}
		return err
	}
	sg.h = &handle{log: log, refs: 1}
	if journaled {
		if err := s.journalCreateLocked(sg, base, owner); err != nil {
			// A Close while the record waited (for space) has retired
			// every segment, this one too.
			if sg.h != nil {
				sg.h.refs--
				s.retireLocked(sg)
			}
			delete(s.segs, id)
			return err
		}
	}
	sg.ready = true
	return nil
}

// journalCreateLocked makes a new segment's creation durable through the
// journal (a create record, sharing a round's fsync) instead of fsyncing
// its file and the directory: a replay recreates the file from the
// record. It drops s.mu while it waits. sg.h is set first, so a checkpoint
// of the journal file holding the record syncs the file.
func (s *Store) journalCreateLocked(sg *seg, base uint64, owner uint32) error {
	if s.closing {
		return ErrClosed
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, request{sg: sg, create: true, base: base, owner: owner, done: func(error) { close(ch) }})
	s.kick()
	s.mu.Unlock()
	<-ch
	s.mu.Lock()
	return s.failed
}

// clearLeftovers removes the sidecars a Delete or Quarantine of a
// predecessor under id left when it failed part-way in this run: they
// describe a copy that is gone and must not attach to the new one. A
// removal is made durable before the new copy's create can be: with the
// journal on the create is durable through its record alone, and a
// replay of it beside a marker a power loss brought back would restore a
// deleted copy's fence or damage onto the new one (the replay keeps every
// marker it finds, see recreate).
func (s *Store) clearLeftovers(id SegmentID) error {
	removed := false
	for _, ext := range []string{sealExt, idxExt, damageExt, fenceExt} {
		err := s.removeFile(s.path(id, ext))
		switch {
		case err == nil:
			removed = true
		case !vfs.IsNotExist(err):
			return err
		}
	}
	if !removed {
		return nil
	}
	return s.syncDir()
}

// createFiles creates a segment's .log; sync makes it and its directory
// entry durable before returning. It leaves every other file of the
// segment as it is: CreateFor clears a predecessor's first, and a
// replay's recreate keeps the markers of the copy it rebuilds.
func (s *Store) createFiles(id SegmentID, base uint64, owner uint32, sync bool) (*segment.Segment, error) {
	create := segment.CreateFor
	if !sync {
		create = segment.CreateUnsynced
	}
	log, err := create(s.fs, s.path(id, logExt), uint64(id), base, owner, s.opts)
	if errors.Is(err, vfs.ErrExist) {
		return nil, fmt.Errorf("%w: %d (file present)", ErrExists, id)
	}
	if err != nil {
		return nil, err
	}
	if !sync {
		return log, nil
	}
	if err := s.syncDir(); err != nil {
		_ = log.Close()
		_ = s.removeFile(s.path(id, logExt))
		return nil, err
	}
	return log, nil
}
