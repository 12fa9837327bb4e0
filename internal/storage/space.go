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
//   - ENOSPC or EDQUOT on any write:
//   - a round's journal record, before any segment file was written:
//     a round of appends only is refused (never acknowledged), the torn
//     record is overwritten by the next round, and the appends queued
//     behind it are refused too, so no segment's queued end runs past
//     what is written; a round that also creates, cuts or deletes is
//     written again, in place, once space returns (rewriteJournal);
//   - a segment file (segment.Segment.Append cuts the torn bytes off, so
//     the file ends where it did): with the journal on the round is
//     durable in the journal already, so it waits, unacknowledged, and is
//     written again once space returns (writeBehind), the journal file
//     kept until it is; with the journal off it is refused like a full
//     journal round (refuseUnwritten);
//   - a new segment's file, a seal's index or footer, the next journal
//     file: refused, retried by the caller or the next round;
//   - the journal's replay at Open, or the new journal's first file: the
//     store opens full and goes on once space returns (replay_wait.go).
//
// While a round waits for space every append queued behind it is refused
// with ErrNoSpace; barriers (seals, fences, deletes) wait behind it.
// CheckSpace, called by the owner on a timer (the broker: every second),
// is what lets it go on. A store closed while a round waits fails and
// keeps the journal file for the next Open: the round's appends, durable
// in the journal but not acknowledged, are answered ErrOutcomeUnknown
// (the next Open writes them into their files, so a retry would store
// them twice), a round whose journal record could not be written
// ErrNoSpace.
//
// Everything else stays fail-stop (ErrFailed): any failed fsync (the
// kernel may have dropped the dirty pages, so the file's tail is unknown)
// and any other write error. A store failed by ENOSPC (closed while
// waiting, or a torn write whose cut failed) reports DiskFull, one failed
// otherwise DiskFailing; both take writes again only after a reopen.

// ErrNoSpace: the disk is (nearly) full. The append or create was refused
// and nothing of it was written; it may be retried once space returns.
var ErrNoSpace = errors.New("no space left on the segment disk")

// ErrOutcomeUnknown: the append was neither acknowledged nor refused. It
// is durable in the node journal and comes back at the next Open, so it
// must not be retried as if refused (which would store it twice); the
// caller reports the outcome as unknown. It comes wrapped with ErrFailed.
var ErrOutcomeUnknown = errors.New("append outcome unknown")

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
// and not every FS can be read for free space). Above the reserve it also
// resumes what Open left waiting for space (replay_wait.go), and waits
// for that. The caller paces it; it costs one statfs, and while full one
// small write.
func (s *Store) CheckSpace() DiskState {
	free, known := s.freeBytes()
	if !known || free >= s.cfg.MinFreeBytes {
		s.resumeOpen()
	}
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
	if s.full != nil && full == nil {
		s.signalSpaceLocked() // a round waiting for room writes again
	}
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
	refused := s.refuseQueuedLocked(round, nil)
	s.mu.Unlock()
	for _, r := range refused {
		r.done(full)
	}
	return full
}

// refuseQueuedLocked takes every queued append out of the queue and
// returns them, to be refused. Each segment's queued end then goes back to
// what its file holds (for the refused appends and those of dropped),
// except that appends of kept, a round that will still be written, keep
// theirs.
func (s *Store) refuseQueuedLocked(dropped, kept []request) []request {
	var refused []request
	rest := s.queue[:0]
	for _, r := range s.queue {
		if r.batch != nil {
			refused = append(refused, r)
			s.pending -= r.size
			continue
		}
		rest = append(rest, r)
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	for _, reqs := range [][]request{dropped, refused} {
		for _, r := range reqs {
			if r.batch != nil {
				written, _ := r.log.Stats()
				r.sg.queuedEnd = written.End
			}
		}
	}
	for _, r := range kept {
		if r.batch == nil {
			continue
		}
		if h, err := segment.ParseHeader(r.batch); err == nil {
			r.sg.queuedEnd = h.LastOffset() + 1
		}
	}
	s.signalSpaceLocked()
	return refused
}

// markFull makes the store refuse appends and creates until CheckSpace
// finds room; err is the ENOSPC or EDQUOT that said so. It returns the
// refusal, wrapping ErrNoSpace and err.
func (s *Store) markFull(err error) error {
	full := fmt.Errorf("%w: %w", ErrNoSpace, err)
	s.mu.Lock()
	if s.full == nil {
		s.full = full
	}
	s.mu.Unlock()
	return full
}

// noSpaceGroup reports whether g's segment write failed only for want of
// space: the segment cut its torn bytes off and takes the same batches
// again (a write error that made it fail for good does not count).
func noSpaceGroup(g *group) bool {
	return g.err != nil && isNoSpace(g.err) && g.log.Err() == nil
}

// refuseUnwritten, with the journal off, refuses the batches of a round
// whose segment write found the disk full: nothing of them stayed in the
// file (the segment cut its torn bytes off), so they are refused with
// ErrNoSpace like a round whose journal write found it full, and so is
// every append queued behind them.
func (s *Store) refuseUnwritten(round []request, groups []*group) {
	var full error
	for _, g := range groups {
		if !noSpaceGroup(g) {
			continue
		}
		if full == nil {
			full = s.outOfSpace(round, g.err)
		}
		g.err = full
	}
}

// writeBehind, with the journal on, writes again, once space returns, the
// segment files a round's write-behind could not write because the disk
// was full. Their batches are durable already, in the journal, so they
// are neither refused nor given up: the round waits (unacknowledged, so
// nothing is read or acknowledged out of order) while later appends are
// refused with ErrNoSpace. If the store closes first, the batches are
// answered ErrOutcomeUnknown (not ErrNoSpace: they are not refused, the
// next Open writes them) and the error returned: the caller then fails
// the store, which keeps the journal file for the next Open to replay.
func (s *Store) writeBehind(round []request, groups []*group) error {
	for {
		var behind []*group
		for _, g := range groups {
			if noSpaceGroup(g) {
				behind = append(behind, g)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if !s.awaitSpace(round, behind[0].err) {
			err := fmt.Errorf("%w: closing while segment files waited for space (kept in the journal, written at the next open): %w",
				ErrOutcomeUnknown, behind[0].err)
			for _, g := range behind {
				g.err = err
			}
			return err
		}
		for _, g := range behind {
			g.err = nil
		}
		s.writeAll(behind)
	}
}

// rewriteJournal writes the round b again once space returns, after its
// journal write found the disk full (cause): a round that creates, cuts or
// deletes is not refused, its waiters count on the record. The torn bytes
// are overwritten, the round taking the same place and number.
func (s *Store) rewriteJournal(round []request, b []byte, cause error) error {
	for {
		if !s.awaitSpace(round, cause) {
			return fmt.Errorf("%w: closing while a journal round waited for space: %w", ErrNoSpace, cause)
		}
		err := s.jr.write(b)
		if !isNoSpace(err) {
			return err
		}
		cause = err
	}
}

// awaitSpace is the commit goroutine waiting, with round in hand, for
// CheckSpace to find room after a write found the disk full (cause): the
// store says full, and the appends queued behind round are refused now
// rather than held. It reports false when the store closes first.
func (s *Store) awaitSpace(round []request, cause error) bool {
	full := s.markFull(cause)
	s.mu.Lock()
	refused := s.refuseQueuedLocked(nil, round)
	s.mu.Unlock()
	for _, r := range refused {
		r.done(full)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.full != nil && !s.closing && !s.givenUp {
		space := s.space
		s.mu.Unlock()
		<-space
		s.mu.Lock()
	}
	return !s.closing && !s.givenUp
}

// StopWaitingForSpace is for an owner about to Close: a round that waits
// for disk space gives up now, and any later one at once, as if the store
// closed (its appends are answered ErrOutcomeUnknown, or ErrNoSpace if its
// journal record was not written, and the store fails). What waits behind
// such a round, a seal's barrier or a create, then returns, so the
// owner's goroutines that wait on them can stop before it calls Close.
// Without a full disk it changes nothing.
func (s *Store) StopWaitingForSpace() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.givenUp {
		s.givenUp = true
		s.signalSpaceLocked()
	}
}

// sealWriteError is a seal's failed index or footer write: a full disk
// makes the store full and the seal a retriable refusal (the segment
// stays fenced and unsealed, and a later Seal writes both again).
func (s *Store) sealWriteError(err error) error {
	if isNoSpace(err) {
		return s.markFull(err)
	}
	return err
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
