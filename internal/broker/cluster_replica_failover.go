package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/storage"
)

// Failover of a replicated segment. When the primary of a range's active
// segment is dead or does not answer (a forwarded produce finds it
// unreachable, gossip declares it dead), or this node led it before a
// restart and lost the primary's state, the node that needs to write the
// range:
//
//  1. holds the range (hold_range), so no successor opens meanwhile;
//  2. fences the copies of the replica set (replica.Host.FenceCopies): a
//     copy answers its fsynced end and takes nothing more; a primary
//     still alive refuses and its answer does not count;
//  3. seals the segment at replication.FailoverEnd of the answers, which
//     covers every acknowledged record (W6), and sets the range's next
//     offset to it (W4);
//  4. releases the hold; the next produce opens a successor on live
//     nodes. Every copy applies the seal when it sees it (sealCopy): cut
//     above it, or left unsealed and reported when behind.
//
// One attempt, all four steps, is bounded by one MetadataTimeout. Without
// enough answers or without a metadata quorum (two of three nodes gone)
// nothing is sealed and the attempt fails with a retriable reason
// (no_quorum, metadata_unavailable, retry). A node runs at most one
// attempt per range at a time, and after a failed one waits before the
// next (failoverRuns.begin): from a quarter of MetadataTimeout, doubling
// up to one MetadataTimeout. Meanwhile a produce that needs the failover
// answers at once, with the last attempt's reason (retry while the first
// runs). The sweep tries ranges that never failed first. Callers that
// hold other heads' locks (a merge) keep h.mu through their attempt;
// failoverFrom releases it, so the range's produces are not held up
// behind the attempt. The hold of a failed attempt
// (it may have landed even when its answer timed out) is released in the
// background, and the range counts as failing over until that ends, so
// a late release never lifts the next attempt's hold.

// Bounds of the failover bookkeeping (B1).
const (
	// maxFailoverGates bounds the ranges whose failover state a node
	// keeps (running or waiting to be tried again); past it a failover
	// is refused with too_many_requests.
	maxFailoverGates = 4096
	// maxHoldReleases bounds the background releases of failed
	// attempts' holds; past it a hold is left to run out on its own.
	maxHoldReleases = 16
)

// failoverGate is one range's failover state on this node.
type failoverGate struct {
	busy    bool          // an attempt, or its hold's release, runs
	retryAt time.Time     // no attempt before then
	backoff time.Duration // the last wait, doubled on each failure
	err     error         // why the last attempt failed
}

// begin marks rangeID as failing over on this node, or says why it may
// not be now: an attempt runs already, or the last one failed and the
// range waits.
func (f *failoverRuns) begin(rangeID uint64, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gates == nil {
		f.gates = map[uint64]*failoverGate{}
	}
	g := f.gates[rangeID]
	switch {
	case g != nil && g.busy:
		return g.busyError(rangeID)
	case g != nil && now.Before(g.retryAt):
		return fmt.Errorf("%w: range %d: its last failover failed and the next is tried in %s (%v): %w",
			failoverReason(g.err), rangeID, g.retryAt.Sub(now).Round(time.Millisecond), g.err, errFailoverWaits)
	case g == nil:
		if len(f.gates) >= maxFailoverGates {
			f.pruneLocked(now)
		}
		if len(f.gates) >= maxFailoverGates {
			return fmt.Errorf("%w: %d ranges are failing over on this node (limit %d)", ErrTooManyRequests, len(f.gates), maxFailoverGates)
		}
		g = &failoverGate{}
		f.gates[rangeID] = g
	}
	g.busy = true
	return nil
}

// finish ends rangeID's failover: forgotten when it succeeded, else
// waiting before the next attempt, from base doubling up to ceiling.
func (f *failoverRuns) finish(rangeID uint64, err error, now time.Time, base, ceiling time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gates[rangeID]
	if g == nil {
		return
	}
	if err == nil {
		delete(f.gates, rangeID)
		return
	}
	g.busy, g.err = false, err
	g.backoff = min(max(2*g.backoff, base), ceiling)
	g.retryAt = now.Add(g.backoff)
}

// failed records why rangeID's running failover failed, if it did; it
// stays busy until finish.
func (f *failoverRuns) failed(rangeID uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.gates[rangeID]; g != nil && err != nil {
		g.err = err
	}
}

// pruneLocked forgets the ranges that wait no more.
//
// REQUIRES: f.mu held.
func (f *failoverRuns) pruneLocked(now time.Time) {
	for id, g := range f.gates {
		if !g.busy && !now.Before(g.retryAt) {
			delete(f.gates, id)
		}
	}
}

// failing refuses a produce that would wait for an attempt to fail
// rangeID over running on this node: it answers at once instead (C3).
func (f *failoverRuns) failing(rangeID uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.gates[rangeID]; g != nil && g.busy {
		return g.busyError(rangeID)
	}
	return nil
}

// busyError says that rangeID is failing over, with why the last attempt
// failed when one did.
func (g *failoverGate) busyError(rangeID uint64) error {
	if g.err == nil {
		return fmt.Errorf("%w: range %d is failing over on this node: %w", ErrRetry, rangeID, errFailoverWaits)
	}
	return fmt.Errorf("%w: range %d is failing over on this node; the last attempt failed (%v): %w",
		failoverReason(g.err), rangeID, g.err, errFailoverWaits)
}

// state reports whether rangeID is failing over or waiting before its
// next attempt, and whether an attempt failed since it last succeeded.
func (f *failoverRuns) state(rangeID uint64, now time.Time) (waits, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gates[rangeID]
	if g == nil {
		return false, false
	}
	return g.busy || now.Before(g.retryAt), g.err != nil
}

// startRelease counts one more background release, unless the bound is
// reached or the broker is closing.
func (f *failoverRuns) startRelease() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.releases >= maxHoldReleases {
		return false
	}
	f.releases++
	f.wg.Add(1)
	return true
}

func (f *failoverRuns) releaseDone() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases--
}

// errFailoverWaits marks a refusal because the range is failing over or
// waiting to: nothing was attempted.
var errFailoverWaits = errors.New("a failover of the range is running or waiting")

// errNoQuorumRetry answers no_quorum on the wire and is a retry to
// callers that only know ErrRetry.
var errNoQuorumRetry = fmt.Errorf("%w: %w", ErrNoQuorum, ErrRetry)

// failoverReason is the retriable reason a failed attempt answers with.
func failoverReason(err error) error {
	switch {
	case errors.Is(err, ErrMetadataUnavailable):
		return ErrMetadataUnavailable
	case errors.Is(err, replica.ErrNoQuorum):
		return errNoQuorumRetry
	case errors.Is(err, ErrShuttingDown):
		return ErrShuttingDown
	}
	return ErrRetry
}

// reconcileReplicatedLocked loads h from a replicated active segment:
// led here by a running primary, written by another node, or failed
// over when this node led it and lost the primary (a restart) or its
// primary was fenced without draining (its followers did not answer a
// roll).
//
// REQUIRES: h.mu held.
func (b *Broker) reconcileReplicatedLocked(h *head, seg metadata.Segment) error {
	if !b.writesHere(seg) {
		return b.notOwner(seg)
	}
	host := b.replicas()
	if host == nil {
		return fmt.Errorf("%w: the replica host is not running", ErrShuttingDown)
	}
	end, fenced, ok := host.Primary(seg.ID)
	if !ok || fenced {
		return b.failoverLocked(h, seg, false)
	}
	h.segment, h.next, h.repl = seg.ID, end, true
	if info, err := b.store.Info(storage.SegmentID(seg.ID)); err == nil {
		h.bytes = info.Bytes
		h.activeBytes.Store(info.Bytes)
	}
	h.openedAt = msTime(seg.OpenedAt)
	h.rollBytes = b.headRollBytes(h.topicID)
	h.ready = true
	return nil
}

// failoverResult is what one failover attempt did.
type failoverResult struct {
	sealed  bool   // the segment is sealed, at end (by this attempt or another node first)
	end     uint64 // its sealed end
	retired bool   // the range was split or merged meanwhile
	held    bool   // the attempt asked for a hold: release it
}

// failoverLocked runs one attempt to fail over h's range, whose active
// segment is seg (lookAgain: the metadata is caught up and read again
// first, seg unused), and leaves h with no active segment at the sealed
// end. h.mu stays held throughout: its callers may hold other heads too.
//
// REQUIRES: h.mu held.
func (b *Broker) failoverLocked(h *head, seg metadata.Segment, lookAgain bool) error {
	if err := b.cluster.failovers.begin(h.rangeID, b.cfg.Clock.Now()); err != nil {
		return err
	}
	h.ready = false
	ctx, cancel := context.WithTimeout(b.life, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	r, err := b.attemptFailover(ctx, h.rangeID, seg, lookAgain)
	return b.endFailoverLocked(ctx, h, r, err)
}

// failoverRemoteLocked fails over h's range, whose active segment is led
// by another node that is dead or did not answer. The metadata is read
// again first: the segment may have been sealed or failed over already.
//
// REQUIRES: h.mu held.
func (b *Broker) failoverRemoteLocked(h *head) error {
	return b.failoverLocked(h, metadata.Segment{}, true)
}

// failoverFrom fails over h's range when node, the node found writing
// it, leads a replicated active segment of it. It reports whether the
// range's head changed (look again), or why it could not fail over: a
// retriable reason. h.mu is not held while the attempt waits, so the
// range's produces meanwhile answer at once (forwardLocked).
func (b *Broker) failoverFrom(h *head, node uint64) (bool, error) {
	v := b.viewRange(h.rangeID)
	if v.retired || !v.hasActive || !replicated(v.active) || primaryOf(v.active) != node {
		return false, nil
	}
	if err := b.cluster.failovers.begin(h.rangeID, b.cfg.Clock.Now()); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(b.life, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	r, err := b.attemptFailover(ctx, h.rangeID, v.active, true)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err = b.endFailoverLocked(ctx, h, r, err); err != nil {
		if !errors.Is(err, errRetired) {
			b.log.Warn("failing over a range whose primary is lost did not finish", "range", h.rangeID, "primary", node, "err", err)
		}
		return false, err
	}
	return true, nil
}

// attemptFailover is one failover attempt of rangeID's active segment
// seg, bounded by ctx. It does not touch the range's head.
func (b *Broker) attemptFailover(ctx context.Context, rangeID uint64, seg metadata.Segment, lookAgain bool) (failoverResult, error) {
	var r failoverResult
	if lookAgain {
		if err := b.plane.Barrier(ctx, uint64(metadata.ShardOf(rangeID))); err != nil {
			return r, fmt.Errorf("%w: catch up with the metadata of range %d: %v", ErrMetadataUnavailable, rangeID, err)
		}
		v := b.viewRange(rangeID)
		switch {
		case v.retired:
			r.retired = true
			return r, errRetired
		case !v.hasActive || !replicated(v.active) || b.writesHere(v.active):
			return r, nil // someone else sealed it, or it is ours now
		}
		seg = v.active
	}
	host := b.replicas()
	if host == nil {
		return r, fmt.Errorf("%w: the replica host is not running", ErrShuttingDown)
	}
	r.held = true // a hold whose answer timed out may still land
	if err := b.holdRange(ctx, rangeID); err != nil {
		return r, fmt.Errorf("fail over segment %d: hold range %d: %w", seg.ID, rangeID, err)
	}
	// A primary led here answers, from now on, as a follower's copy.
	wm, led := host.DropPrimary(seg.ID)
	f, err := host.FenceCopies(ctx, seg.ID, replicaIDs(seg))
	if err != nil {
		return r, fmt.Errorf("fail over segment %d of range %d: %w", seg.ID, rangeID, err)
	}
	end := f.End
	if led && wm < end {
		// This node was the only one acknowledging records of seg, none
		// above wm: the appends between were answered retry, and are cut
		// so that the retries do not store them twice.
		b.log.Info("a failover led by the segment's own primary sealed at its commit watermark, below the copies' end",
			"segment", seg.ID, "range", rangeID, "watermark", wm, "copies_end", end)
		end = wm
	}
	// NB: unlike a roll's seal (sealInMetadata), this one records only the
	// end, not the records, bytes, expiry and content hash. Those describe
	// the copy's content up to the agreed end, and no copy can give them
	// yet: the copies are cut and sealed only after this seal lands (the
	// end may be below what some hold, and only the recorded seal may cut
	// them, W6), the store computes a footer only when it seals, and the
	// copy that answered the end (f.Source) may be on another node. The
	// fields stay zero, which readers of the metadata take for "unknown"
	// (reconcile compares a content hash only when one was recorded).
	res, err := b.apply(ctx, metadata.Command{Kind: "seal_segment", Segment: seg.ID, End: end})
	switch {
	case errors.Is(err, metadata.ErrAlreadySealed) && res.Sealed != nil:
		end = res.Sealed.End // another node's failover or roll sealed it first
	case err != nil:
		return r, fmt.Errorf("seal segment %d at %d after a failover: %w", seg.ID, end, err)
	}
	b.log.Warn("failed over a segment whose primary was lost", "segment", seg.ID, "range", rangeID,
		"primary", seg.Replicas[0], "sealed_end", end, "source", f.Source, "behind", f.Behind, "unknown", f.Unknown)
	sealed := seg
	sealed.Active, sealed.End = false, end
	b.sealCopy(sealed)
	r.sealed, r.end = true, end
	return r, nil
}

// endFailoverLocked applies an attempt's outcome to h, releases the
// range's hold and ends the failover. A successful attempt's hold is
// released at once, within the attempt's ctx, so the range's successor
// may open; a failed one's in the background, off the produce's path.
// It returns err as a retriable reason.
//
// REQUIRES: h.mu held.
func (b *Broker) endFailoverLocked(ctx context.Context, h *head, r failoverResult, err error) error {
	switch {
	case r.retired:
		b.retireLocked(h)
	case r.sealed && !h.ready:
		// The hold still stands (it outlasts the attempt), so nobody
		// opened a successor since the seal: h may take the sealed end.
		h.sealedAt(r.end)
		h.ready = true
	case err == nil:
		h.ready = false // someone else sealed it, or it is ours now: look again
	}
	release := r.held
	if err == nil && r.held {
		_, rerr := b.apply(ctx, metadata.Command{Kind: metadata.KindHoldRange, Range: h.rangeID})
		release = rerr != nil && !errors.Is(rerr, metadata.ErrSealed)
	}
	if errors.Is(err, errRetired) {
		b.endFailover(h.rangeID, nil, release) // nothing left to fail over
		return err
	}
	b.endFailover(h.rangeID, err, release)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: range %d did not fail over: %v", failoverReason(err), h.rangeID, err)
}

// endFailover ends rangeID's failover on this node, once its hold is
// released when release is set: in the background, bounded
// (maxHoldReleases), owned by the broker's life (waitFailovers waits for
// it). A release that cannot start is left to the hold's own expiry.
func (b *Broker) endFailover(rangeID uint64, err error, release bool) {
	runs := &b.cluster.failovers
	mt := b.cluster.cfg.MetadataTimeout
	finish := func() { runs.finish(rangeID, err, b.cfg.Clock.Now(), mt/4, mt) }
	if !release {
		finish()
		return
	}
	if !runs.startRelease() {
		b.log.Warn("a failed failover's hold is left to run out on its own", "range", rangeID, "hold", b.rangeHold())
		finish()
		return
	}
	runs.failed(rangeID, err) // produces refused meanwhile say why
	// Owned by runs: waitFailovers waits for it; apply is bounded by
	// MetadataTimeout.
	go func() {
		defer runs.wg.Done()
		defer runs.releaseDone()
		b.releaseRanges(rangeID)
		finish()
	}()
}
