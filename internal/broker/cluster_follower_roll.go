package broker

import (
	"errors"
	"slices"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/replication"
)

// Rolling an active segment off a lost follower. A segment is sealed by
// size, by age, or on failure. The sweep in cluster_replica_sweep.go
// covers a lost primary; this covers a lost follower. Without it a
// segment of two replicas whose follower died could commit nothing
// (two of two) until its uncommitted appends filled it and its size
// roll failed over, and a segment of three kept taking new records one
// copy short until it rolled, since active segments are not healed.
//
// So when membership declares a member dead or gone (the signal the
// primary sweep uses, not --dead-after: for a factor of two the range is
// unwritable meanwhile), the PRIMARY of each active replicated segment
// whose replica set holds that member rolls it, and opens the successor
// on live nodes (placement leaves out the dead):
//
//   - when the live replicas still make a quorum, through the ordinary
//     roll (rollLocked): fence, drain, seal at exactly the fence's end;
//   - when they do not (a factor of two), through the failover
//     (failoverLocked): the copies that answer are fenced and the seal
//     is the end agreed from their answers, which covers every
//     acknowledged record (W6). Appends that no quorum fsynced were
//     answered retry or are dropped with retry; they may be kept in the
//     sealed segment, once, or cut, never written again.
//
// A live quorum with no live node outside the replica set (three
// replicas on three nodes, one dead) is left alone: its successor would
// be placed on the same survivors, one copy short too, and the old
// segment gets its follower back if the node returns. A node that only
// restarts, but is declared dead first, still costs a roll of every
// range it followed where a roll helps: one more segment each.
//
// It runs on the cluster loop's membership events and its periodic tick
// (which catches an event missed or a roll that failed), shares the
// failover runs' bound and per-range exclusion (maxSweepFailovers, a
// range is never rolled, readied and failed over at once here) and runs
// on the broker's life, never a client's.

// deadFollower is an active replicated segment led here whose replica
// set holds a lost member.
type deadFollower struct {
	topicID, rangeID, segment, lost uint64
}

// sweepDeadFollowers starts the rolls this node owes, each on its own
// goroutine, at most maxSweepFailovers at once with the failovers.
func (b *Broker) sweepDeadFollowers() {
	if b.replicas() == nil || b.data == nil {
		return
	}
	for _, d := range b.deadFollowers() {
		b.startSweepRun(d.rangeID, func() { b.rollOffLost(d) })
	}
}

// deadFollowers lists, at most maxSweepFailovers, the active replicated
// segments this node leads that a lost follower makes due for a roll
// (rollPays). Ranges never tried come first, as in deadPrimaries; a
// range rolling, failing over or waiting after a failed failover is not
// listed.
func (b *Broker) deadFollowers() []deadFollower {
	lost := b.lostNodes()
	spare := b.spareNodes()
	now := b.cfg.Clock.Now()
	runs := &b.cluster.failovers
	var picks sweepPicks[deadFollower]
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, r := range st.ActiveRanges(t.ID) {
				if picks.full() {
					return
				}
				seg, ok := st.ActiveSegment(r.ID)
				if !ok || !replicated(seg) || !b.writesHere(seg) || runs.running(r.ID) {
					continue
				}
				gone := lostFollower(seg, lost)
				if gone == 0 || !rollPays(seg, lost, spare) {
					continue
				}
				picks.add(runs, r.ID, now, deadFollower{topicID: t.ID, rangeID: r.ID, segment: seg.ID, lost: gone})
			}
		}
	})
	return picks.list()
}

// lostNodes reports the nodes gossip declares dead or left, or the
// registry no longer lists, from one look at each.
func (b *Broker) lostNodes() func(uint64) bool {
	gone := b.departedNodes()
	dead := map[uint64]bool{}
	for _, m := range b.cluster.gossip.Members() {
		if m.ID != b.cluster.cfg.NodeID && !m.State.Live() {
			dead[m.ID] = true
		}
	}
	return func(node uint64) bool { return dead[node] || gone(node) }
}

// spareNodes reports whether a live node whose disk is ok lies outside
// a replica set: one a successor could take in a lost member's place.
// An unreadable registry reports none.
func (b *Broker) spareNodes() func(metadata.Segment) bool {
	live, _, err := b.liveNodes()
	if err != nil {
		return func(metadata.Segment) bool { return false }
	}
	live = b.diskOKNodes(live)
	return func(seg metadata.Segment) bool {
		ids := replicaIDs(seg)
		for _, n := range live {
			if !slices.Contains(ids, n.ID) {
				return true
			}
		}
		return false
	}
}

// lostFollower is the first follower of seg that is lost, 0 for none.
func lostFollower(seg metadata.Segment, lost func(uint64) bool) uint64 {
	for _, id := range replicaIDs(seg)[1:] {
		if lost(id) {
			return id
		}
	}
	return 0
}

// liveReplicas counts seg's replicas that are not lost.
func liveReplicas(seg metadata.Segment, lost func(uint64) bool) int {
	n := 0
	for _, id := range replicaIDs(seg) {
		if !lost(id) {
			n++
		}
	}
	return n
}

// rollPays reports whether rolling seg, which has a lost follower, does
// any good: its live replicas make no quorum (nothing commits until it
// rolls), or a successor could be placed on a live node it lacks.
func rollPays(seg metadata.Segment, lost func(uint64) bool, spare func(metadata.Segment) bool) bool {
	return liveReplicas(seg, lost) < replication.Quorum(len(seg.Replicas)) || spare(seg)
}

// rollOffLost rolls d's segment if it is still the range's active
// segment, led here, with a lost follower, and opens the successor on
// live nodes so the range is writable before the next produce.
func (b *Broker) rollOffLost(d deadFollower) {
	h := b.headFor(d.topicID, d.rangeID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := b.readyLocked(h); err != nil || h.retired || h.segment != d.segment || !h.repl {
		return // a produce, a split or a failover moved the range on; the next sweep looks again
	}
	v := b.viewRange(h.rangeID)
	if v.retired || !v.hasActive || v.active.ID != d.segment {
		return
	}
	lost := b.lostNodes()
	if lostFollower(v.active, lost) == 0 || !rollPays(v.active, lost, b.spareNodes()) {
		return // the follower is back, or the view changed since the sweep
	}
	var err error
	if liveReplicas(v.active, lost) < replication.Quorum(len(v.active.Replicas)) {
		err = b.failoverLocked(h, v.active, false)
	} else {
		err = b.rollLocked(h)
	}
	if err != nil {
		if !errors.Is(err, errRetired) && !errors.Is(err, errFailoverWaits) {
			b.log.Warn("rolling an active segment off a lost follower did not finish; the next sweep tries again",
				"range", d.rangeID, "segment", d.segment, "lost", d.lost, "err", err)
		}
		return
	}
	b.log.Info("rolled an active segment off a lost follower", "range", d.rangeID, "segment", d.segment, "lost", d.lost)
	b.openAfterRollLocked(h)
}

// openAfterRollLocked opens h's successor here, unless another node
// opened it first or the range is held, split or merged meanwhile; a
// produce opens it otherwise.
//
// REQUIRES: h.mu held.
func (b *Broker) openAfterRollLocked(h *head) {
	if err := b.readyLocked(h); err != nil || h.retired || h.segment != 0 {
		return
	}
	if v := b.viewRange(h.rangeID); v.retired || v.hasActive {
		h.ready = false // load what another node opened next time
		return
	}
	if err := b.openSegmentLocked(h); err != nil {
		b.log.Debug("opening a range's successor after a roll off a lost follower did not finish; the next produce opens it",
			"range", h.rangeID, "err", err)
	}
}
