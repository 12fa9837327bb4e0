package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/metadata"
)

// A split or merge asked of any node of a cluster. The metadata refuses to
// split or merge a range that has an active segment, so the node doing it
// seals the range's active segment first, here if it writes the range, or
// by asking the node that does (a roll over the data plane: that node
// fences its store and records the seal with what the fence answered).
// Between that seal and the split any node producing to the range could
// open a successor, and the split would be refused for as long as
// produces keep coming; so the range is first held in the metadata
// (hold_range), which refuses open_segment until the split or merge lands
// or the hold runs out. A produce that meets the hold is answered retry.

// rangeHold is how long a range stays held for a split or merge: enough
// for the hold, a roll on another node and the split itself to commit,
// bounded by what the metadata accepts.
func (b *Broker) rangeHold() time.Duration {
	d := 2*b.cluster.cfg.MetadataTimeout + b.data.lim.CallTimeout
	return min(d, metadata.MaxHoldMs*time.Millisecond)
}

// writtenElsewhere reports whether err says another node of the cluster
// writes the range: a split or merge can still go on, rolling it there.
func (b *Broker) writtenElsewhere(err error) bool {
	_, remote := isNotOwner(err)
	return remote && b.data != nil
}

// holdRanges holds ranges for a split or merge by this node. A single
// node needs no hold: its write-head locks keep its own produces out.
func (b *Broker) holdRanges(ctx context.Context, ids ...uint64) error {
	if b.cluster == nil {
		return nil
	}
	for _, id := range ids {
		if err := b.holdRange(ctx, id); err != nil {
			b.releaseRanges(ids...)
			return err
		}
	}
	return nil
}

// holdRange holds one range for rangeHold, and leaves a hold that failed
// (it may still have landed) to the caller to release.
func (b *Broker) holdRange(ctx context.Context, id uint64) error {
	until := b.nowMs() + b.rangeHold().Milliseconds()
	_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindHoldRange, Range: id, Until: until})
	return err
}

// releaseRanges ends the holds of a split or merge that failed, so the
// ranges take produces again at once rather than when the hold runs out.
// A range the split or merge sealed refuses the release, harmlessly.
func (b *Broker) releaseRanges(ids ...uint64) {
	if b.cluster == nil {
		return
	}
	for _, id := range ids {
		_, err := b.apply(b.life, metadata.Command{Kind: metadata.KindHoldRange, Range: id})
		if err != nil && !errors.Is(err, metadata.ErrSealed) {
			b.log.Warn("releasing a range held for a split or merge failed; it runs out on its own",
				"range", id, "err", err)
		}
	}
}

// rollForChangeLocked seals h's active segment before a split or merge of
// its range, wherever the range is written.
//
// REQUIRES: h.mu held.
func (b *Broker) rollForChangeLocked(ctx context.Context, h *head) error {
	err := b.readyLocked(h)
	if b.writtenElsewhere(err) {
		err := b.rollRemote(ctx, h)
		if errors.Is(err, ErrUnreachable) && b.replicas() != nil {
			// A replicated segment whose primary does not answer is
			// sealed from its other copies instead (a failover).
			return b.failoverRemoteLocked(h)
		}
		return err
	}
	if err != nil {
		return err
	}
	if h.retired {
		return metadata.ErrSealed
	}
	return b.rollLocked(h)
}

// rollRemote asks the node writing h's range to seal its active segment.
//
// REQUIRES: h.mu held.
func (b *Broker) rollRemote(ctx context.Context, h *head) error {
	v := b.viewRange(h.rangeID)
	switch {
	case v.retired:
		b.retireLocked(h)
		return metadata.ErrSealed
	case !v.hasActive:
		return nil
	}
	node := primaryOf(v.active)
	req := (&dataplane.Roll{Range: h.rangeID, Segment: v.active.ID}).Encode()
	resp, err := b.data.call(ctx, node, req)
	if err != nil {
		return err
	}
	_, err = dataplane.DecodeRollAnswer(resp)
	var r *dataplane.Refusal
	if errors.As(err, &r) {
		return remoteError(node, r)
	}
	return err
}

// serveRoll seals, for another node's split or merge, the active segment
// of a range this node writes, and answers the end it was sealed at.
func (d *dataPlane) serveRoll(req []byte) ([]byte, error) {
	m, err := dataplane.DecodeRoll(req)
	if err != nil {
		return nil, err
	}
	b := d.b
	topicID := b.topicOfID(m.Range)
	if topicID == 0 {
		return refusal(dataplane.StatusNotHere, ErrRetry, "range %d is unknown on node-%d", m.Range, d.self), nil
	}
	h := b.headFor(topicID, m.Range)
	h.mu.Lock()
	defer h.mu.Unlock()
	end, err := b.rollAskedLocked(h, m.Segment)
	if err != nil {
		if node, ok := isNotOwner(err); ok {
			r := &dataplane.Refusal{Status: dataplane.StatusNotHere, Node: node, Reason: ErrNotOwner.Error(),
				Message: fmt.Sprintf("range %d is not written on node-%d", m.Range, d.self)}
			return r.Encode(), nil
		}
		return refusal(dataplane.StatusRefused, err, "roll of range %d on node-%d: %v", m.Range, d.self, err), nil
	}
	return (&dataplane.RollAnswer{End: end}).Encode(), nil
}

// rollAskedLocked seals segment segID if it is h's active segment. A roll
// asked again after it was done (the answer was lost) finds the segment
// sealed and answers its sealed end.
//
// REQUIRES: h.mu held.
func (b *Broker) rollAskedLocked(h *head, segID uint64) (uint64, error) {
	if err := b.readyLocked(h); err != nil {
		return 0, err
	}
	if h.segment == segID && !h.retired {
		if err := b.rollLocked(h); err != nil {
			return 0, err
		}
		return h.next, nil
	}
	var (
		seg   metadata.Segment
		found bool
	)
	_ = b.plane.ViewID(segID, func(st *metadata.State) { seg, found = st.Segment(segID) })
	if found && !seg.Active {
		return seg.End, nil
	}
	return 0, fmt.Errorf("%w: segment %d is not the active segment of range %d on this node", ErrRetry, segID, h.rangeID)
}
