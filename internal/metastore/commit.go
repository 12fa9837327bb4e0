package metastore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/malachi-log/malachi/internal/vfs"
)

// kick wakes the committer without blocking.
func (s *Store) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the committer: it takes everything pending as one batch, writes
// it with one write and one fsync, and repeats. Commands that arrive during
// an fsync form the next batch, so the fsync rate adapts to the load. It
// exits once the store is closed and nothing is pending.
func (s *Store) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		closing := s.closed
		s.mu.Unlock()
		switch {
		case len(batch) > 0:
			s.commit(batch)
		case closing:
			return
		default:
			<-s.wake
		}
	}
}

// commit makes a batch durable, applies it to the view, then answers its
// callers, so a caller that returns sees its own write in View.
func (s *Store) commit(batch []pending) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	err := s.Err()
	if err == nil {
		err = s.appendBatch(batch)
	}
	if err == nil {
		err = s.applyView(batch)
	}
	for _, p := range batch {
		p.done <- err
	}
	if err == nil && s.snapEvery > 0 && s.sinceSnap >= s.snapEvery {
		// A failure before the rename leaves the log intact: try again
		// after another interval. Later failures fail-stop the store.
		if s.snapshotLocked() != nil {
			s.sinceSnap = 0
		}
	}
}

// appendBatch writes and fsyncs the batch. Any failure is fail-stop: the
// head state already holds these commands while the disk may hold none,
// some, or a torn part of them, and Linux may even drop the failed pages
// and report the next fsync clean. Carrying on could acknowledge later
// commands built on state the disk does not have; the only safe way back
// is Open, which replays exactly what the disk holds.
func (s *Store) appendBatch(batch []pending) error {
	var buf []byte
	for _, p := range batch {
		buf = append(buf, p.rec...)
	}
	if _, err := s.log.WriteAt(buf, s.logSize); err != nil {
		return s.fail(fmt.Errorf("write %s: %w", logName(s.logStart), err))
	}
	if err := s.log.Sync(); err != nil {
		return s.fail(fmt.Errorf("sync %s: %w", logName(s.logStart), err))
	}
	s.logSize += int64(len(buf))
	s.index += uint64(len(batch))
	s.sinceSnap += len(batch)
	return nil
}

// applyView replays the durable batch on the view. The head accepted each
// command, so the view must too; if not, determinism is broken and the
// store stops rather than serve a state that differs from its log.
func (s *Store) applyView(batch []pending) error {
	s.viewMu.Lock()
	defer s.viewMu.Unlock()
	for _, p := range batch {
		if res := s.view.Apply(p.cmd); res.Err != nil {
			return s.fail(fmt.Errorf("durable %s refused on replay: %w", p.cmd.Kind, res.Err))
		}
	}
	return nil
}

// snapshotLocked writes a snapshot of the view at s.index and moves
// appends to a new log starting there. writeMu is held, so the view and
// the log agree. An empty current log means the state on disk is already
// that of a snapshot (or of nothing), so there is nothing to do.
func (s *Store) snapshotLocked() error {
	if s.index == s.logStart {
		return nil
	}
	renamed, err := writeSnapshot(s.fs, s.dir, s.index, s.view)
	if err != nil {
		if renamed {
			return s.fail(fmt.Errorf("snapshot %d: %w", s.index, err))
		}
		return err
	}
	if len(s.snaps) == 0 || s.snaps[len(s.snaps)-1] != s.index {
		s.snaps = append(s.snaps, s.index)
	}
	f, err := s.fs.OpenFile(filepath.Join(s.dir, logName(s.index)), os.O_CREATE|os.O_EXCL|os.O_RDWR, vfs.FileMode)
	if err == nil {
		err = s.fs.SyncDir(s.dir)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		// The snapshot is durable; Open would replay the old log past it.
		// Staying on the old log would work too, but a failing disk is
		// better met by stopping.
		return s.fail(fmt.Errorf("new log %d: %w", s.index, err))
	}
	old := s.log
	s.log, s.logStart, s.logSize, s.sinceSnap = f, s.index, 0, 0
	_ = old.Close() // it was fsynced after its last write
	s.collect()
	return nil
}

// collect removes what recovery can no longer need: it keeps the two newest
// snapshots (the older is the fallback if the newer turns out damaged) and
// every log holding a command from the older one on. A log's name says
// where it starts, not where it ends, so a log goes only once the next one
// starts at or before keepFrom: a log that started before keepFrom may
// still hold commands after it (see takesAppends). Best effort: a leftover
// file is only space, and the next rotation tries again.
func (s *Store) collect() {
	if len(s.snaps) < 2 {
		return
	}
	keepFrom := s.snaps[len(s.snaps)-2]
	logs, snaps, err := dirFiles(s.fs, s.dir)
	if err != nil {
		return
	}
	for i, n := range logs {
		if i+1 < len(logs) && logs[i+1] <= keepFrom {
			_ = s.fs.Remove(filepath.Join(s.dir, logName(n)))
		}
	}
	for _, n := range snaps {
		if n < keepFrom {
			_ = s.fs.Remove(filepath.Join(s.dir, snapName(n)))
		}
	}
	s.snaps = slices.DeleteFunc(s.snaps, func(n uint64) bool { return n < keepFrom })
}
