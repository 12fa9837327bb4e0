package metastore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// DefaultSnapshotEvery is Options.SnapshotEvery when left at 0.
const DefaultSnapshotEvery = 10000

var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("metastore: closed")
	// ErrFailed wraps the write or sync error that made the store fail-stop.
	ErrFailed = errors.New("metastore: failed")
	// ErrCorrupt wraps damage found by Open that is not a torn tail.
	ErrCorrupt = errors.New("metastore: corrupt")
	// ErrTooLarge is returned for a command whose encoding exceeds 16 MiB.
	ErrTooLarge = errors.New("metastore: command too large")
)

// Options tune a Store.
type Options struct {
	// SnapshotEvery is the number of logged commands between automatic
	// snapshots: 0 means DefaultSnapshotEvery, negative turns them off.
	SnapshotEvery int
}

// Store is the durable home of a metadata.State on one node.
type Store struct {
	fs        vfs.FS
	dir       string
	snapEvery int

	// mu serialises Apply, so log order is apply order, and guards the
	// fields below.
	mu      sync.Mutex
	head    *metadata.State // every accepted command, durable or not
	pending []pending       // accepted, waiting for the committer
	failure error           // set once: fail-stop
	closed  bool

	// writeMu is held by whoever writes or replaces the log: the committer
	// for each batch, Snapshot for a rotation. It guards the fields below.
	writeMu   sync.Mutex
	log       vfs.File // nil once closed
	logStart  uint64
	logSize   int64
	index     uint64   // commands in the durable log == commands in view
	snaps     []uint64 // snapshot indexes on disk, ascending
	sinceSnap int

	// viewMu guards view: the state of durable commands only, which is
	// what readers see.
	viewMu sync.RWMutex
	view   *metadata.State

	wake chan struct{} // cap 1: there is work for the committer
	done chan struct{} // closed when the committer exits
}

type pending struct {
	cmd  metadata.Command
	rec  []byte     // the framed record
	done chan error // receives the durability outcome, exactly once
}

// Open recovers the store in dir (creating it if needed): the newest valid
// snapshot, then the logged commands after it. A torn tail of the last log
// is cut off; any other damage fails with ErrCorrupt rather than dropping
// acknowledged commands. Everything recovered is durable before Open
// returns, even if a killed process left it only in the page cache. Only
// one Store may use dir at a time.
func Open(fs vfs.FS, dir string, opts Options) (*Store, error) {
	rec, err := recoverDir(fs, dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		fs: fs, dir: dir, snapEvery: opts.SnapshotEvery,
		head: rec.state, view: rec.state.Clone(),
		log: rec.log, logStart: rec.logStart, logSize: rec.logSize,
		index: rec.index, snaps: rec.snaps, sinceSnap: int(rec.index - rec.logStart),
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if s.snapEvery == 0 {
		s.snapEvery = DefaultSnapshotEvery
	}
	go s.run()
	return s, nil
}

// Apply applies cmd. A command the state machine refuses comes back in
// Result.Err, changes nothing and is not logged. An accepted one is
// appended to the log and fsynced before Apply returns; concurrent callers
// share one write and one fsync. The error is about the store, not the
// command: ErrClosed, ErrFailed (fail-stop), ErrTooLarge, or the context's
// error. A context that ends while the fsync is in flight returns its error,
// but the command may still become durable.
func (s *Store) Apply(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	if err := ctx.Err(); err != nil {
		return metadata.Result{}, err
	}
	rec, err := encodeCommand(cmd)
	if err != nil {
		return metadata.Result{}, err
	}
	done := make(chan error, 1)
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return metadata.Result{}, err
	}
	res := s.head.Apply(cmd)
	if res.Err != nil {
		s.mu.Unlock()
		return res, nil
	}
	s.pending = append(s.pending, pending{cmd: cmd, rec: rec, done: done})
	s.mu.Unlock()
	s.kick()
	select {
	case err := <-done:
		if err != nil {
			return metadata.Result{}, err
		}
		return res, nil
	case <-ctx.Done():
		return metadata.Result{}, fmt.Errorf("metastore: %w while waiting for the fsync; the command may still become durable", ctx.Err())
	}
}

func (s *Store) usableLocked() error {
	if s.closed {
		return ErrClosed
	}
	return s.failure
}

// View calls fn with the state of every command whose Apply has returned
// (or is returning) success: durable commands only, never one still waiting
// for its fsync. fn runs under a read lock, must not modify st, and must not
// keep it (or call Apply) after returning.
func (s *Store) View(fn func(st *metadata.State)) {
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	fn(s.view)
}

// Err returns the error that made the store fail-stop, or nil.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failure
}

// Snapshot writes a snapshot of the durable state and starts a new log.
func (s *Store) Snapshot() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.log == nil {
		return ErrClosed
	}
	if err := s.Err(); err != nil {
		return err
	}
	return s.snapshotLocked()
}

// Close waits for accepted commands to be committed, stops the committer
// and closes the log. Later calls return nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.kick()
	<-s.done
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	err := s.log.Close()
	s.log = nil
	return err
}

// fail makes the store fail-stop (the first cause wins) and returns the
// error to report.
func (s *Store) fail(cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == nil {
		s.failure = fmt.Errorf("%w: %w", ErrFailed, cause)
	}
	return s.failure
}
