package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/storage"
	"go.opentelemetry.io/otel/trace"
)

// followerAppend takes an Append from a primary, creating the copy on
// first contact when the control plane lists this node in the set. span,
// when not nil, is the append's follower span: it ends once the copy
// fsynced the append, or with the reason it was not taken.
func (h *Host) followerAppend(from uint64, m replication.Append, span trace.Span) {
	s := h.lookupSeg(m.Segment)
	if s == nil {
		var err error
		if s, err = h.newCopy(m.Segment, from, false); err != nil {
			h.cfg.Logger.Debug("replica: an append for a copy not kept here", "segment", m.Segment, "from", from, "err", err)
			endSpan(span, err)
			return
		}
	}
	s.mu.Lock()
	if s.f == nil || s.from != from {
		s.mu.Unlock()
		endSpan(span, fmt.Errorf("%w: segment %d, from node %d", ErrNotPrimary, m.Segment, from))
		return
	}
	acc, err := s.f.Append(m)
	if err != nil {
		s.mu.Unlock()
		if !errors.Is(err, replication.ErrFenced) {
			h.cfg.Logger.Warn("replica: an append refused", "segment", m.Segment, "from", from, "err", err)
		}
		endSpan(span, err)
		return
	}
	s.known = true // the primary's watermark, in every Append
	wm := s.learnLocked()
	s.mu.Unlock()
	h.send(from, acc.Reply)
	if wm != 0 {
		h.cfg.OnCommit(s.id, wm)
	}
	h.writeCopy(s, from, acc, span)
}

// learnLocked raises the watermark reads use to what the copy learned
// and holds, and returns it when it moved.
//
// REQUIRES: s.mu held, s.f set.
func (s *seg) learnLocked() uint64 {
	wm := min(s.f.Watermark(), s.f.SyncedEnd())
	if wm > s.wm {
		s.wm = wm
		return wm
	}
	return 0
}

// writeCopy appends what a follower accepted to the local store; the
// last batch's fsync acks the whole span, and ends the append's trace
// span (nil: none).
func (h *Host) writeCopy(s *seg, from uint64, acc replication.Accepted, span trace.Span) {
	if len(acc.Write) == 0 {
		endSpan(span, nil) // nothing new: a resend of what the copy holds
	}
	for i, b := range acc.Write {
		var done func(error)
		if i == len(acc.Write)-1 {
			end := acc.Span.End
			done = func(err error) {
				h.copySynced(s, from, end, err)
				endSpan(span, err)
			}
		}
		err := h.cfg.Store.AppendAtAsync(h.life, storage.SegmentID(s.id), b, done)
		if err != nil {
			h.copyRefused(s, from, err)
			endSpan(span, err)
			return
		}
	}
}

func (h *Host) copySynced(s *seg, from, end uint64, err error) {
	if err != nil {
		h.cfg.Logger.Warn("replica: a copy's fsync failed", "segment", s.id, "err", err)
		return
	}
	s.mu.Lock()
	if s.f == nil {
		s.mu.Unlock()
		return
	}
	ack := s.f.Synced(end)
	wm := s.learnLocked()
	s.mu.Unlock()
	h.send(from, ack)
	if wm != 0 {
		h.cfg.OnCommit(s.id, wm)
	}
}

// copyRefused handles a store that refused a follower's batch: the copy
// and its state machine disagree (a restart, a cut), so the state machine
// is rebuilt from what the store holds and the primary told where to
// send from.
func (h *Host) copyRefused(s *seg, from uint64, err error) {
	queued, durable, eerr := h.cfg.Store.Ends(storage.SegmentID(s.id))
	h.cfg.Logger.Warn("replica: the store refused a copy's batch", "segment", s.id, "err", err, "ends_err", eerr)
	if eerr != nil || queued != durable {
		return // appends still queued: the primary's resend finds the copy settled
	}
	s.mu.Lock()
	if s.f == nil || s.f.Fenced() {
		s.mu.Unlock()
		return
	}
	s.f = replication.NewFollower(s.id, s.base, durable)
	s.mu.Unlock()
	h.send(from, replication.Behind{Segment: s.id, Has: durable})
}

// newCopy starts the follower of segment id from the store's copy,
// creating the copy at the segment's base when there is none. The control
// plane must list this node in the set and, for an append, primary as its
// primary.
//
// A fence of an active segment this node holds no copy of (its primary
// died before reaching it) creates the copy too, empty: the copy answers
// the base, which is safe since it fsynced nothing, and the caller
// latches it so it refuses the old primary from then on. Without that
// answer a segment whose primary is lost before a quorum of followers
// made their copies could never gather a quorum of fence answers, and
// its range would take no writes again.
func (h *Host) newCopy(id, primary uint64, fence bool) (*seg, error) {
	info, ok := h.cfg.Lookup(id)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %d is unknown to the metadata here", ErrUnknownSegment, id)
	case !slices.Contains(info.Replicas, h.cfg.Self):
		return nil, fmt.Errorf("%w: %d, whose replicas are %v", ErrUnknownSegment, id, info.Replicas)
	case !fence && (!info.Active || len(info.Replicas) == 0 || info.Replicas[0] != primary):
		return nil, fmt.Errorf("%w: %d is not active with primary %d", ErrUnknownSegment, id, primary)
	}
	sid := storage.SegmentID(id)
	queued, durable, err := h.cfg.Store.Ends(sid)
	created := false
	if errors.Is(err, storage.ErrNotFound) {
		queued, durable, created, err = h.createCopy(sid, info, fence)
	}
	if err != nil {
		return nil, err
	}
	if queued != durable {
		return nil, fmt.Errorf("replica: copy of %d has appends still queued", id)
	}
	inf, err := h.cfg.Store.Info(sid)
	if err != nil {
		return nil, err
	}
	if inf.Sealed && !fence {
		return nil, fmt.Errorf("replica: copy of %d is sealed", id)
	}
	f := replication.NewFollower(id, info.Base, durable)
	if inf.Fenced {
		// A fence answered before a restart (the store keeps it): the copy
		// must not take the old primary's appends again, or a primary the
		// failover shut out could reach a quorum through it (W4, W6).
		f.Fence()
	}
	// A copy the fence creates, or one a fence latched and that is still
	// empty (how a created copy looks after a restart), holds nothing the
	// node may have acknowledged before it lost its disk: its answer is
	// no witness (quorumEnd).
	unknownEnd := fence && created || inf.Fenced && durable == info.Base && inf.Records == 0
	s := &seg{id: id, base: info.Base, f: f, from: primary, wm: info.Base, unknownEnd: unknownEnd}
	if err := h.add(s); err != nil {
		if s2 := h.lookupSeg(id); s2 != nil {
			return s2, nil // another message created it first
		}
		return nil, err
	}
	return s, nil
}

// createCopy creates an empty copy of a segment at its base. A fence
// creates one only for a segment still active in this node's view: a
// sealed segment's end is decided, and an empty copy of it would only be
// left behind unsealed. Another message may create the copy meanwhile:
// its ends are read again.
func (h *Host) createCopy(sid storage.SegmentID, info SegmentInfo, fence bool) (queued, durable uint64, created bool, err error) {
	if fence && !info.Active {
		return 0, 0, false, fmt.Errorf("%w: %d has no copy here and is sealed", ErrUnknownSegment, sid)
	}
	err = h.cfg.Store.CreateFor(sid, info.Base, info.Owner)
	switch {
	case err == nil:
		return info.Base, info.Base, true, nil
	case errors.Is(err, storage.ErrExists):
		queued, durable, err = h.cfg.Store.Ends(sid)
		return queued, durable, false, err
	}
	return 0, 0, false, err
}

// fenceCopy answers a failover's fence of this node's copy of id: the
// copy takes nothing more and answers its fsynced end. A primary running
// here latches itself and refuses: a live primary's answer must not
// count (replication.FailoverEnd).
//
// The answer is sent only once the store keeps the fence (Store.Fence
// writes and fsyncs its marker), so a copy killed after answering still
// refuses the old primary when it comes back (W4, W6).
func (h *Host) fenceCopy(ctx context.Context, id uint64) (replication.FenceAnswer, error) {
	s := h.lookupSeg(id)
	if s == nil {
		var err error
		if s, err = h.newCopy(id, 0, true); err != nil {
			return replication.FenceAnswer{}, err
		}
	}
	s.mu.Lock()
	if s.p != nil {
		s.p.Fence()
		s.mu.Unlock()
		return replication.FenceAnswer{}, fmt.Errorf("%w: segment %d is led here; a live primary does not answer a failover", ErrNotPrimary, id)
	}
	end := s.f.Fence()
	unknown := s.unknownEnd && end == s.base
	s.mu.Unlock()
	// NB: the state machine's answer, not the store's: appends the store
	// had queued may still land above it, unacknowledged, and a slow
	// fsync of them must not hold the fence up (Latch does not wait for
	// them). After a restart the copy answers its recovered end, at
	// least this one; both bound its votes, and FailoverEnd counts a
	// node's highest answer.
	if err := h.cfg.Store.Latch(ctx, storage.SegmentID(id)); err != nil {
		return replication.FenceAnswer{}, fmt.Errorf("replica: keep the fence of %d: %w", id, err)
	}
	return replication.FenceAnswer{Segment: id, End: end, Unknown: unknown}, nil
}

// SealCopy applies the control plane's seal of segment id at end to this
// node's copy: sealed at exactly end, the batches above it cut (the seal
// says they were never acknowledged, W6). A copy that is behind is left
// unsealed and reported with ErrBehind; a seal below the watermark the
// copy learned is refused (replication.ErrBelowWatermark) and nothing is
// touched (S4). The host stops replicating the segment either way.
func (h *Host) SealCopy(ctx context.Context, id, end uint64) error {
	sid := storage.SegmentID(id)
	s := h.lookupSeg(id)
	if s != nil {
		s.mu.Lock()
		var err error
		switch {
		case s.f != nil:
			var t replication.Truncation
			if t, err = s.f.Truncate(end); err == nil && t.Missing.End > t.Missing.Base {
				err = fmt.Errorf("%w: copy of %d lacks [%d, %d)", ErrBehind, id, t.Missing.Base, t.Missing.End)
			}
		case s.p != nil:
			s.p.Fence()
		}
		s.mu.Unlock()
		h.Drop(id)
		if err != nil {
			return err
		}
	}
	queued, _, err := h.cfg.Store.Ends(sid)
	if err != nil {
		return err
	}
	if queued < end {
		return fmt.Errorf("%w: copy of %d ends at %d, sealed at %d", ErrBehind, id, queued, end)
	}
	_, err = h.cfg.Store.SealWith(ctx, sid, storage.SealOptions{End: end, Exact: true, TruncateAbove: true})
	return err
}

// FenceCopies fences the copies of segment id on replicas (its replica
// set, primary first) for a failover and decides the seal from their
// answers (replication.FailoverEnd, W6, narrowed by quorumEnd). The
// primary is asked too: one that restarted answers as a follower, a live
// one refuses. Once enough replicas answered it waits fenceGraceTicks
// resend ticks more for the others, then decides; it fails with
// ErrNoQuorum when ctx ends before enough answered.
func (h *Host) FenceCopies(ctx context.Context, id uint64, replicas []uint64) (replication.Failover, error) {
	type answer struct {
		node uint64
		a    replication.FenceAnswer
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan answer, len(replicas))
	for _, node := range replicas {
		go func() {
			a, err := h.fenceOne(ctx, id, node)
			ch <- answer{node, a, err}
		}()
	}
	var answers []replication.Answer
	var errs []error
	quorum := replication.Quorum(len(replicas))
	var decided *replication.Failover
	var grace <-chan time.Time
	for range replicas {
		var a answer
		select {
		case a = <-ch:
		case <-grace:
			return quorumEnd(replicas, answers, *decided), nil
		}
		if a.err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", a.node, a.err))
			continue
		}
		answers = append(answers, replication.Answer{Node: a.node, End: a.a.End, Unknown: a.a.Unknown})
		f, ok, err := replication.FailoverEnd(replicas, quorum, answers)
		switch {
		case err != nil:
			return f, err
		case ok && len(f.Unknown) == 0:
			return quorumEnd(replicas, answers, f), nil
		case ok && decided == nil:
			t := h.cfg.Clock.NewTimer(fenceGraceTicks * h.cfg.Tick)
			defer t.Stop()
			grace = t.C()
		}
		if ok {
			decided = &f
		}
	}
	if decided != nil {
		return quorumEnd(replicas, answers, *decided), nil // the rest refused
	}
	return replication.Failover{}, fmt.Errorf("%w: segment %d: %d of %d replicas answered its fence, %d needed: %w",
		ErrNoQuorum, id, len(answers), len(replicas), replication.AnswersNeeded(len(replicas), quorum), errors.Join(errs...))
}

// fenceOne fences node's copy of id: this node's own copy directly.
func (h *Host) fenceOne(ctx context.Context, id, node uint64) (replication.FenceAnswer, error) {
	if node == h.cfg.Self {
		return h.fenceCopy(ctx, id)
	}
	resp, err := h.cfg.Transport.Call(ctx, node, peerChannel, replication.Encode(replication.Fence{Segment: id}))
	if err != nil {
		return replication.FenceAnswer{}, err
	}
	m, err := replication.Decode(resp)
	if err != nil {
		return replication.FenceAnswer{}, err
	}
	a, ok := m.(replication.FenceAnswer)
	if !ok || a.Segment != id {
		return replication.FenceAnswer{}, fmt.Errorf("replica: node %d answered a fence of %d with %v", node, id, m.Kind())
	}
	return a, nil
}
