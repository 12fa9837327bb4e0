package storage

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Replica copies. A replicated segment has one copy per member of its
// replica set: the primary's, appended through AppendAsync with offsets it
// assigns, and the followers', which take the primary's stamped batches
// verbatim. A follower's copy must stay a byte-for-byte prefix of the
// primary's, so it takes a batch only at exactly its end (AppendAt), says
// where it ends when it refuses one (EndError), can answer a fence with
// its fsynced end (Fence, Ends), cuts an unacknowledged suffix when the
// control plane's seal says so (Truncate, SealOptions.TruncateAbove), and
// seals at exactly the end the control plane recorded (SealOptions.Exact),
// never padded: two copies holding the same batches then have the same
// footer (cluster invariants W4, W6, S2).

// Errors a copy answers with its end (see EndError).
var (
	// ErrOffsetGap: an AppendAt batch does not start at the copy's end.
	ErrOffsetGap = errors.New("batch does not start at the copy's end")
	// ErrBehind: the copy ends below the end a seal or cut asked for.
	ErrBehind = errors.New("copy ends below the requested end")
	// ErrAhead: the copy ends above the end an exact seal asked for, and
	// the seal did not say to cut what is above it.
	ErrAhead = errors.New("copy ends above the requested end")
	// ErrTruncating: the segment is being cut and takes no appends until
	// the cut is done.
	ErrTruncating = errors.New("segment is being truncated")
	// ErrNotBoundary: a cut or exact seal asked for an end where none of
	// the copy's batches ends.
	ErrNotBoundary = segment.ErrNotBoundary
)

// EndError is a refusal that says where the copy ends, so that a follower
// can answer "I have End" and the primary can resend from there, or the
// control plane can see how far a copy got. errors.Is matches Err.
type EndError struct {
	Err  error // ErrOffsetGap, ErrBehind or ErrAhead
	ID   SegmentID
	Want uint64 // the offset asked for: a batch's base, or a seal's end
	End  uint64 // the copy's end, queued appends included
}

func (e *EndError) Error() string {
	return fmt.Sprintf("%v: segment %d ends at %d, %d asked", e.Err, e.ID, e.End, e.Want)
}

func (e *EndError) Unwrap() error { return e.Err }

// CopyEnd returns the end an EndError in err's chain reports.
func CopyEnd(err error) (uint64, bool) {
	var e *EndError
	if errors.As(err, &e) {
		return e.End, true
	}
	return 0, false
}

// AppendAtAsync is AppendAsync for a follower's copy: the batch is taken
// only when its base offset is exactly the copy's end, queued appends
// included. A gap (base above the end) or a repeat (base below it) is
// refused synchronously with an EndError wrapping ErrOffsetGap that
// carries the end, so the primary can resend from there. Holes are
// allowed inside a batch, not between batches: the primary ships
// consecutive batches. Everything else is as for AppendAsync.
func (s *Store) AppendAtAsync(ctx context.Context, id SegmentID, batch []byte, done func(error)) error {
	return s.appendAsync(ctx, id, batch, done, true)
}

// AppendAt is AppendAtAsync followed by waiting for done, as Append.
func (s *Store) AppendAt(ctx context.Context, id SegmentID, batch []byte) error {
	return awaitDone(ctx, func(done func(error)) error { return s.AppendAtAsync(ctx, id, batch, done) })
}

// Ends returns the end of segment id with its queued appends (where the
// next append goes) and its durable end (everything below is fsynced, in
// the journal or the file: what a fence may answer and reads stop at).
// It takes one lock and allocates nothing, so a follower can answer with
// it on every request. A sealed segment answers its sealed end twice. A
// damaged copy (Info.Damage: found at Open, by a replay, or when its
// sealed file was opened) answers no end but its damage (IsCorrupt), as
// Fence does: the end it could name may be below what it acknowledged.
func (s *Store) Ends(id SegmentID) (queued, durable uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sg := s.segs[id]
	switch {
	case sg == nil || !sg.ready:
		return 0, 0, s.missingLocked(id)
	case sg.damage != nil:
		return 0, 0, sg.damage
	case sg.sealed:
		ft, err := sealedFooter(sg)
		if err != nil {
			return 0, 0, err
		}
		return ft.End, ft.End, nil
	case sg.h == nil:
		return 0, 0, ErrClosed // an undamaged active segment loses its file only at Close
	}
	_, d := sg.h.log.Stats()
	return sg.queuedEnd, d.End, nil
}

// sealedFooter returns the footer of sealed segment sg, or the damage
// that keeps it from being trusted: a .seal that failed its checks leaves
// no footer, and a .log whose size disagrees with it, or a damage marker,
// leaves one that must not be answered. Store.mu is held.
func sealedFooter(sg *seg) (Footer, error) {
	switch {
	case sg.damage != nil:
		return Footer{}, sg.damage
	case sg.footer == nil:
		return Footer{}, fmt.Errorf("%w: sealed segment %d has no readable footer", ErrCorrupt, sg.id)
	}
	return *sg.footer, nil
}

// Fence latches segment id against appends (ErrSealed from then on),
// waits for the appends queued before it, and returns its durable end:
// the answer a copy gives when the control plane fences it, every batch
// below it fsynced, nothing ever appended above it. A sealed segment
// answers its sealed end; a damaged copy, sealed or not, its damage
// (IsCorrupt).
//
// The latch is durable before Fence answers: a marker file (<id>.fence)
// is written and fsynced with its directory, and Open restores the latch
// from it, so a copy restarted before the control plane recorded its
// seal still refuses appends (W4). Without it, a copy killed after
// answering a failover's fence would take the old primary's appends
// again and could complete a quorum the fence denied (W6). Only a seal,
// a delete or a quarantine lifts it. If ctx ends while Fence waits for a
// cut or seal of the segment to finish, or for the queued appends, it
// returns ctx.Err() (the latch may already be set in memory, and a
// retried Fence makes it durable).
func (s *Store) Fence(ctx context.Context, id SegmentID) (uint64, error) {
	sg, err := s.lookup(id)
	if err != nil {
		return 0, err
	}
	if err := sg.sealMu.lock(ctx); err != nil {
		return 0, err
	}
	defer sg.sealMu.unlock()
	s.mu.Lock()
	if sg.sealed {
		ft, err := sealedFooter(sg)
		s.mu.Unlock()
		return ft.End, err
	}
	wait, err := s.fenceLocked(sg)
	var log *segment.Segment
	if err == nil {
		log = sg.h.log
	}
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if err := s.failure(); err != nil {
		return 0, err
	}
	_, d := log.Stats()
	if err := s.keepFence(sg, d.End); err != nil {
		return 0, err
	}
	return d.End, nil
}

// Latch sets Fence's durable latch on active segment id without waiting
// for the appends queued before it: they still land, later ones are
// refused (ErrSealed). It is for a copy whose fence answer comes from
// its owner's bookkeeping (a follower's fsynced end, which its queued
// appends cannot lower), so a fence is not held up by a slow fsync of
// data it does not answer for. A sealed segment is left as it is; a
// damaged one answers its damage. If ctx ends while Latch waits for a
// cut or seal of the segment, it returns ctx.Err().
func (s *Store) Latch(ctx context.Context, id SegmentID) error {
	sg, err := s.lookup(id)
	if err != nil {
		return err
	}
	if err := sg.sealMu.lock(ctx); err != nil {
		return err
	}
	defer sg.sealMu.unlock()
	s.mu.Lock()
	var end uint64
	switch {
	case sg.sealed:
		_, err = sealedFooter(sg)
		s.mu.Unlock()
		return err
	case sg.gone:
		err = fmt.Errorf("%w: %d", ErrNotFound, sg.id)
	case sg.damage != nil:
		err = sg.damage
	case s.failed != nil:
		err = s.failed
	default:
		sg.fenced, end = true, sg.queuedEnd
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.keepFence(sg, end)
}

// keepFence makes sg's latch durable, once: the marker records the end
// the fence answered, for an operator; the latch is its existence. The
// caller holds sg.sealMu, so two fences never write it at once.
func (s *Store) keepFence(sg *seg, end uint64) error {
	s.mu.Lock()
	kept := sg.fenceKept
	s.mu.Unlock()
	if kept {
		return nil
	}
	path := s.path(sg.id, fenceExt)
	if err := vfs.WriteFileAtomic(s.fs, path, []byte(strconv.FormatUint(end, 10)+"\n")); err != nil {
		return fmt.Errorf("storage: keep the fence of segment %d: %w", sg.id, err)
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return fmt.Errorf("storage: keep the fence of segment %d: %w", sg.id, err)
	}
	s.mu.Lock()
	sg.fenceKept = true
	s.mu.Unlock()
	return nil
}

// Truncate cuts the active copy of segment id back to end, dropping the
// batches above it: a follower's unacknowledged suffix, when the control
// plane's seal (or a new primary's catch-up) says the copy went further
// than the segment will. end must be the copy's base or the end of one of
// its batches (ErrNotBoundary otherwise), and at most its end (an
// EndError wrapping ErrBehind otherwise); a fenced copy may be cut, a
// sealed one never (ErrSealed: sealed is immutable, S2).
//
// Truncate waits for the appends queued before it and refuses appends
// (ErrTruncating) until it returns. The cut is durable when it returns,
// and a crash part-way leaves either the old copy or the cut one, whole:
// with the node journal the cut is journaled before the file shrinks, so
// a replay never appends a cut batch again (docs/storage-format.md). If
// ctx ends while waiting for another cut or seal of the segment, or for
// the queued appends, nothing is cut.
func (s *Store) Truncate(ctx context.Context, id SegmentID, end uint64) error {
	sg, err := s.lookup(id)
	if err != nil {
		return err
	}
	if err := sg.sealMu.lock(ctx); err != nil {
		return err
	}
	defer sg.sealMu.unlock()
	s.mu.Lock()
	wait, log, err := s.beginCutLocked(sg, end)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		s.mu.Lock()
		sg.cutting = false
		s.mu.Unlock()
	}()
	select {
	case <-wait:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := s.failure(); err != nil {
		return err
	}
	return s.cutTo(sg, log, end)
}

// beginCutLocked checks that sg may be cut to end, stops its appends and
// queues a barrier behind those already queued.
func (s *Store) beginCutLocked(sg *seg, end uint64) (<-chan struct{}, *segment.Segment, error) {
	switch {
	case sg.gone:
		return nil, nil, fmt.Errorf("%w: %d", ErrNotFound, sg.id)
	case sg.sealed:
		ft, err := sealedFooter(sg)
		if err != nil {
			// Both refusals hold: errors.Is finds ErrSealed and the damage.
			return nil, nil, fmt.Errorf("%w: segment %d is sealed; a sealed copy is never cut: %w",
				ErrSealed, sg.id, err)
		}
		return nil, nil, fmt.Errorf("%w: segment %d is sealed at %d; a sealed copy is never cut",
			ErrSealed, sg.id, ft.End)
	case sg.damage != nil:
		return nil, nil, sg.damage
	case s.failed != nil:
		return nil, nil, s.failed
	case end < sg.base:
		return nil, nil, fmt.Errorf("%w: cut to %d below segment %d base %d (its predecessor's sealed end)",
			ErrOffsetRegression, end, sg.id, sg.base)
	case end > sg.queuedEnd:
		return nil, nil, &EndError{Err: ErrBehind, ID: sg.id, Want: end, End: sg.queuedEnd}
	}
	wait, err := s.barrierLocked(sg)
	if err != nil {
		return nil, nil, err
	}
	sg.cutting = true
	return wait, sg.h.log, nil
}

// cutTo cuts sg's file back to end once nothing is queued for it: the
// caller holds sg.sealMu and keeps appends out. With the journal on, the
// cut is journaled first and the file cut after: a crash in between
// replays the journal, which then skips the batches the cut voids, and a
// crash after leaves a file that already is the cut copy.
func (s *Store) cutTo(sg *seg, log *segment.Segment, end uint64) error {
	if w, _ := log.Stats(); w.End == end {
		return nil // already ends there
	}
	c, err := log.PlanCut(end)
	if err != nil {
		return err
	}
	if s.jr != nil {
		s.mu.Lock()
		wait, err := s.journalCutLocked(sg, c)
		s.mu.Unlock()
		if err != nil {
			return err
		}
		<-wait
		if err := s.failure(); err != nil {
			return err
		}
	}
	if err := log.ApplyCut(c); err != nil {
		s.fail(err)
		return err
	}
	s.mu.Lock()
	sg.queuedEnd = end
	s.mu.Unlock()
	return nil
}

// journalCutLocked queues the cut's journal record and returns a channel
// closed once the round holding it was fsynced (or failed).
func (s *Store) journalCutLocked(sg *seg, c segment.Cut) (<-chan struct{}, error) {
	if s.closing {
		return nil, ErrClosed
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, request{sg: sg, cut: true, base: c.End, pos: c.Pos, done: func(error) { close(ch) }})
	s.kick()
	return ch, nil
}

// checkExactLocked refuses an exact seal of sg at o.End before anything is
// fenced: a copy that ends below it is behind (never padded), one above it
// is ahead unless the seal says to cut.
func (s *Store) checkExactLocked(sg *seg, o SealOptions) error {
	switch {
	case o.End < sg.base:
		return fmt.Errorf("%w: seal at %d below segment %d base %d", ErrOffsetRegression, o.End, sg.id, sg.base)
	case sg.queuedEnd < o.End:
		return &EndError{Err: ErrBehind, ID: sg.id, Want: o.End, End: sg.queuedEnd}
	case sg.queuedEnd > o.End && !o.TruncateAbove:
		return &EndError{Err: ErrAhead, ID: sg.id, Want: o.End, End: sg.queuedEnd}
	}
	return nil
}

// settleExact brings a fenced, drained copy to exactly o.End before an
// exact seal: cut when it holds more and the seal says so.
func (s *Store) settleExact(sg *seg, log *segment.Segment, o SealOptions) error {
	w, _ := log.Stats()
	switch {
	case w.End < o.End:
		return &EndError{Err: ErrBehind, ID: sg.id, Want: o.End, End: w.End}
	case w.End > o.End && !o.TruncateAbove:
		return &EndError{Err: ErrAhead, ID: sg.id, Want: o.End, End: w.End}
	case w.End > o.End:
		return s.cutTo(sg, log, o.End)
	}
	return nil
}
