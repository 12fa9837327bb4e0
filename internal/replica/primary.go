package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/storage"
)

// seg is one segment replicated here: a primary (p) or a follower's copy
// (f). mu serialises the state machine; appendMu keeps the primary's
// offset assignment and its store appends in one order.
type seg struct {
	id       uint64
	base     uint64
	appendMu sync.Mutex

	mu     sync.Mutex
	p      *replication.Primary
	f      *replication.Follower
	from   uint64 // a follower's primary
	synced uint64 // a primary's local fsynced end
	wm     uint64 // the watermark reads may use; only grows
	// known: wm is a watermark learned from the segment's primary (a
	// primary knows its own). A copy started without one, a restart or a
	// failover's fence, must not serve reads bounded by its base (R3).
	known bool
	// unknownEnd: a follower copy whose end witnesses nothing of what
	// this node acknowledged (the fence created it, or it is a fenced
	// copy still empty after a restart): its fence answers carry
	// replication.FenceAnswer.Unknown.
	unknownEnd bool
	dones      []waiter
	drained    chan struct{} // closed once fenced and drained
	err        error         // the local store failed the segment
}

// waiter is a produce waiting for the watermark to pass end.
type waiter struct {
	end  uint64
	at   int64 // when it was appended, ms
	done func(error)
}

// Open starts the primary of a new active segment whose local file the
// caller created at base; replicas are node ids, this node first.
func (h *Host) Open(id, base uint64, replicas []uint64) error {
	if len(replicas) == 0 || replicas[0] != h.cfg.Self {
		return fmt.Errorf("replica: segment %d: this node (%d) must lead its replica set %v", id, h.cfg.Self, replicas)
	}
	cfg := h.cfg.Replication
	cfg.Segment, cfg.Base, cfg.Replicas = id, base, replicas
	p, err := replication.NewPrimary(cfg)
	if err != nil {
		return err
	}
	return h.add(&seg{id: id, base: base, p: p, synced: base, wm: base, known: true})
}

// Append replicates batch, one batch in the storage encoding whose
// checksum the caller checked, as the next batch of the primary's segment
// id: it is stamped with the next offsets (W2), shipped to the followers
// and appended to the local store. It returns the base offset assigned.
// ctx is checked once, before anything is done.
// done is called once, without locks held, after a quorum fsynced the
// batch (W1) and the local copy has it durable (so that a read through
// the primary sees every acknowledged record), or with the failure; it
// must not block; it is not called when Append returns an error.
// Append copies batch before anything keeps it: the primary holds the
// bytes until every follower acked them, past done, and the caller's
// buffer (a client server's pooled request frame) is reused once the
// produce is answered. Appends to one segment must not run
// concurrently with each other if their order matters to the caller.
func (h *Host) Append(ctx context.Context, id uint64, batch []byte, done func(error)) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := h.lookupSeg(id)
	if s == nil {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSegment, id)
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	s.mu.Lock()
	if s.p == nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %d", ErrNotPrimary, id)
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return 0, err
	}
	batch = slices.Clone(batch) // owned: see above
	base, out, err := s.p.Append(batch, h.now())
	if err != nil {
		s.mu.Unlock()
		if errors.Is(err, replication.ErrBackpressure) {
			return 0, fmt.Errorf("%w: segment %d: %v", ErrBackpressure, id, err)
		}
		return 0, err
	}
	end := s.p.End()
	s.dones = append(s.dones, waiter{end: end, at: h.now(), done: done})
	ready := s.settleLocked()
	s.mu.Unlock()
	h.act(ctx, s, out, ready)
	// The followers have the batch at these offsets now, so the local
	// copy must take it whatever becomes of the caller: on the host's
	// lifetime, waiting (B1) while the store's queue is full.
	err = h.cfg.Store.AppendAsync(h.life, storage.SegmentID(id), batch, func(err error) { h.localSynced(s, end, err) })
	if err != nil {
		// The followers were sent offsets the local copy will never
		// have: the segment cannot go on, and fails over.
		err = fmt.Errorf("%w: segment %d: local append: %w", ErrFailed, id, err)
		answered := !s.forget(end)
		h.broken(s, err)
		if answered {
			return base, nil // done ran already (timed out) with the failure
		}
		return 0, err
	}
	return base, nil
}

// forget removes the produce waiting for end, and reports whether it
// was still waiting (its done not called).
func (s *seg) forget(end uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.dones, func(w waiter) bool { return w.end == end })
	if i < 0 {
		return false
	}
	s.dones = slices.Delete(s.dones, i, i+1)
	return true
}

// localSynced is the store's fsync callback for a primary's batch.
func (h *Host) localSynced(s *seg, end uint64, err error) {
	if err != nil {
		h.broken(s, fmt.Errorf("%w: segment %d: local fsync: %w", ErrFailed, s.id, err))
		return
	}
	s.mu.Lock()
	s.synced = max(s.synced, end)
	s.mu.Unlock()
	s.primaryInput(h, func(p *replication.Primary, now int64) replication.Output { return p.LocalSynced(end, now) })
}

// broken fails a primary whose local copy failed: it is fenced, and every
// produce waiting on it fails.
func (h *Host) broken(s *seg, err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	if s.p != nil {
		s.p.Fence()
	}
	s.mu.Unlock()
	s.fail(err)
}

// primaryInput runs one input of s's primary and carries out its output.
func (s *seg) primaryInput(h *Host, in func(*replication.Primary, int64) replication.Output) {
	s.mu.Lock()
	if s.p == nil {
		s.mu.Unlock()
		return
	}
	out := in(s.p, h.now())
	ready := s.settleLocked()
	s.mu.Unlock()
	h.act(context.Background(), s, out, ready)
}

// settled is what an output released: produces to acknowledge and the
// watermark to announce (0 when it did not move).
type settled struct {
	dones []func(error)
	wm    uint64
}

// settleLocked takes the produces the watermark passed and closes the
// drained latch once the fenced segment is drained. What it releases
// (and reads may see) stops at the local fsynced end too: the primary
// serves reads from its own copy.
//
// REQUIRES: s.mu held, s.p set.
func (s *seg) settleLocked() settled {
	var st settled
	wm := min(s.p.Watermark(), s.synced)
	if wm > s.wm {
		s.wm, st.wm = wm, wm
	}
	i := 0
	for i < len(s.dones) && s.dones[i].end <= wm {
		st.dones = append(st.dones, s.dones[i].done)
		i++
	}
	s.dones = s.dones[i:]
	if s.drained != nil && s.p.Drained() && s.synced >= s.p.End() {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
	return st
}

// act sends an output's messages, queues its reads and releases what it
// settled. No lock is held. The messages carry ctx's trace context: an
// append's, when a produce's batch is shipped as it arrives.
func (h *Host) act(ctx context.Context, s *seg, out replication.Output, st settled) {
	for _, snd := range out.Sends {
		h.sendContext(ctx, snd.To, snd.Msg)
	}
	h.queueReads(s, out.Reads)
	for _, done := range st.dones {
		done(nil)
	}
	if st.wm != 0 {
		h.cfg.OnCommit(s.id, st.wm)
	}
}

// expire fails the produces appended before cutoff (ms) that are not
// committed yet: a quorum did not fsync them in time. Their batches stay
// in the segment and may still commit.
func (s *seg) expire(cutoff int64) {
	s.mu.Lock()
	i := 0
	for i < len(s.dones) && s.dones[i].at <= cutoff {
		i++
	}
	late := s.dones[:i:i]
	s.dones = s.dones[i:]
	wm := s.wm
	s.mu.Unlock()
	for _, w := range late {
		w.done(fmt.Errorf("%w: segment %d: offsets below %d not fsynced on a quorum in time (committed to %d)", ErrNoQuorum, s.id, w.end, wm))
	}
}

// fail ends every produce still waiting on s with err.
func (s *seg) fail(err error) {
	s.mu.Lock()
	dones := s.dones
	s.dones = nil
	s.mu.Unlock()
	for _, w := range dones {
		w.done(err)
	}
}

// Fence latches the primary of segment id (later appends are refused
// with a *replication.SealedError) and waits until everything appended
// before is committed, bounded by ctx. It answers the end the seal must
// record (W4). Asked again, it answers the same end.
func (h *Host) Fence(ctx context.Context, id uint64) (uint64, error) {
	s := h.lookupSeg(id)
	if s == nil {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSegment, id)
	}
	s.appendMu.Lock() // no append half done
	s.mu.Lock()
	s.appendMu.Unlock()
	if s.p == nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %d", ErrNotPrimary, id)
	}
	end := s.p.Fence()
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	_ = s.settleLocked()
	drained, err := s.drained, s.err
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case <-drained:
		return end, nil
	case <-ctx.Done():
		s.mu.Lock()
		wm := s.p.Watermark()
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: segment %d fenced at %d, committed to %d: %w", ErrNoQuorum, id, end, wm, ctx.Err())
	}
}
