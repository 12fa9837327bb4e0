package storage

import (
	"errors"
	"fmt"
)

// Open on a full disk (docs/operations.md, "Full disks").
//
// The journal's replay writes into segment files, and starting a new
// journal may write a file; on a disk that is still full either can find
// no room. That is not damage and must not keep the node down, so Open
// then returns a store in the full state instead of an error:
//
//   - the journal files stay as they are, so a crash or a power loss at
//     any point replays them again at the next Open, exactly as after a
//     crash in an ordinary replay;
//   - what was replayed before the disk filled is fsynced and readable;
//     the rest of each segment, the unreplayed tail, is not: reads stop
//     at what the file holds, while End (Info, Ends) already counts the
//     journal's batches, so no one takes those offsets for free;
//   - a copy whose create the replay has not reached yet answers
//     ErrPending (Info, Ends, reads), which wraps ErrNoSpace and never
//     ErrNotFound: a peer must not take it for a node without the copy;
//     fence markers are honoured once the replay made the copies;
//   - everything that writes is refused with an error wrapping ErrNoSpace
//     (appends, creates, seals, fences, deletes and quarantines, which
//     would drop a file the journal still holds batches of); DiskState
//     says DiskFull;
//   - CheckSpace, once the free space is above the reserve, asks the
//     commit goroutine to go on: the replay resumes at the record that
//     found the disk full (the segment cut and fsynced what that write
//     tore off, so it lands at the same place), then the journal is
//     retired and a new one started. On success the store takes writes;
//     on another ENOSPC it stays full; on any other error it fails.
//
// The resumed replay holds the store's lock while it writes, so readers
// wait for it: it runs once, and keeps them off segment state it changes.

// errOpenWaits marks an Open that a full disk stopped short; the store's
// failure wraps it (with ErrNoSpace) until the work is done.
var errOpenWaits = errors.New("opening waits for space")

func waitSpace(err error) error { return fmt.Errorf("%w: %w", errOpenWaits, err) }

// startup is what Open still has to do; owned by the commit goroutine
// once Open has returned.
type startup struct {
	plan     *journalPlan
	r        *replayer
	replayed bool // written under Store.mu (missingLocked reads it)
	// fenced lists the active copies a fence marker says were fenced, to
	// latch once the replay made them: a copy whose create only the
	// journal holds has none before (nil once done).
	fenced []SegmentID
	// raised lists the segments whose End was raised to the journal's
	// while their tails wait, to be set back to what the file holds when
	// the replay is done (batches a later cut voided never come back).
	raised []*seg
}

// replayRest replays the journal, or goes on with a replay a full disk
// stopped. An error wrapping errOpenWaits says the disk was full; it may
// be called again.
func (s *Store) replayRest(u *startup) error {
	if u.replayed {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := u.r.run()
	u.replayed = err == nil
	if u.replayed {
		// The tails are in the files now: End is what they hold.
		for _, sg := range u.raised {
			if sg.h != nil {
				w, _ := sg.h.log.Stats()
				sg.queuedEnd = w.End
			}
		}
		u.raised = nil
	}
	return err
}

// restoreFencesOrWait latches the fenced copies once the replay is done;
// a full disk, which keeps a missing marker from being written again,
// makes it wait.
func (s *Store) restoreFencesOrWait(u *startup) error {
	err := s.restoreFences(u.fenced)
	if isNoSpace(err) {
		return waitSpace(err)
	}
	if err == nil {
		u.fenced = nil
	}
	return err
}

// startJournalOrWait starts the new journal; a full disk makes it wait.
func (s *Store) startJournalOrWait(u *startup) error {
	if s.cfg.NoJournal {
		return nil
	}
	err := s.startJournal(u.plan)
	if isNoSpace(err) {
		return waitSpace(err)
	}
	return err
}

// waitForSpace, at Open, leaves the store full with u to do (see above).
// cause wraps errOpenWaits.
func (s *Store) waitForSpace(u *startup, cause error) {
	s.startup, s.openPending = u, true
	s.failed = fmt.Errorf("%w: %w", ErrNoSpace, cause)
	if u.replayed {
		return
	}
	for id, end := range u.plan.ends {
		sg := s.segs[id]
		if sg != nil && sg.h != nil && !sg.sealed && sg.damage == nil && end > sg.queuedEnd {
			sg.queuedEnd = end
			u.raised = append(u.raised, sg)
		}
	}
}

// openWaitsLocked reports whether Open left work waiting for space.
func (s *Store) openWaitsLocked() bool { return errors.Is(s.failed, errOpenWaits) }

// resumeOpen asks the commit goroutine to go on with what Open left
// waiting for space, and waits until it tried. CheckSpace calls it.
func (s *Store) resumeOpen() {
	s.mu.Lock()
	if !s.openWaitsLocked() {
		s.mu.Unlock()
		return
	}
	done, err := s.queueBarrierLocked(nil, false)
	s.mu.Unlock()
	if err == nil {
		<-done
	}
}

// continueOpen, on the commit goroutine before each round while Open's
// work waits, tries it again.
func (s *Store) continueOpen() {
	u := s.startup
	s.mu.Lock()
	waits := s.openWaitsLocked() && !s.closing
	s.mu.Unlock()
	if !waits {
		return // failed for good, or closing: the next Open replays
	}
	err := s.replayRest(u)
	if err == nil {
		// Before the store takes writes: a copy the replay recreated
		// must not take appends its fence marker forbids (W4).
		err = s.restoreFencesOrWait(u)
	}
	if err == nil {
		err = s.startJournalOrWait(u)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.startup, s.failed, s.openPending = nil, nil, false
		s.signalSpaceLocked()
	case errors.Is(err, errOpenWaits):
		s.failed = fmt.Errorf("%w: %w", ErrNoSpace, err)
	default:
		s.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	}
}
