package broker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/storage"
)

// Lost segments (docs/operations.md, "Lost segments"). A sealed segment
// whose every copy is gone for good would otherwise stay listed forever,
// and a read of it answers metadata_unavailable forever: a reader at it
// is wedged. Once loss is certain, the planning node records it with
// delete_segment, reason "lost": the segment's offsets become a deleted
// span, skipped and counted exactly as retention's are (skips.go), so a
// reader and a group's commits move past the hole and are told how many
// records they missed.
//
// When loss is certain. Never from timing: a holder down past
// --dead-after, silent or slow to answer, may be rebooting, cut off or
// overloaded, and comes back with its copy. The heal planner heals
// around it when a healthy copy exists; otherwise reads of the segment
// wait (metadata_unavailable). A segment is recorded lost only when
//
//   - every holder was removed from the cluster by an operator (the
//     registry no longer lists it: `cluster remove` states that its data
//     is gone), and
//   - no node holds a copy: not this one, and every other live node,
//     asked for the copy, answers that it has none (a copy healed there
//     but not recorded yet answers otherwise). Any other answer, or
//     none, leaves the segment for a later pass.
//
// The delete names the replica list it was decided on (Expect): a copy a
// heal recorded meanwhile refuses it.
//
// A copy that turns up after all (a removed node started again on its
// old data directory, or a node that was down during the probes) is not
// deleted like a copy of a segment retention deleted: its files are moved
// into the store's quarantine (keepLostCopy), logged, and left for an
// operator to recover.

const (
	// maxLostPerPass bounds the lost segments one heal pass confirms,
	// each after a probe of every live node.
	maxLostPerPass = 4
	// lostProbeTimeout bounds one probe of a node's copy.
	lostProbeTimeout = 2 * time.Second
	// maxKeptLost bounds the ids of quarantined lost copies a node lists
	// in its status; the log names them all.
	maxKeptLost = 32
)

// recordLost confirms and records, on the planning node, the segments the
// plan reports lost.
func (b *Broker) recordLost(ctx context.Context, reports []heal.Report) {
	n := 0
	for _, r := range reports {
		if r.Problem != heal.Lost {
			continue
		}
		if n == maxLostPerPass {
			return // the next pass takes the others
		}
		n++
		b.confirmLost(ctx, r.Segment)
	}
}

// confirmLost records segment id lost when every holder was removed and
// no live node holds a copy (see above); otherwise it leaves it.
func (b *Broker) confirmLost(ctx context.Context, id uint64) {
	seg, ok := b.segmentByID(id)
	if !ok || seg.Active || len(seg.Replicas) == 0 || b.hasFile(id) {
		return
	}
	reg, err := b.cluster.ctl.Registry()
	if err != nil {
		return
	}
	registered := reg.NodeIDs()
	for _, node := range replicaIDs(seg) {
		if slices.Contains(registered, node) {
			h := &b.cluster.heal
			h.mu.Lock()
			h.lostDeclined++
			h.mu.Unlock()
			return // down, perhaps for long, but not removed: it may come back with its copy
		}
	}
	live, _, err := b.liveNodes()
	if err != nil {
		return
	}
	for _, n := range live {
		if n.ID != b.cluster.cfg.NodeID && !b.holdsNoCopy(ctx, n.ID, seg) {
			return
		}
	}
	_, err = b.apply(ctx, metadata.Command{Kind: metadata.KindDeleteSegment, Segment: seg.ID,
		Reason: metadata.ReasonLost, Expect: seg.Replicas})
	if err != nil {
		b.log.Warn("heal: recording a lost segment failed; the next pass retries", "segment", seg.ID, "err", err)
		return
	}
	b.log.Error("heal: every holder of a sealed segment was removed and no node holds a copy; readers skip its records",
		"segment", seg.ID, "range", seg.Range, "base", seg.Base, "end", seg.End, "records", seg.Records, "replicas", seg.Replicas)
}

// holdsNoCopy asks node for the start of its copy of seg and reports
// whether it answered that its store has none. Silence, a refusal for
// another reason, or data all count as "it may hold one".
func (b *Broker) holdsNoCopy(ctx context.Context, node uint64, seg metadata.Segment) bool {
	pctx, cancel := context.WithTimeout(ctx, lostProbeTimeout)
	defer cancel()
	req := (&dataplane.Copy{Segment: seg.ID, From: seg.Base, MaxBytes: 1}).Encode()
	_, err := b.cluster.tr.Call(pctx, node, channelHeal, req)
	var re *peer.RemoteError
	// serveCopy wraps the store's ErrNotFound; the transport carries only
	// its text.
	return errors.As(err, &re) && re.Code == peer.CodeHandler && strings.Contains(re.Message, storage.ErrNotFound.Error())
}

// wasLost reports whether the metadata here says segment id was deleted
// as lost (a stale view answers false).
func (b *Broker) wasLost(id uint64) bool {
	lost := false
	_ = b.plane.ViewID(id, func(st *metadata.State) { lost = st.WasLost(id) })
	return lost
}

// keepLostCopy sets aside this node's files of segment id when the
// metadata recorded it lost, instead of deleting them: they may be the
// only records of it left. It reports whether id was lost (and so must
// not be deleted), whether or not the move succeeded.
func (b *Broker) keepLostCopy(id uint64) bool {
	if !b.wasLost(id) {
		return false
	}
	if h := b.replicas(); h != nil {
		h.Drop(id) // deleted: nothing may serve or replicate it
	}
	path, err := b.store.Quarantine(storage.SegmentID(id))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return true
	case err != nil:
		b.log.Warn("heal: could not set aside a copy of a segment recorded lost; the file is kept in place", "segment", id, "err", err)
		return true
	}
	if b.cluster != nil {
		h := &b.cluster.heal
		h.mu.Lock()
		if !slices.Contains(h.keptLost, id) {
			h.keptLost = append(h.keptLost, id)
			if over := len(h.keptLost) - maxKeptLost; over > 0 {
				h.keptLost = slices.Delete(h.keptLost, 0, over)
			}
		}
		h.mu.Unlock()
	}
	b.log.Error("heal: a segment recorded lost has a copy here; it was moved into the quarantine, not deleted",
		"segment", id, "path", path)
	return true
}

// KeptLostCopies lists the ids of segments recorded lost whose copies
// this node found and set aside in its store's quarantine (the latest
// maxKeptLost of them).
func (b *Broker) KeptLostCopies() []uint64 {
	if b.cluster == nil {
		return nil
	}
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.keptLost)
}
