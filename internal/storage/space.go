package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Full disks (docs/operations.md, "Full disks").
//
// Running out of space is not a broken disk: nothing written so far is in
// doubt, so the store refuses new appends and creates with ErrNoSpace and
// takes them again once space returns, instead of failing for good. Two
// things put it in that state:
//
//   - free space on the filesystem below Config.MinFreeBytes, read by
//     CheckSpace (the reserve leaves room for what is already queued and
//     for seals, whose footer and index need a few blocks);
//   - ENOSPC or EDQUOT on the write of a round's journal record, before
//     any segment file was written and before any fsync: the round's
//     appends are refused (never acknowledged), the torn record is
//     overwritten by the next round, and the appends queued behind it are
//     refused too, so no segment's queued end runs past what is written.
//
// Everything else stays fail-stop (ErrFailed): any failed fsync (the
// kernel may have dropped the dirty pages, so the file's tail is unknown),
// and ENOSPC on a segment file or a journal file switch, where bytes may
// already sit in a file the store would have to cut back. A store failed
// by ENOSPC reports DiskFull, one failed otherwise DiskFailing; both take
// writes again only after a reopen.

// ErrNoSpace: the disk is (nearly) full. The append or create was refused
// and nothing of it was written; it may be retried once space returns.
var ErrNoSpace = errors.New("no space left on the segment disk")

// DiskState is what the store's disk allows.
type DiskState uint8

// Disk states.
const (
	DiskOK      DiskState = iota // takes appends
	DiskFull                     // out of space: appends and creates refused
	DiskFailing                  // a write or fsync failed: fail-stop
)

func (d DiskState) String() string {
	switch d {
	case DiskOK:
		return "ok"
	case DiskFull:
		return "full"
	case DiskFailing:
		return "failing"
	}
	return fmt.Sprintf("disk(%d)", uint8(d))
}

// isNoSpace reports an error of a filesystem out of space or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// DiskState reports whether the store takes appends (DiskOK), refuses
// them until space returns (DiskFull), or failed (DiskFailing, or
// DiskFull when the failure was ENOSPC). Reads of durable data work in
// every state.
func (s *Store) DiskState() DiskState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.diskStateLocked()
}

func (s *Store) diskStateLocked() DiskState {
	switch {
	case s.failed != nil && isNoSpace(s.failed):
		return DiskFull
	case s.failed != nil:
		return DiskFailing
	case s.full != nil:
		return DiskFull
	}
	return DiskOK
}

// CheckSpace updates the disk state and returns it: below
// Config.MinFreeBytes of free space the store refuses appends with
// ErrNoSpace; a store a full journal write stopped takes them again once
// a probe file of probeBytes can be written (statfs does not see quotas,
// and not every FS can be read for free space). The caller paces it; it
// costs one statfs, and while full one small write.
func (s *Store) CheckSpace() DiskState {
	free, known := s.freeBytes()
	s.mu.Lock()
	full := s.full
	s.mu.Unlock()
	switch {
	case known && free < s.cfg.MinFreeBytes:
		if full == nil || !errors.Is(full, errReserve) {
			full = fmt.Errorf("%w: %w: %d bytes free, below the %d kept", ErrNoSpace, errReserve, free, s.cfg.MinFreeBytes)
		}
	case full != nil && s.probe() == nil:
		full = nil
	case full != nil && errors.Is(full, errReserve):
		full = nil // above the reserve again, and the probe could not be written: the next round tells
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = full
	return s.diskStateLocked()
}

var errReserve = errors.New("free space under the reserve")

// probeBytes is what CheckSpace writes to learn that space returned.
const probeBytes = 64 << 10

// probe writes and removes a probe file of probeBytes; a crash between
// the two leaves a temporary file that Open removes.
func (s *Store) probe() error {
	path := filepath.Join(s.cfg.Dir, "space-probe"+segment.TempSuffix)
	f, err := s.fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, vfs.FileMode)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(make([]byte, probeBytes), 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := s.fs.Remove(path); err == nil {
		err = rerr
	}
	return err
}

// freeBytes is the free space of the store's filesystem, when known.
func (s *Store) freeBytes() (int64, bool) {
	if s.cfg.MinFreeBytes < 0 || s.cfg.FreeBytes == nil {
		return 0, false
	}
	free, err := s.cfg.FreeBytes()
	return free, err == nil
}

// outOfSpace is called by the commit goroutine when a round's journal
// write found the disk full (err): the store refuses appends until
// CheckSpace finds room, every append still queued is refused now, and
// each touched segment's queued end goes back to what its file holds, so
// the next append after space returns starts there. round is the failed
// round; its callbacks are fired by finish as usual.
func (s *Store) outOfSpace(round []request, err error) error {
	full := fmt.Errorf("%w: %w", ErrNoSpace, err)
	s.mu.Lock()
	s.full = full
	var refused []request
	kept := s.queue[:0]
	for _, r := range s.queue {
		if r.batch != nil {
			refused = append(refused, r)
			s.pending -= r.size
			continue
		}
		kept = append(kept, r)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	for _, reqs := range [][]request{round, refused} {
		for _, r := range reqs {
			if r.batch != nil {
				written, _ := r.log.Stats()
				r.sg.queuedEnd = written.End
			}
		}
	}
	s.signalSpaceLocked()
	s.mu.Unlock()
	for _, r := range refused {
		r.done(full)
	}
	return full
}

// plainRound reports whether a round holds only appends and plain
// barriers: no create, cut or tombstone record, whose waiters take the
// journal write for done.
func plainRound(round []request) bool {
	for _, r := range round {
		if r.tomb || r.create || r.cut {
			return false
		}
	}
	return true
}
