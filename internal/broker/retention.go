package broker

import (
	"context"
	"errors"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage"
)

// maxRetentionDeletes bounds the segments one sweep deletes, so a node
// that was off for a long time catches up over several sweeps instead of
// holding the maintenance loop for one long pass.
const maxRetentionDeletes = 1024

// retentionTarget is one range the sweep looks at: the vnode group that
// holds it (0 on a single node), its topic and its segments.
type retentionTarget struct {
	group  uint64
	topic  uint64
	rng    uint64
	policy string
	segs   []metadata.Segment
}

// sweepRetention deletes the expired sealed segments of the topics this
// node is responsible for: every topic on a single node, the topics of
// the vnodes it leads in a cluster. Each range's expired prefix is
// proposed one segment at a time, oldest first, and the range is left at
// the first refusal (the next sweep looks again). It returns how many
// segments it deleted. ctx is the broker's own, never a client's.
func (b *Broker) sweepRetention(ctx context.Context) int {
	if b.cluster != nil {
		// Policies live in the root group: decide with a confirmed view
		// of them, never a lagging replica's (a policy just turned off
		// must not go on deleting here).
		bctx, cancel := context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
		err := b.cluster.ctl.Barrier(bctx, control.RootGroup)
		cancel()
		if err != nil {
			b.log.Warn("retention: the policies could not be confirmed; the sweep waits for the next interval", "err", err)
			return 0
		}
	}
	now := b.nowMs()
	deleted := 0
	policies := map[string]retention.Effective{}
	for _, t := range b.retentionTargets() {
		eff, ok := policies[t.policy]
		if !ok {
			eff = b.resolvePolicy(t.policy)
			policies[t.policy] = eff
		}
		for _, e := range retention.Expired(eff, now, t.segs) {
			if deleted >= maxRetentionDeletes || ctx.Err() != nil {
				return deleted
			}
			if !b.leadsGroup(t.group) {
				break // leadership moved: the new leader sweeps it
			}
			if err := b.expireSegment(ctx, t.topic, e); err != nil {
				b.log.Warn("retention: a segment was not deleted; the next sweep looks again",
					"segment", e.Segment, "range", t.rng, "why", e.Why, "err", err)
				break
			}
			deleted++
		}
	}
	return deleted
}

// retentionTargets lists every range with at least one sealed segment,
// of the groups this node leads.
func (b *Broker) retentionTargets() []retentionTarget {
	// Leadership is read outside the views, which must not call back.
	var groups []uint64
	_ = b.plane.ViewEach(func(g uint64, _ *metadata.State) { groups = append(groups, g) })
	led := map[uint64]bool{}
	for _, g := range groups {
		led[g] = b.leadsGroup(b.groupOf(g))
	}
	var out []retentionTarget
	_ = b.plane.ViewEach(func(g uint64, st *metadata.State) {
		if !led[g] {
			return
		}
		g = b.groupOf(g)
		for _, t := range st.Topics() {
			for _, r := range st.TopicRanges(t.ID) {
				segs := st.RangeSegments(r.ID)
				if len(segs) == 0 || segs[0].Active {
					continue
				}
				out = append(out, retentionTarget{group: g, topic: t.ID, rng: r.ID, policy: t.Policy, segs: segs})
			}
		}
	})
	return out
}

// groupOf is the group a view named: 0 on a single node, whose one
// state answers every view.
func (b *Broker) groupOf(g uint64) uint64 {
	if b.cluster == nil {
		return 0
	}
	return g
}

// leadsGroup reports whether this node leads vnode group g (always true
// on a single node): only the leader sweeps, so two nodes never propose
// the same deletes.
func (b *Broker) leadsGroup(g uint64) bool {
	if b.cluster == nil {
		return true
	}
	leader, _, err := b.cluster.ctl.LeaderOf(g)
	return err == nil && leader == b.cluster.cfg.NodeID
}

// expireSegment proposes the deletion of one expired segment and, once
// the control plane answered that it is gone, deletes the local file.
// The other replicas delete theirs when they apply the command
// (applyRemote).
func (b *Broker) expireSegment(ctx context.Context, topic uint64, e retention.Expiry) error {
	_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindDeleteSegment, Segment: e.Segment, Reason: e.Reason})
	if err != nil {
		return err
	}
	b.dropSegment(topic, e.Segment)
	b.stats.segmentsExpired.Add(1)
	b.log.Info("retention: deleted an expired segment", "segment", e.Segment, "why", e.Why)
	return nil
}

// dropSegment deletes this node's copy of a segment the metadata
// deleted, whatever its replica list said (a copy being healed here is
// not on it yet), and wakes the topic's readers so they plan again.
func (b *Broker) dropSegment(topic, id uint64) {
	if h := b.replicas(); h != nil {
		h.Drop(id)
	}
	var err error
	if b.cluster != nil {
		err = b.deleteCopy(id)
	} else {
		err = b.store.Delete(storage.SegmentID(id))
	}
	if err != nil && !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, storage.ErrClosed) {
		b.log.Warn("deleting a deleted segment's file failed", "segment", id, "err", err)
	}
	b.fireWatch(topic)
}

// wasDeleted reports whether the metadata says segment id was deleted:
// it is in the shard's record of deletions, or below the shard's counter
// and no longer held. A stale view only answers false, never a wrong
// true: ids are never reused.
func (b *Broker) wasDeleted(id uint64) bool {
	gone := false
	_ = b.plane.ViewID(id, func(st *metadata.State) { gone = st.WasDeleted(id) || st.SegmentDeleted(id) })
	return gone
}

// confirmDeleted is wasDeleted after a barrier on the segment's group, so
// a node that was behind sees the deletes committed before it asked.
func (b *Broker) confirmDeleted(ctx context.Context, id uint64) bool {
	if b.cluster != nil {
		bctx, cancel := context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
		err := b.cluster.ctl.Barrier(bctx, control.GroupOfID(id))
		cancel()
		if err != nil {
			return false
		}
	}
	return b.wasDeleted(id)
}
