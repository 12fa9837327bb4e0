package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// request is one queued append, or a barrier (batch == nil) whose done
// fires once everything queued before it has been handled.
type request struct {
	sg    *seg
	log   *segment.Segment
	batch []byte
	size  int64
	done  func(error)
	// tomb marks a barrier that also records the segment's deletion in
	// the node journal, so a replay does not look for its file.
	tomb bool
	// create marks a barrier that records the segment's creation (base,
	// owner) in the node journal, so a replay can recreate its file.
	create bool
	// cut marks a barrier that records, in the node journal, that the
	// segment was cut back to end base at file position pos, so a replay
	// skips the batches the cut dropped.
	cut   bool
	base  uint64
	owner uint32
	pos   int64
}

// AppendAsync validates one encoded batch and queues it for segment id.
// Batches queued for a segment reach its file in queue order.
//
// It returns an error synchronously — and then never calls done — for an
// unknown segment (ErrNotFound), a sealed or fenced one (ErrSealed), a
// base offset below the segment's end including queued batches
// (ErrOffsetRegression), bytes that are not exactly one batch with a good
// CRC (ErrBadBatch), a damaged segment (ErrCorrupt), a failed store
// (ErrFailed), a full one (ErrNoSpace) or a closed one (ErrClosed), or
// ctx ending while it waits.
//
// Otherwise done is called exactly once, from the commit goroutine: with
// nil after the fdatasync covering the batch, or with the write or sync
// error: wrapping ErrNoSpace only when the disk was full and the store
// refused the batch without keeping any of it, else ErrFailed (with
// ErrOutcomeUnknown when the batch is kept in the node journal and comes
// back at the next Open). done must not block. It blocks, respecting
// ctx, while MaxPendingBytes are queued. The store keeps batch until done
// is called: the caller must not modify it before then.
func (s *Store) AppendAsync(ctx context.Context, id SegmentID, batch []byte, done func(error)) error {
	return s.appendAsync(ctx, id, batch, done, false)
}

// appendAsync is AppendAsync; exact asks that the batch start at exactly
// the segment's end (AppendAtAsync).
func (s *Store) appendAsync(ctx context.Context, id SegmentID, batch []byte, done func(error), exact bool) error {
	h, err := checkBatch(batch)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if done == nil {
		done = func(error) {}
	}
	s.mu.Lock()
	for {
		sg, err := s.admitLocked(id, h, exact)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		size := int64(len(batch))
		if s.pending == 0 || s.pending+size <= s.cfg.MaxPendingBytes {
			s.queue = append(s.queue, request{sg: sg, log: sg.h.log, batch: batch, size: size, done: done})
			s.pending += size
			sg.queuedEnd = h.LastOffset() + 1
			s.mu.Unlock()
			s.kick()
			return nil
		}
		// Wait for room, then check everything again: the segment may
		// have been sealed or another append may have moved its end.
		space := s.space
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-space:
		}
		s.mu.Lock()
	}
}

func checkBatch(batch []byte) (segment.BatchHeader, error) {
	h, err := segment.ParseHeader(batch)
	if err == nil && h.Length != len(batch) {
		err = fmt.Errorf("%d bytes given for a batch of %d", len(batch), h.Length)
	}
	if err == nil {
		err = segment.Verify(batch)
	}
	if err != nil {
		return h, fmt.Errorf("%w: %v", ErrBadBatch, err)
	}
	return h, nil
}

// admitLocked checks that segment id takes a batch with header h now;
// exact, that it starts at the segment's end.
func (s *Store) admitLocked(id SegmentID, h segment.BatchHeader, exact bool) (*seg, error) {
	sg, err := s.lookupLocked(id)
	switch {
	case err != nil:
		return nil, err
	case s.failed != nil:
		return nil, s.failed
	case s.full != nil:
		return nil, s.full
	case sg.damage != nil:
		return nil, sg.damage
	case sg.fenced:
		return nil, fmt.Errorf("%w: %d", ErrSealed, id)
	case sg.cutting:
		return nil, fmt.Errorf("%w: %d", ErrTruncating, id)
	case exact && h.BaseOffset != sg.queuedEnd:
		return nil, &EndError{Err: ErrOffsetGap, ID: id, Want: h.BaseOffset, End: sg.queuedEnd}
	case h.BaseOffset < sg.queuedEnd:
		return nil, fmt.Errorf("%w: batch base %d below segment %d end %d", ErrOffsetRegression, h.BaseOffset, id, sg.queuedEnd)
	}
	return sg, nil
}

// Append is AppendAsync followed by waiting for done. If ctx ends while
// waiting, Append returns ctx.Err() but the batch may still become durable.
func (s *Store) Append(ctx context.Context, id SegmentID, batch []byte) error {
	return awaitDone(ctx, func(done func(error)) error { return s.AppendAsync(ctx, id, batch, done) })
}

// awaitDone starts an asynchronous append and waits for its done, or for
// ctx to end (the batch may then still become durable).
func awaitDone(ctx context.Context, start func(done func(error)) error) error {
	ch := make(chan error, 1)
	if err := start(func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// barrierLocked queues a barrier for sg and returns a channel closed when
// everything queued before it is durable or failed. Barriers are not
// counted against MaxPendingBytes.
func (s *Store) barrierLocked(sg *seg) (<-chan struct{}, error) {
	return s.queueBarrierLocked(sg, false)
}

// tombstoneLocked is barrierLocked for a segment about to be deleted: with
// the journal on, the deletion is journaled before the channel closes.
func (s *Store) tombstoneLocked(sg *seg) (<-chan struct{}, error) {
	return s.queueBarrierLocked(sg, s.jr != nil)
}

func (s *Store) queueBarrierLocked(sg *seg, tomb bool) (<-chan struct{}, error) {
	if s.closing {
		return nil, ErrClosed
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, request{sg: sg, tomb: tomb, done: func(error) { close(ch) }})
	s.kick() // non-blocking, safe under the lock
	return ch, nil
}

func (s *Store) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// signalSpaceLocked wakes every AppendAsync waiting for room.
func (s *Store) signalSpaceLocked() {
	close(s.space)
	s.space = make(chan struct{})
}

// commitLoop is the store's one commit goroutine: it takes everything
// queued, writes it, syncs each touched file once, fires the callbacks,
// and repeats until Close has been called and the queue is empty.
func (s *Store) commitLoop() {
	defer close(s.exited)
	defer s.closeJournal()
	for {
		round, ok := s.nextRound()
		if !ok {
			return
		}
		s.commit(round)
		clear(round) // drop references to batches and callbacks
		s.mu.Lock()
		s.spare = round[:0]
		s.mu.Unlock()
	}
}

func (s *Store) nextRound() ([]request, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) == 0 {
		if s.closing {
			return nil, false
		}
		s.mu.Unlock()
		<-s.wake
		s.mu.Lock()
	}
	round := s.queue
	s.queue, s.spare = s.spare, nil
	return round, true
}

// group is one segment's share of a round.
type group struct {
	sg      *seg
	log     *segment.Segment
	batches [][]byte
	pos     int64 // with the journal: where the next batch goes in the file
	err     error
}

// commit writes, syncs and acknowledges one round. Segments are written
// in order of first appearance; after a write error nothing more is
// written, but files already written are still synced so the batches whose
// fsync succeeds are acknowledged — they are durable.
func (s *Store) commit(round []request) {
	if s.startup != nil {
		s.continueOpen()
	}
	groups, of := groupRound(round)
	if err := s.failure(); err != nil {
		for _, g := range groups {
			g.err = err
		}
	} else if s.jr != nil {
		s.journalRound(round, groups, of)
	} else {
		s.writeAll(groups)
		s.syncAll(groups)
		s.refuseUnwritten(round, groups)
	}
	var failure error
	for _, g := range groups {
		if g.err != nil && failure == nil {
			failure = g.err
		}
	}
	if failure != nil && !errors.Is(failure, ErrNoSpace) {
		s.fail(failure)
	}
	s.finish(round, groups, of)
}

// groupRound groups a round's appends by segment file; of[i] is the group
// of round[i].
func groupRound(round []request) ([]*group, []int) {
	var groups []*group
	idx := map[*segment.Segment]int{}
	of := make([]int, len(round))
	for i, r := range round {
		if r.batch == nil {
			of[i] = -1
			continue
		}
		gi, ok := idx[r.log]
		if !ok {
			gi = len(groups)
			idx[r.log] = gi
			groups = append(groups, &group{sg: r.sg, log: r.log})
		}
		groups[gi].batches = append(groups[gi].batches, r.batch)
		of[i] = gi
	}
	return groups, of
}

func (s *Store) writeAll(groups []*group) {
	var werr error
	for _, g := range groups {
		if werr != nil {
			g.err = fmt.Errorf("not written after an earlier write error: %w", werr)
			continue
		}
		if err := g.log.Append(g.batches...); err != nil {
			g.err, werr = err, err
		}
	}
}

// syncAll fdatasyncs every written file; several files sync in parallel so
// the filesystem can fold them into one journal commit.
func (s *Store) syncAll(groups []*group) {
	var wg sync.WaitGroup
	var first *group
	for _, g := range groups {
		if g.err != nil {
			continue
		}
		s.stats.syncs.Add(1)
		if first == nil {
			first = g
			continue
		}
		wg.Add(1)
		go func(g *group) {
			defer wg.Done()
			start := time.Now()
			g.err = g.log.Sync()
			s.stats.syncLatency.Since(start)
		}(g)
	}
	if first != nil {
		start := time.Now()
		first.err = first.log.Sync()
		s.stats.syncLatency.Since(start)
	}
	wg.Wait()
}

// fail makes the store fail-stop: every later append is refused.
func (s *Store) fail(err error) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	s.mu.Unlock()
}

// Err reports why the store stopped taking writes (wrapping ErrFailed),
// or nil while it is healthy.
func (s *Store) Err() error { return s.failure() }

func (s *Store) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// finish fires callbacks in queue order and releases the queued bytes.
func (s *Store) finish(round []request, groups []*group, of []int) {
	var freed int64
	var batches, bytes uint64
	for i, r := range round {
		freed += r.size
		if of[i] < 0 {
			r.done(nil) // barrier: the waiter checks the store's state itself
			continue
		}
		if err := groups[of[i]].err; err != nil {
			if !errors.Is(err, ErrFailed) && !errors.Is(err, ErrNoSpace) {
				err = fmt.Errorf("%w: %w", ErrFailed, err)
			}
			r.done(err)
			continue
		}
		batches++
		bytes += uint64(r.size)
		r.done(nil)
	}
	if len(groups) > 0 {
		s.stats.rounds.Add(1)
	}
	if batches > 0 {
		s.stats.roundBatches.Observe(int64(batches))
		s.stats.roundBytes.Observe(int64(bytes))
	}
	s.stats.batches.Add(batches)
	s.stats.bytes.Add(bytes)
	s.mu.Lock()
	s.pending -= freed
	s.signalSpaceLocked()
	s.mu.Unlock()
}
