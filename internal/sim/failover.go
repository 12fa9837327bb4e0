package sim

import (
	"errors"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/replication"
)

// failover is a failover this node runs, as the broker's failoverLocked:
// hold the range, fence the copies, seal at FailoverEnd of their answers
// (W6), release the hold. A live primary's answer does not count.
type failover struct {
	seg     metadata.Segment
	ids     []uint64
	answers []replication.Answer
	decided bool
}

// startFailover begins failing over seg unless it is under way here.
func (n *node) startFailover(seg metadata.Segment) {
	w := n.w
	if n.failovers[seg.ID] != nil || !seg.Active || len(seg.Replicas) < 2 {
		return
	}
	if _, err := w.cp.apply(n.id, metadata.Command{Kind: metadata.KindHoldRange, Range: seg.Range, Until: w.unixNow() + w.cfg.HoldMs}); err != nil {
		return // unavailable, or the range moved on: the next produce tries again
	}
	fo := &failover{seg: seg, ids: replicaIDs(seg)}
	n.failovers[seg.ID] = fo
	w.note('F', n.id, seg.ID)
	// A primary led here answers, from now on, as a follower's copy.
	if ps := n.prim[seg.ID]; ps != nil {
		ps.p.Fence()
		w.chk.primaryGone(n, ps)
		for _, wt := range ps.waiting {
			wt.reply(produceResp{Reason: reasonUnknown})
		}
		delete(n.prim, seg.ID)
	}
	for _, id := range fo.ids {
		if id == n.id {
			n.answerFence(n.id, seg.ID)
			continue
		}
		w.net.sendRepl(n.id, id, replication.Fence{Segment: seg.ID})
	}
	inc := n.inc
	w.after(w.cfg.FailoverTimeout, func() {
		if n.inc != inc || n.failovers[seg.ID] != fo || fo.decided {
			return
		}
		delete(n.failovers, seg.ID)
		n.releaseHold(seg.Range)
	})
}

// release ends a failover's hold of its range.
func (n *node) releaseHold(rangeID uint64) {
	_, err := n.w.cp.apply(n.id, metadata.Command{Kind: metadata.KindHoldRange, Range: rangeID})
	_ = err // a hold not released runs out on its own
}

// onFenceAnswer counts one answer; once FailoverEnd decides, the seal
// is recorded ControlDelay later (the round trip to the control plane).
func (n *node) onFenceAnswer(from uint64, a replication.FenceAnswer) {
	w := n.w
	fo := n.failovers[a.Segment]
	if fo == nil || fo.decided {
		return
	}
	fo.answers = append(fo.answers, replication.Answer{Node: from, End: a.End, Role: a.Role})
	f, ok, err := replication.FailoverEnd(fo.ids, replication.Quorum(len(fo.ids)), fo.answers)
	if err != nil {
		w.chk.fail("protocol", "node %d failover of %d: %v", n.id, a.Segment, err)
		return
	}
	if !ok {
		return
	}
	fo.decided = true
	end := f.End
	if w.cfg.Bug == BugSealAtLowestAnswer {
		end = lowestAnswer(fo.answers)
	}
	inc := n.inc
	w.after(w.cfg.ControlDelay, func() {
		if n.inc != inc || n.failovers[a.Segment] != fo {
			return
		}
		delete(n.failovers, a.Segment)
		n.sealFailover(fo, end)
	})
}

func lowestAnswer(as []replication.Answer) uint64 {
	var low uint64
	first := true
	for _, a := range as {
		if a.Role == replication.RoleFollower && (first || a.End < low) {
			low, first = a.End, false
		}
	}
	return low
}

// sealFailover records a failover's seal at end and releases the hold.
func (n *node) sealFailover(fo *failover, end uint64) {
	w := n.w
	res, err := w.cp.apply(n.id, metadata.Command{Kind: metadata.KindSealSegment, Segment: fo.seg.ID, End: end})
	switch {
	case errors.Is(err, metadata.ErrAlreadySealed) && res.Sealed != nil:
	case err != nil:
		n.releaseHold(fo.seg.Range)
		return
	default:
		w.stats.Failovers++
		w.chk.sealed(fo.seg.ID, res.Sealed.End, "failover")
		if res.Sealed.End != end {
			w.chk.fail("W4", "segment %d sealed at %d, its fence answers gave %d", fo.seg.ID, res.Sealed.End, end)
		}
	}
	n.releaseHold(fo.seg.Range)
	w.broadcastSeal(*res.Sealed)
}
