package sim

import (
	"errors"
	"slices"

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
	// waiting: enough answered, the rest are waited for FenceGrace.
	waiting, decided bool
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

// onFenceAnswer counts one answer. Once FailoverEnd decides, the
// failover waits FenceGrace for the replicas that have not answered (as
// replica.Host.FenceCopies does), then narrows the end with quorumEnd;
// the seal is recorded ControlDelay later (the round trip to the
// control plane).
func (n *node) onFenceAnswer(from uint64, a replication.FenceAnswer) {
	w := n.w
	fo := n.failovers[a.Segment]
	if fo == nil || fo.decided {
		return
	}
	fo.answers = append(fo.answers, replication.Answer{Node: from, End: a.End, Role: a.Role, Unknown: a.Unknown})
	f, ok, err := replication.FailoverEnd(fo.ids, replication.Quorum(len(fo.ids)), fo.answers)
	if err != nil {
		w.chk.fail("protocol", "node %d failover of %d: %v", n.id, a.Segment, err)
		return
	}
	switch {
	case !ok:
	case len(f.Unknown) == 0 || w.cfg.SealAtHighestAnswer:
		n.decideFailover(fo)
	case !fo.waiting:
		fo.waiting = true
		inc := n.inc
		w.after(w.cfg.FenceGrace, func() {
			if n.inc == inc && n.failovers[a.Segment] == fo && !fo.decided {
				n.decideFailover(fo)
			}
		})
	}
}

// decideFailover fixes the failover's end from the answers it has and
// records the seal ControlDelay later.
func (n *node) decideFailover(fo *failover) {
	w := n.w
	f, _, _ := replication.FailoverEnd(fo.ids, replication.Quorum(len(fo.ids)), fo.answers)
	fo.decided = true
	end := f.End
	if !w.cfg.SealAtHighestAnswer {
		end = quorumEnd(fo.ids, fo.answers, f)
	}
	if w.cfg.Bug == BugSealAtLowestAnswer {
		end = lowestAnswer(fo.answers)
	}
	id, inc := fo.seg.ID, n.inc
	w.after(w.cfg.ControlDelay, func() {
		if n.inc != inc || n.failovers[id] != fo {
			return
		}
		delete(n.failovers, id)
		n.sealFailover(fo, end)
	})
}

// quorumEnd is the node's rule (replica.quorumEnd): of the answers, the
// k-th highest, k being the quorum less the replicas that did not
// answer. Every acknowledged record is on k answering copies, so the end
// covers it (W6); what lies above is on fewer than a quorum, never
// acknowledged, and sealing it in would leave the sealed segment on
// those few copies alone, the others behind, never served nor healed
// from. With every answer the sealed end is on a quorum of copies. An
// answer flagged Unknown (a copy the fence created) witnesses nothing and
// lowers k as a silent replica does.
func quorumEnd(ids []uint64, answers []replication.Answer, f replication.Failover) uint64 {
	best := map[uint64]uint64{}
	blind := map[uint64]bool{}
	for _, a := range answers {
		switch {
		case a.Role != replication.RoleFollower || !slices.Contains(ids, a.Node):
		case a.Unknown:
			blind[a.Node] = true
		default:
			best[a.Node] = max(best[a.Node], a.End)
		}
	}
	for node := range best {
		delete(blind, node)
	}
	k := replication.Quorum(len(ids)) - len(f.Unknown) - len(blind)
	if k <= 1 || len(best) < k {
		return f.End
	}
	ends := make([]uint64, 0, len(best))
	for _, e := range best {
		ends = append(ends, e)
	}
	slices.Sort(ends)
	return ends[len(ends)-k]
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
