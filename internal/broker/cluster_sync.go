package broker

import (
	"context"
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/membership"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// What other nodes change reaches this broker through the control plane's
// hooks (onApplied, onRestored), which queue it for clusterLoop. The loop
// updates what the broker derived from the metadata:
//
//   - users, ACLs, passwords: the principals snapshot (refreshPrincipals),
//     which revokes identities whose user was deleted or whose password
//     changed, and makes new grants take effect;
//   - a topic deleted elsewhere: its write heads retired, its local segment
//     files deleted, its watch fired and dropped;
//   - a range split or merged elsewhere: its heads retired, the topic's
//     watch fired so long polls and subscriptions rebuild their read plans;
//   - a segment opened or sealed elsewhere: the topic's watch fired, so a
//     reader waiting there looks again (and learns where the data is).
//
// Group positions, topics and ranges are read from the metadata on every
// request, so nothing else is cached. A full queue or a restored snapshot
// triggers a resync: everything above, for every head and watch.

// rejoinEvery is how often a node that sees no other live member tries
// its Join addresses again.
const rejoinEvery = 5 * time.Second

// clusterLoop is the broker's goroutine for cluster events: metadata
// applied here, membership changes, gossiping in again when alone, and
// joining again after a start without a quorum (retryJoin). It
// exits when ctx (the broker's loop context) ends.
func (b *Broker) clusterLoop(ctx context.Context) {
	defer b.done.Done()
	c := b.cluster
	events := c.gossip.Events()
	rejoin := time.NewTicker(rejoinEvery)
	defer rejoin.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-c.applied:
			b.applyRemote(a)
		case <-c.wake:
			if c.takeResync() {
				b.resyncAll()
			}
		case <-c.sweep:
			b.sweepDeadPrimaries()
			b.sweepDeadFollowers()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			b.onMember(ev)
		case <-rejoin.C:
			b.rejoinGossip(ctx)
			b.retryJoin(ctx)
			b.sweepDeadPrimaries()
			b.sweepDeadFollowers()
			b.readyStalled()
		}
	}
}

// onMember keeps the transport's addresses in step with gossip: a node's
// peer address is known from its first alive message, before the
// registry may list it.
func (b *Broker) onMember(ev membership.Event) {
	c := b.cluster
	switch ev.Kind {
	case membership.EventJoin, membership.EventUpdate:
		if ev.Member.ID != c.cfg.NodeID && ev.Member.PeerAddr != "" {
			c.tr.SetAddr(ev.Member.ID, ev.Member.PeerAddr)
		}
	case membership.EventResync:
		for _, m := range c.gossip.Members() {
			if m.ID != c.cfg.NodeID && m.State.Live() && m.PeerAddr != "" {
				c.tr.SetAddr(m.ID, m.PeerAddr)
			}
		}
		b.sweepDeadPrimaries()
		b.sweepDeadFollowers()
	case membership.EventConflict:
		b.log.Error("cluster: another node claims this node's id", "node", ev.Member.ID, "gossip", ev.Member.GossipAddr)
	case membership.EventDead, membership.EventLeave:
		// Ranges whose primary it was fail over now, not at their next
		// produce (cluster_replica_sweep.go); active segments it followed
		// roll onto live nodes (cluster_follower_roll.go).
		b.sweepDeadPrimaries()
		b.sweepDeadFollowers()
	}
}

// rejoinGossip gossips in again when no other member is live: a node
// restarted while the others were down, or cut off long enough to be
// declared dead, would otherwise stay alone in gossip (raft reaches the
// others regardless, through the registry's addresses).
func (b *Broker) rejoinGossip(ctx context.Context) {
	c := b.cluster
	if len(c.cfg.Join) == 0 || len(c.seeds()) > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, _ = c.gossip.Join(ctx, c.cfg.Join)
}

// applyRemote updates what the broker derived from one applied command.
// Commands this node proposed come here too; every step is idempotent.
func (b *Broker) applyRemote(a appliedCmd) {
	if a.res.Err != nil {
		return
	}
	switch a.cmd.Kind {
	case metadata.KindCreateUser, metadata.KindDeleteUser, metadata.KindSetPassword,
		metadata.KindGrantACL, metadata.KindRevokeACL:
		b.refreshPrincipals()
	case metadata.KindDeleteTopic:
		b.dropTopic(a.res.TopicID, a.res.Deleted)
	case metadata.KindSplitRange, metadata.KindMergeRanges:
		b.retireRanges(a.cmd.Range, a.cmd.RangeB)
		b.fireWatch(a.res.TopicID)
	case metadata.KindOpenSegment:
		b.unreadyIdle(a.cmd.Range)
		topic := b.topicOfID(a.cmd.Range)
		if b.data != nil {
			b.data.staleInterest(topic)
		}
		b.fireWatch(topic)
	case metadata.KindSealSegment:
		if a.res.Sealed != nil {
			b.sealCopy(*a.res.Sealed) // a follower's copy takes the seal (W4, W6)
			b.fireWatch(b.topicOfID(a.res.Sealed.Range))
		}
	case metadata.KindDeleteSegment:
		// Every node deletes its copy, listed or not: a copy healed here
		// but not recorded yet must not outlive the segment.
		for _, id := range a.res.Deleted {
			if a.cmd.Reason == metadata.ReasonLost && b.keepLostCopy(id) {
				b.fireWatch(a.res.TopicID)
				continue // a copy of a segment recorded lost is set aside, never deleted
			}
			b.dropSegment(a.res.TopicID, id) // and wake the topic's readers below the hole
		}
	}
}

// dropTopic forgets a topic deleted through any node: its heads are
// retired (fencing what this node was writing), the files of its
// segments this node holds are deleted, and its readers are woken.
func (b *Broker) dropTopic(topicID uint64, deleted []uint64) {
	b.mu.Lock()
	var heads []*head
	for _, h := range b.mu.heads {
		if h.topicID == topicID {
			heads = append(heads, h)
		}
	}
	b.mu.Unlock()
	for _, h := range heads {
		h.mu.Lock()
		if h.segment != 0 && !h.retired {
			if _, err := b.store.Seal(b.life, storage.SegmentID(h.segment)); err != nil {
				b.log.Warn("fence of a deleted topic's segment failed", "segment", h.segment, "err", err)
			}
		}
		b.retireLocked(h)
		h.mu.Unlock()
	}
	for _, id := range deleted {
		if h := b.replicas(); h != nil {
			h.Drop(id)
		}
		if err := b.store.Delete(storage.SegmentID(id)); err != nil && !errors.Is(err, storage.ErrNotFound) {
			b.log.Warn("deleting a deleted topic's segment failed", "segment", id, "err", err)
		}
	}
	b.mu.Lock()
	if w, ok := b.mu.watches[topicID]; ok {
		w.fire()
		delete(b.mu.watches, topicID)
	}
	b.mu.Unlock()
}

// retireRanges retires the heads of ranges that were split or merged.
func (b *Broker) retireRanges(ids ...uint64) {
	for _, id := range ids {
		if id == 0 {
			continue
		}
		b.mu.Lock()
		h := b.mu.heads[id]
		b.mu.Unlock()
		if h != nil {
			h.mu.Lock()
			b.retireLocked(h)
			h.mu.Unlock()
		}
	}
}

// fireWatch wakes the readers waiting on a topic, if any.
func (b *Broker) fireWatch(topicID uint64) {
	if topicID == 0 {
		return
	}
	b.mu.Lock()
	w := b.mu.watches[topicID]
	b.mu.Unlock()
	if w != nil {
		w.fire()
	}
}

// unreadyIdle makes a range's head read the metadata again at its next
// use when it has no active segment here: another node may have opened
// one. A head writing its own active segment is left alone: no other
// node can change that segment's range (a split needs the segment
// sealed, and a delete goes through dropTopic).
func (b *Broker) unreadyIdle(rangeID uint64) {
	b.mu.Lock()
	h := b.mu.heads[rangeID]
	b.mu.Unlock()
	if h != nil {
		unreadyIdleHead(h)
	}
}

func unreadyIdleHead(h *head) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.retired && h.segment == 0 {
		h.ready = false
	}
}

// topicOfID is the topic of a range id, 0 when unknown.
func (b *Broker) topicOfID(rangeID uint64) uint64 {
	var topic uint64
	_ = b.plane.ViewID(rangeID, func(st *metadata.State) {
		if r, ok := st.Range(rangeID); ok {
			topic = r.Topic
		}
	})
	return topic
}

// resyncAll re-reads everything derived from the metadata: the
// principals, and every idle head (reconciled again at its next use,
// which retires it if its range is gone); every reader is woken to
// re-read its plan.
func (b *Broker) resyncAll() {
	b.refreshPrincipals()
	b.mu.Lock()
	heads := make([]*head, 0, len(b.mu.heads))
	for _, h := range b.mu.heads {
		heads = append(heads, h)
	}
	watches := make([]*watch, 0, len(b.mu.watches))
	for _, w := range b.mu.watches {
		watches = append(watches, w)
	}
	b.mu.Unlock()
	for _, h := range heads {
		unreadyIdleHead(h)
	}
	b.dropDeleted(heads)
	b.settleCopies()
	for _, w := range watches {
		w.fire()
	}
}

// dropDeleted does what dropTopic would have done for deletes this node
// missed (a resync): heads still writing a segment of a range the
// metadata no longer has are fenced and retired, and the local files of
// segments the metadata deleted are deleted. Only what the metadata says
// is gone is deleted (S4): a segment id the local view does not know yet
// is left alone (SegmentDeleted).
func (b *Broker) dropDeleted(heads []*head) {
	for _, h := range heads {
		h.mu.Lock()
		if h.segment != 0 && !h.retired && b.rangeGone(h.rangeID) {
			if _, err := b.store.Seal(b.life, storage.SegmentID(h.segment)); err != nil {
				b.log.Warn("fence of a deleted range's segment failed", "segment", h.segment, "err", err)
			}
			b.retireLocked(h)
		}
		h.mu.Unlock()
	}
	for _, info := range b.store.List() {
		id := uint64(info.ID)
		gone := false
		if err := b.plane.ViewID(id, func(st *metadata.State) { gone = st.SegmentDeleted(id) }); err != nil || !gone {
			continue
		}
		if err := b.store.Delete(info.ID); err != nil && !errors.Is(err, storage.ErrNotFound) {
			b.log.Warn("deleting a deleted segment's file failed", "segment", id, "err", err)
		}
	}
}

// settleCopies does what applyRemote would have done for seals and
// deletes this node missed (a resync) to the segments its replica host
// runs: a sealed one's copy takes the seal, a deleted one is dropped.
func (b *Broker) settleCopies() {
	h := b.replicas()
	if h == nil {
		return
	}
	for _, id := range h.Segments() {
		seg, ok := b.segmentByID(id)
		gone := false
		_ = b.plane.ViewID(id, func(st *metadata.State) { gone = st.SegmentDeleted(id) })
		switch {
		case gone:
			h.Drop(id)
		case ok && !seg.Active:
			b.sealCopy(seg)
		}
	}
}

// rangeGone reports whether the metadata no longer has range id at all
// (its topic was deleted), as opposed to having sealed it.
func (b *Broker) rangeGone(id uint64) bool {
	gone := false
	if err := b.plane.ViewID(id, func(st *metadata.State) { _, ok := st.Range(id); gone = !ok }); err != nil {
		return false
	}
	return gone
}
