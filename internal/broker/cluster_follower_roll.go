package broker

import (
	"errors"
	"slices"
	"sync"
	"time"

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
//     (failoverLocked): the copies that answer are fenced, and since the
//     primary running it is the only node that acknowledged anything,
//     the seal is its commit watermark, taken as it stops (at most the
//     end agreed from the answers, which covers every acknowledged
//     record, W6). The appends above it, which no quorum fsynced, were
//     answered retry and are cut: a client that retries writes them
//     once, in its order.
//
// A live quorum with no live node outside the replica set (three
// replicas on three nodes, one dead) is left alone: its successor would
// be placed on the same survivors, one copy short too, and the old
// segment gets its follower back if the node returns. So is one whose
// successor placement refuses (a hard spread over failure domains the
// live nodes cannot cover): rolling it would leave a range that commits
// on a quorum with no active segment; it is looked at again after
// rollDeferFor. A segment with fewer live copies than a failover needs
// answers (three replicas, two lost) is left alone too: the failover
// could only fail. A node that only restarts, but is declared dead or
// leaves gossip first (every graceful stop leaves), still costs a roll of
// every range it followed where a roll helps: one more segment each.
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

// rollDeferFor is how long a range whose successor could not be placed
// waits before a sweep looks at it again.
const rollDeferFor = 30 * time.Second

// rollDeferrals are the ranges whose roll found no placement for a
// successor, with the time before which no sweep picks them again, so
// they do not take the runs' places from ranges that can roll. At most
// maxFailoverGates; past that a range is simply looked at again.
type rollDeferrals struct {
	mu    sync.Mutex
	until map[uint64]time.Time
}

func (d *rollDeferrals) postpone(rangeID uint64, until time.Time, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.until == nil {
		d.until = map[uint64]time.Time{}
	}
	if len(d.until) >= maxFailoverGates {
		for id, t := range d.until {
			if !now.Before(t) {
				delete(d.until, id)
			}
		}
	}
	if len(d.until) < maxFailoverGates {
		d.until[rangeID] = until
	}
}

func (d *rollDeferrals) waits(rangeID uint64, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.until[rangeID]
	if ok && !now.Before(t) {
		delete(d.until, rangeID)
		return false
	}
	return ok
}

// sweepDeadFollowers starts the rolls this node owes, each on its own
// goroutine, at most maxSweepFailovers at once with the failovers.
func (b *Broker) sweepDeadFollowers() {
	if b.replicas() == nil || b.data == nil {
		return
	}
	for _, d := range b.deadFollowers() {
		b.startSweepRun(d.rangeID, func() bool { return b.rollOffLost(d) })
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
	eachActiveReplicated(b, &picks, func(topicID, rangeID uint64, seg metadata.Segment) {
		if !b.writesHere(seg) || b.cluster.rollDefer.waits(rangeID, now) {
			return
		}
		gone := lostFollower(seg, lost)
		if gone == 0 || !rollPays(seg, lost, spare) {
			return
		}
		picks.add(runs, rangeID, now, deadFollower{topicID: topicID, rangeID: rangeID, segment: seg.ID, lost: gone})
	})
	return picks.list()
}

// lostNodes reports the nodes gossip declares dead or left, or the
// registry no longer lists, from one look at each.
func (b *Broker) lostNodes() func(uint64) bool {
	gone := b.departedNodes()
	dead := map[uint64]bool{}
	for _, m := range b.cluster.gossip.Members() {
		if m.ID != b.cluster.cfg.NodeID && !m.State.Live() && !m.Reported {
			dead[m.ID] = true // a departure only a peer reported rolls nothing (nodeDead)
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
// rolls) but enough of them live for a failover to gather its answers,
// or they make one and a successor could be placed on a live node it
// lacks.
func rollPays(seg metadata.Segment, lost func(uint64) bool, spare func(metadata.Segment) bool) bool {
	rf, live := len(seg.Replicas), liveReplicas(seg, lost)
	if q := replication.Quorum(rf); live < q {
		return live >= replication.AnswersNeeded(rf, q)
	}
	return spare(seg)
}

// rollOffLost rolls d's segment if it is still the range's active
// segment, led here, with a lost follower, and opens the successor on
// live nodes so the range is writable before the next produce. It
// reports whether it sealed the segment.
func (b *Broker) rollOffLost(d deadFollower) bool {
	h := b.headFor(d.topicID, d.rangeID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := b.readyLocked(h); err != nil || h.retired || h.segment != d.segment || !h.repl {
		return false // a produce, a split or a failover moved the range on; the next sweep looks again
	}
	v := b.viewRange(h.rangeID)
	if v.retired || !v.hasActive || v.active.ID != d.segment {
		return false
	}
	lost := b.lostNodes()
	if lostFollower(v.active, lost) == 0 || !rollPays(v.active, lost, b.spareNodes()) {
		return false // the follower is back, or the view changed since the sweep
	}
	var err error
	if liveReplicas(v.active, lost) < replication.Quorum(len(v.active.Replicas)) {
		err = b.failoverLocked(h, v.active, false)
	} else {
		if _, perr := b.placeReplicas(h, b.topicFactor(h.topicID)); perr != nil {
			now := b.cfg.Clock.Now()
			b.cluster.rollDefer.postpone(h.rangeID, now.Add(rollDeferFor), now)
			b.log.Debug("an active segment with a lost follower keeps its replicas: no successor can be placed",
				"range", d.rangeID, "segment", d.segment, "lost", d.lost, "err", perr)
			return false
		}
		err = b.rollLocked(h)
	}
	if err != nil {
		if !errors.Is(err, errRetired) && !errors.Is(err, errFailoverWaits) {
			b.log.Warn("rolling an active segment off a lost follower did not finish; the next sweep tries again",
				"range", d.rangeID, "segment", d.segment, "lost", d.lost, "err", err)
		}
		return false
	}
	b.log.Info("rolled an active segment off a lost follower", "range", d.rangeID, "segment", d.segment, "lost", d.lost)
	b.openAfterRollLocked(h)
	return true
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
		b.log.Warn("opening a range's successor after a roll off a lost follower did not finish; the next produce opens it",
			"range", h.rangeID, "err", err)
	}
}
