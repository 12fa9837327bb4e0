package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/internal/metadata"
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
// Without enough answers (two of three replicas gone) nothing is sealed
// and the produce answers a retriable reason; the next one tries again.

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
		return b.failoverLocked(h, seg)
	}
	h.segment, h.next, h.repl = seg.ID, end, true
	if info, err := b.store.Info(storage.SegmentID(seg.ID)); err == nil {
		h.bytes = info.Bytes
		h.activeBytes.Store(info.Bytes)
	}
	h.openedAt = msTime(seg.OpenedAt)
	h.ready = true
	return nil
}

// failoverLocked seals seg, the active segment of h's range, from its
// replicas' fence answers, and leaves h with no active segment at the
// sealed end.
//
// REQUIRES: h.mu held.
func (b *Broker) failoverLocked(h *head, seg metadata.Segment) error {
	host := b.replicas()
	ctx, cancel := context.WithTimeout(b.life, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	h.ready = false
	if err := b.holdRanges(ctx, h.rangeID); err != nil {
		return fmt.Errorf("broker: fail over segment %d: %w", seg.ID, err)
	}
	// A primary led here answers, from now on, as a follower's copy.
	host.Drop(seg.ID)
	f, err := host.FenceCopies(ctx, seg.ID, replicaIDs(seg))
	if err != nil {
		b.releaseRanges(h.rangeID)
		return fmt.Errorf("%w: fail over segment %d of range %d: %v", ErrRetry, seg.ID, h.rangeID, err)
	}
	end := f.End
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
		b.releaseRanges(h.rangeID)
		return fmt.Errorf("broker: seal segment %d at %d after a failover: %w", seg.ID, end, err)
	}
	b.releaseRanges(h.rangeID)
	b.log.Warn("failed over a segment whose primary was lost", "segment", seg.ID, "range", h.rangeID,
		"primary", seg.Replicas[0], "sealed_end", end, "source", f.Source, "behind", f.Behind, "unknown", f.Unknown)
	sealed := seg
	sealed.Active, sealed.End = false, end
	b.sealCopy(sealed)
	h.sealedAt(end)
	h.ready = true
	return nil
}

// failoverRemote fails over h's range whose active segment is led by
// another node that is dead or did not answer. The metadata is read
// again first: the segment may have been sealed or failed over already.
//
// REQUIRES: h.mu held.
func (b *Broker) failoverRemoteLocked(h *head) error {
	b.catchUpUnlocked(h)
	v := b.viewRange(h.rangeID)
	switch {
	case v.retired:
		b.retireLocked(h)
		return errRetired
	case !v.hasActive || !replicated(v.active) || b.writesHere(v.active):
		h.ready = false // someone else sealed it, or it is ours now
		return nil
	}
	return b.failoverLocked(h, v.active)
}

// failoverFrom fails over h's range when node, the node found writing
// it, leads a replicated active segment of it. It reports whether the
// range's head changed (look again).
func (b *Broker) failoverFrom(h *head, node uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := b.viewRange(h.rangeID)
	if v.retired || !v.hasActive || !replicated(v.active) || primaryOf(v.active) != node {
		return false
	}
	if err := b.failoverRemoteLocked(h); err != nil {
		b.log.Warn("failing over a range whose primary is lost did not finish", "range", h.rangeID, "primary", node, "err", err)
		return false
	}
	return true
}
