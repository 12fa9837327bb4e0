package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// Self-healing (docs/operations.md, "Repair"). internal/heal decides; this
// file runs its decisions. Every node runs one heal loop, owned by the
// broker and ended with its life. Each pass it:
//
//   - notes when each registered node went down (gossip: dead or left),
//     since membership reports only the state, and counts the dead-after
//     grace from this node's first sight of it;
//   - records in the metadata the copies it found damaged or missing
//     (cluster_scrub.go), so that every planner counts them out;
//   - plans with heal.PlanHeals over every sealed segment of a topic with
//     a factor above one, from the metadata (its damaged copies
//     included) and its membership view;
//   - fills the copies the plan asks of it as a target: it pulls the
//     sealed copy from the planned source with the copy call (served
//     paced by the source's heal bucket, cluster_heal_copy.go), appends
//     it at exactly its offsets (AppendAt) into a new copy, seals it at
//     exactly the seal's end, verifies it whole against the seal, and
//     only then records itself in the replica list with the conditional
//     set_segment_replicas (S3: add before remove); a damaged holder the
//     plan asks to rebuild its own copy (no other node can take one) first
//     sets the damaged file aside in the store's quarantine, and records
//     itself out of the list and back in, which clears its damage mark;
//   - on the planning node (the lowest-numbered live node, the same for
//     every node that sees the same membership), records the drops the
//     plan asks once the healthy copies reach the factor: dead and
//     damaged holders leave the list;
//   - deletes its own copies the metadata no longer lists, only after a
//     barrier on the segment's group shows that is still so (S4): a
//     node back from the dead, a damaged copy replaced, a partial copy
//     whose record was refused.
//
// Every target decides for itself from the same inputs, so two nodes
// with different views may both fill a copy; the conditional record lets
// one win, and the other finds itself no longer needed and deletes its
// copy, which no command named.

// healChunk is the bytes a copy call asks for; healCallTimeout bounds
// one call, pacing at the source included.
const (
	healChunk       = 1 << 20
	healCallTimeout = 30 * time.Second
	// maxCollectPerPass bounds the unlisted copies one pass deletes, each
	// after a barrier.
	maxCollectPerPass = 16
	// maxRecordAttempts bounds the records a filled copy tries when the
	// list changed under it.
	maxRecordAttempts = 3
)

// Defaults of HealConfig.
const (
	DefaultDeadAfter     = 2 * time.Minute
	DefaultHealInterval  = 10 * time.Second
	DefaultHealRate      = 32 << 20
	DefaultScrubInterval = 24 * time.Hour
	DefaultScrubRate     = 8 << 20
)

func (h HealConfig) withDefaults() HealConfig {
	h.DeadAfter = cmp.Or(h.DeadAfter, DefaultDeadAfter)
	h.Interval = cmp.Or(h.Interval, DefaultHealInterval)
	h.Rate = cmp.Or(h.Rate, DefaultHealRate)
	h.ScrubInterval = cmp.Or(h.ScrubInterval, DefaultScrubInterval)
	h.ScrubRate = cmp.Or(h.ScrubRate, DefaultScrubRate)
	h.MaxTasksPerNode = cmp.Or(h.MaxTasksPerNode, heal.DefaultMaxTasksPerNode)
	return h
}

func (h HealConfig) validate() error {
	if h.DeadAfter < 0 || h.Interval < 0 || h.Rate < 0 || h.ScrubInterval < 0 || h.ScrubRate < 0 || h.MaxTasksPerNode < 0 {
		return errors.New("broker: Cluster.Heal durations, rates and bounds cannot be negative")
	}
	if h.Rate > heal.MaxTakeBytes || h.ScrubRate > heal.MaxTakeBytes {
		return fmt.Errorf("broker: Cluster.Heal rates are at most %d bytes/s", heal.MaxTakeBytes)
	}
	return nil
}

// healState is a node's side of healing and scrubbing. mu guards the
// maps; the buckets have their own locks.
type healState struct {
	mu sync.Mutex
	// downSince: registered nodes gossip reports down, since when (unix
	// ms, this node's first sight).
	downSince map[uint64]int64
	// filling: the copies this node is making as a heal target.
	filling map[uint64]heal.Assignment
	// unknown: copies whose record got no answer, kept until the given
	// unix ms: the control plane may still apply it.
	unknown map[uint64]int64
	// damaged: this node's copies its scrubber, a read or a missing
	// file showed damaged; never served, recorded in the metadata by the
	// heal pass. Bounded by the copies the metadata lists this node for.
	damaged map[uint64]heal.Verdict
	// behind: listed copies of sealed segments found unsealed below the
	// seal, since when (unix ms); past a grace they count as damaged.
	behind map[uint64]int64
	// unsealed: listed copies of sealed segments that hold the whole
	// segment but are not sealed, and whose seal timed out or found the
	// disk full (resealable), since when (unix ms), or since the last
	// try; past a grace their seal is tried again. A seal refused for
	// safety (below the watermark, behind) is never in resealable: the
	// host has dropped the state that refused it.
	unsealed   map[uint64]int64
	resealable map[uint64]struct{}
	// missing: sealed copies the metadata lists this node for and its
	// store lacks, since when (unix ms); past a grace they count as
	// damaged.
	missing map[uint64]int64
	// scrubbing is the copy the scrubber is reading; scrubVoid is set
	// when the heal deletes it meanwhile, so the verdict is dropped.
	scrubbing uint64
	scrubVoid bool
	// reports: the last plan's segments it could not heal.
	reports []heal.Report
	// reportsTotal is how many reports the last plan had before reports
	// was cut to maxHealListed.
	reportsTotal int
	// keptLost: ids of segments recorded lost whose copies this node set
	// aside in its quarantine (cluster_lost.go), the latest maxKeptLost.
	keptLost []uint64
	// lostDeclined counts the segments the planner reported lost that
	// were not recorded so, a holder being still registered.
	lostDeclined uint64
	// scrub: the scrubber's last summary.
	scrub heal.ScrubStatus
	// verified: this node's sealed copies whose last scrub found them
	// whole against their seal, with when (unix ms). Bounded by the
	// copies it scrubs: an id leaves when its copy is no longer scrubbed.
	verified map[uint64]int64

	serve, scrubRead *pacer
	// wg counts the heal and scrub loops and the fills they start.
	wg sync.WaitGroup
}

// init makes the maps and the buckets; openCluster calls it before the
// copy call's handler can run.
func (h *healState) init(cfg HealConfig, now int64) error {
	serve, err := newPacer(cfg.Rate, now)
	if err != nil {
		return err
	}
	scrub, err := newPacer(cfg.ScrubRate, now)
	if err != nil {
		return err
	}
	h.downSince = map[uint64]int64{}
	h.filling = map[uint64]heal.Assignment{}
	h.unknown = map[uint64]int64{}
	h.damaged = map[uint64]heal.Verdict{}
	h.behind = map[uint64]int64{}
	h.unsealed = map[uint64]int64{}
	h.resealable = map[uint64]struct{}{}
	h.missing = map[uint64]int64{}
	h.serve, h.scrubRead = serve, scrub
	return nil
}

// startHeal starts the heal and scrub loops on the broker's life, once
// the replica host (and so the segment store) exists.
func (b *Broker) startHeal() {
	h := &b.cluster.heal
	h.wg.Add(2)
	go b.healLoop(b.life)
	go b.scrubLoop(b.life)
}

// waitHeal waits for the heal and scrub loops and their fills, which end
// with the broker's life, before Close closes the stores they use.
func (b *Broker) waitHeal() {
	if b.cluster != nil {
		b.cluster.heal.wg.Wait()
	}
}

func (b *Broker) healLoop(ctx context.Context) {
	defer b.cluster.heal.wg.Done()
	t := time.NewTicker(b.cluster.cfg.Heal.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.healPass(ctx)
	}
}

// healPass is one round of planning, filling, dropping and collecting.
func (b *Broker) healPass(ctx context.Context) {
	if b.removedHere() {
		return // see errRemovedSelf
	}
	now := b.nowMs()
	b.trackDown(now)
	b.noteMissing(now)
	b.recordDamaged(ctx)
	in, err := b.healInput(now)
	if err != nil {
		return // not joined yet, or removed since: nothing is known
	}
	plan, err := heal.PlanHeals(b.healPlanConfig(), in)
	if err != nil {
		b.log.Error("heal: planning failed", "err", err)
		return
	}
	h := &b.cluster.heal
	h.mu.Lock()
	h.reports = slices.Clone(plan.Reports[:min(len(plan.Reports), maxHealListed)]) // status lists no more (B1)
	h.reportsTotal = len(plan.Reports)
	h.mu.Unlock()
	self := b.cluster.cfg.NodeID
	planner := plannerOf(in.Live)
	for _, a := range plan.Tasks {
		switch {
		case len(a.Targets) == 0 && planner == self:
			b.dropCopies(ctx, a)
		case slices.Contains(a.Targets, self):
			b.startFill(ctx, a)
		}
	}
	if planner == self {
		b.recordLost(ctx, plan.Reports)
	}
	b.collectUnlisted(ctx, now)
}

func (b *Broker) healPlanConfig() heal.Config {
	hc := b.cluster.cfg.Heal
	return heal.Config{DeadAfterMs: hc.DeadAfter.Milliseconds(), MaxTasksPerNode: hc.MaxTasksPerNode}
}

// plannerOf is the node that records drops: the lowest live id.
func plannerOf(live []heal.Node) uint64 {
	var lowest uint64
	for _, n := range live {
		if lowest == 0 || n.ID < lowest {
			lowest = n.ID
		}
	}
	return lowest
}

// trackDown notes when registered nodes went down in gossip's view and
// forgets those that are back.
func (b *Broker) trackDown(now int64) {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[uint64]bool{}
	for _, m := range b.cluster.gossip.Members() {
		seen[m.ID] = true
		if m.State.Live() || m.ID == b.cluster.cfg.NodeID {
			delete(h.downSince, m.ID)
		} else if _, ok := h.downSince[m.ID]; !ok {
			h.downSince[m.ID] = now
		}
	}
	for id := range h.downSince {
		if !seen[id] {
			delete(h.downSince, id) // gossip forgot it: unknown, not dead
		}
	}
}

// errRemovedSelf: the registry records this node removed from the
// cluster. It takes no part in healing: it plans nothing, fills nothing,
// records nothing and collects nothing, since its views are those of a
// node the cluster forgot.
var errRemovedSelf = errors.New("broker: this node was removed from the cluster")

// removedHere reports whether this node's registry records it removed,
// or the cluster refused its retried join (its registry may never learn
// of the removal, made while it was away).
func (b *Broker) removedHere() bool {
	c := b.cluster
	c.mu.Lock()
	refused := c.refused
	c.mu.Unlock()
	if refused {
		return true
	}
	reg, err := c.ctl.Registry()
	return err == nil && slices.Contains(reg.Removed, c.cfg.NodeID)
}

// healInput gathers what the planner sees: every sealed segment with a
// replica list (one of factor one too: nothing is healed for it, but the
// planner tells when it is lost, cluster_lost.go), the live nodes, the
// nodes down and since when, the nodes the registry records removed
// (their copies are dead at once), and this node's own fills in flight.
// A holder the registry neither lists nor records removed is left out:
// this node's registry may lag the metadata that named it, and the
// planner counts its copy rather than heal on a doubt.
func (b *Broker) healInput(now int64) (heal.Input, error) {
	c := b.cluster
	reg, err := c.ctl.Registry()
	if err != nil {
		return heal.Input{}, err
	}
	if slices.Contains(reg.Removed, c.cfg.NodeID) {
		return heal.Input{}, errRemovedSelf
	}
	live, registered, err := b.liveNodes()
	if err != nil {
		return heal.Input{}, err
	}
	in := heal.Input{Now: now}
	liveIDs := map[uint64]bool{}
	for _, n := range live {
		liveIDs[n.ID] = true
		full, failing := b.nodeDisk(n)
		in.Live = append(in.Live, heal.Node{ID: n.ID, Attributes: placementAttrs(n.Attributes), Full: full, Failing: failing})
	}
	regIDs := reg.NodeIDs()
	for _, id := range reg.Removed {
		if !liveIDs[id] { // NB: liveNodes lists registered nodes only
			in.Removed = append(in.Removed, id)
		}
	}
	local := c.heal.localDamaged()
	h := &c.heal
	h.mu.Lock()
	for id, since := range h.downSince {
		if !liveIDs[id] && slices.Contains(regIDs, id) {
			in.Down = append(in.Down, heal.Down{ID: id, SinceMs: since})
		}
	}
	for _, a := range h.filling {
		in.InFlight = append(in.InFlight, a)
	}
	h.mu.Unlock()
	// A topic's factor may come from its policy, resolved against the
	// root group: read outside the vnodes' views, which must not nest.
	type topicRef struct {
		replicas int
		policy   string
	}
	var topics []topicRef
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			topics = append(topics, topicRef{t.Replicas, t.Policy})
		}
	})
	factors := map[topicRef]int{}
	for _, t := range topics {
		if _, ok := factors[t]; !ok {
			factors[t] = min(cmp.Or(b.factorOf(t.replicas, t.policy), 1), registered)
		}
	}
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			factor, ok := factors[topicRef{t.Replicas, t.Policy}]
			if !ok {
				continue // created since the first look: the next pass
			}
			for _, rid := range t.Ranges {
				for _, seg := range st.RangeSegments(rid) {
					if seg.Active || len(seg.Replicas) == 0 {
						continue
					}
					f := factor
					if seg.Factor > 0 {
						f = min(seg.Factor, registered) // what it was opened with, not today's policy
					}
					f = max(f, 1)
					in.Segments = append(in.Segments, heal.Segment{
						Seal: sealOf(seg), Topic: fmt.Sprint(t.ID), Range: rid,
						Replicas: replicaIDs(seg), Factor: f, Damaged: b.damagedOf(seg, local),
					})
				}
			}
		}
	})
	return in, nil
}

// placementAttrs drops the attributes gossip carries for the cluster's
// own use, which are no placement attributes.
func placementAttrs(attrs map[string]string) map[string]string {
	out := maps.Clone(attrs)
	delete(out, clusterIDAttr)
	delete(out, diskAttr) // a disk state, not a placement attribute
	return out
}

// sealOf is what the metadata recorded when seg was sealed.
func sealOf(seg metadata.Segment) heal.Seal {
	return heal.Seal{Segment: seg.ID, Base: seg.Base, End: seg.End, Records: seg.Records, Bytes: seg.Bytes,
		ContentHash: seg.ContentHash, Generation: seg.Generation}
}

// dropCopies records a drop-only assignment: the list without its dead
// and damaged holders, if the list is still the one planned.
func (b *Broker) dropCopies(ctx context.Context, a heal.Assignment) {
	seg, ok := b.segmentByID(a.Seal.Segment)
	if !ok || !slices.Equal(replicaIDs(seg), a.Replicas) {
		return // changed since the plan: the next pass sees it
	}
	kept := slices.DeleteFunc(slices.Clone(seg.Replicas), func(name string) bool {
		return slices.Contains(a.Drop, nodeOfName(name))
	})
	_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindSetSegmentReplicas, Segment: seg.ID,
		Expect: seg.Replicas, Replicas: kept})
	if err != nil {
		b.log.Warn("heal: dropping dead or damaged copies from a segment's list failed; the next pass retries",
			"segment", seg.ID, "drop", a.Drop, "err", err)
		return
	}
	b.log.Info("heal: dropped copies from a segment's list", "segment", seg.ID, "dropped", a.Drop, "replicas", kept)
}

// startFill starts filling a's copy here, unless this node already fills
// it or is at its bound. A node that still holds a file of the segment (a
// stale or damaged one) fills only to rebuild its own damaged copy: then
// the metadata must already record that copy damaged, so no planner counts
// it and no reader is sent to it, and the file is set aside before the
// new copy is made. Otherwise collectUnlisted or the drop deals with the
// file first. It reports whether a fill started.
func (b *Broker) startFill(ctx context.Context, a heal.Assignment) bool {
	h := &b.cluster.heal
	id := a.Seal.Segment
	rebuild := slices.Contains(a.Rebuild, b.cluster.cfg.NodeID)
	if rebuild && !b.listedDamaged(id) {
		return false // the mark is not recorded yet (or the list changed): a later pass
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, busy := h.filling[id]; busy || len(h.filling) >= b.cluster.cfg.Heal.MaxTasksPerNode {
		return false
	}
	held := b.hasFile(id)
	if held && !rebuild {
		return false
	}
	h.filling[id] = a
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if !rebuild || b.setAside(id, held) {
			b.fill(ctx, a)
		}
		h.mu.Lock()
		delete(h.filling, id)
		h.mu.Unlock()
	}()
	return true
}

// listedDamaged reports whether the local metadata lists this node for
// sealed segment id and records its copy damaged.
func (b *Broker) listedDamaged(id uint64) bool {
	self := clusterNodeName(b.cluster.cfg.NodeID)
	seg, ok := b.segmentByID(id)
	return ok && !seg.Active && slices.Contains(seg.Replicas, self) && slices.Contains(seg.Damaged, self)
}

// setAside readies a rebuild of this node's damaged copy of id: the file,
// if held, is moved into the store's quarantine, kept for inspection and
// never served nor deleted by the heal; and the damage found here is
// forgotten, since it was the old file's: the metadata's mark keeps the
// copy out of service until the rebuilt one is recorded. It answers false
// when the rebuild must not go on.
func (b *Broker) setAside(id uint64, held bool) bool {
	if !b.listedDamaged(id) {
		return false // the list changed since startFill looked
	}
	if held {
		h := &b.cluster.heal
		h.mu.Lock()
		if h.scrubbing == id {
			h.scrubVoid = true // its verdict is the old file's
		}
		h.mu.Unlock()
		path, err := b.store.Quarantine(storage.SegmentID(id))
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			b.log.Error("heal: could not set a damaged copy aside; it is not rebuilt", "segment", id, "err", err)
			return false
		default:
			b.log.Warn("heal: a damaged copy was set aside to be rebuilt; its file is kept, never served",
				"segment", id, "path", path)
		}
	}
	b.forgetDamaged(id)
	return true
}

// hasFile reports whether the store holds any file of segment id,
// damaged ones included.
func (b *Broker) hasFile(id uint64) bool {
	_, _, err := b.store.Ends(storage.SegmentID(id))
	return !errors.Is(err, storage.ErrNotFound)
}

// recordOutcome is how a filled copy's record ended.
type recordOutcome uint8

const (
	recordDone    recordOutcome = iota + 1 // the list names this node, undamaged
	recordRefused                          // refused, or no longer needed: nothing names the copy
	recordUnknown                          // no answer: it may still be applied
	recordKept                             // refused while the list still names this node (a rebuild)
)

// fill makes, verifies and records this node's copy for a. A copy that
// fails before any record, or whose record was refused, is deleted: no
// command names it. One whose record got no answer is kept for a while
// (unknown), since the control plane may still apply it. One the list
// still names, as a rebuilding holder's is until it leaves the list, is
// never deleted here, whatever it holds (S4): the next rebuild sets it
// aside.
func (b *Broker) fill(ctx context.Context, a heal.Assignment) {
	id := storage.SegmentID(a.Seal.Segment)
	seg, ok := b.segmentByID(a.Seal.Segment)
	if !ok || seg.Active {
		return
	}
	if err := b.store.CreateFor(id, a.Seal.Base, ownerTag(seg.Range)); err != nil {
		b.log.Warn("heal: could not create a copy", "segment", id, "err", err)
		return
	}
	outcome := recordRefused
	defer func() {
		if outcome != recordRefused {
			return
		}
		if b.listsSelf(uint64(id)) {
			b.log.Warn("heal: a copy that was not recorded is kept, since the list still names this node",
				"segment", id)
			return
		}
		if err := b.deleteCopy(uint64(id)); err != nil && !errors.Is(err, storage.ErrClosed) {
			b.log.Warn("heal: could not delete an unrecorded copy", "segment", id, "err", err)
		}
	}()
	if err := b.makeCopy(ctx, a); err != nil {
		b.log.Warn("heal: copying a sealed segment failed; the next pass plans it again",
			"segment", id, "source", a.Source, "err", err)
		return
	}
	outcome = b.recordCopy(ctx, a)
	if outcome == recordDone {
		b.log.Info("heal: a verified copy was recorded", "segment", id, "source", a.Source, "bytes", a.Seal.Bytes,
			"rebuilt", slices.Contains(a.Rebuild, b.cluster.cfg.NodeID))
	}
}

// listsSelf reports whether the local metadata's list of segment id
// names this node.
func (b *Broker) listsSelf(id uint64) bool {
	seg, ok := b.segmentByID(id)
	return ok && slices.Contains(seg.Replicas, clusterNodeName(b.cluster.cfg.NodeID))
}

// makeCopy pulls the sealed copy from a's source, seals it exactly at
// the seal's end and verifies it whole.
func (b *Broker) makeCopy(ctx context.Context, a heal.Assignment) error {
	id := storage.SegmentID(a.Seal.Segment)
	if err := b.copyFrom(ctx, a.Source, a.Seal); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	if _, err := b.store.SealWith(sctx, id, storage.SealOptions{End: a.Seal.End, Exact: true}); err != nil {
		return fmt.Errorf("seal the copy at %d: %w", a.Seal.End, err)
	}
	if v := heal.Verify(a.Seal, b.storeReader(ctx, id, nil), 0); !v.Whole() {
		return fmt.Errorf("the copy does not verify: %v", v)
	}
	return nil
}

// recordCopy adds this node to the segment's list, conditional on the
// list it reads. When the list changed since the plan, it records only
// if a plan on the new list still makes this node a target. Once one
// command was sent, a later refusal may be the answer to a repeat of a
// command already applied (its answer lost, the repeat past the dedup
// window) while this node's view still lags: the copy is then kept as
// unknown, for collectUnlisted to delete after a barrier if the list
// truly does not name it (S4).
//
// A holder rebuilding its damaged copy is listed already, damaged: it
// first records the list without itself, since the metadata clears a
// damage mark only when its holder leaves the list, then adds itself
// back (heal.Task.Submit's order). The source stays listed throughout, so
// no serving copy leaves, and a refusal while the list still names this
// node keeps the copy (recordKept).
func (b *Broker) recordCopy(ctx context.Context, a heal.Assignment) recordOutcome {
	self := clusterNodeName(b.cluster.cfg.NodeID)
	rebuild := slices.Contains(a.Rebuild, b.cluster.cfg.NodeID)
	planned := a.Replicas
	var cleared []string // the list this node's clearing command recorded, which its view may lag
	sent, left := false, false
	refused := func(id uint64) recordOutcome {
		if sent {
			b.keepUnknown(id)
		}
		switch {
		case b.listsSelf(id):
			return recordKept
		case sent:
			return recordUnknown
		}
		return recordRefused
	}
	for tries := 0; tries < maxRecordAttempts; {
		seg, ok := b.segmentByID(a.Seal.Segment)
		if ok && cleared != nil {
			seg.Replicas, seg.Damaged, cleared = cleared, nil, nil
		}
		listed := slices.Contains(seg.Replicas, self)
		switch {
		case !ok:
			return recordRefused // the segment is gone: nothing can name the copy
		case listed && !slices.Contains(seg.Damaged, self):
			return recordDone
		case listed && (!rebuild || left):
			// Listed damaged, and this copy is not to replace that, or
			// this node left the list once already and is back damaged.
			return refused(seg.ID)
		case (tries > 0 || !slices.Equal(replicaIDs(seg), planned)) && !b.stillTarget(seg.ID):
			return refused(seg.ID)
		}
		next := append(slices.Clone(seg.Replicas), self)
		if listed {
			next = slices.DeleteFunc(slices.Clone(seg.Replicas), func(r string) bool { return r == self })
		}
		_, err := b.apply(ctx, metadata.Command{Kind: metadata.KindSetSegmentReplicas, Segment: seg.ID,
			Expect: seg.Replicas, Replicas: next})
		var me metadata.Error
		switch {
		case err == nil && listed:
			b.log.Info("heal: left a segment's list to clear its damage mark; the rebuilt copy is added next",
				"segment", seg.ID, "replicas", next)
			cleared, planned, left = next, replicaIDs(metadata.Segment{Replicas: next}), true
			continue
		case err == nil:
			return recordDone
		case errors.Is(err, metadata.ErrNoSuchSegment):
			// Deleted (retention) while the copy was made: the answer
			// is final, so the copy goes now rather than resurrect it.
			return recordRefused
		case errors.Is(err, metadata.ErrReplicasChanged):
			sent = true
			tries++
			continue
		case errors.As(err, &me):
			return refused(seg.ID)
		}
		b.keepUnknown(seg.ID)
		b.log.Warn("heal: recording a copy got no answer; the copy is kept until the metadata shows it",
			"segment", seg.ID, "err", err)
		return recordUnknown
	}
	return refused(a.Seal.Segment)
}

// stillTarget plans again on the current metadata and reports whether
// this node is still to take a copy of segment id.
func (b *Broker) stillTarget(id uint64) bool {
	in, err := b.healInput(b.nowMs())
	if err != nil {
		return false
	}
	in.Segments = slices.DeleteFunc(in.Segments, func(s heal.Segment) bool { return s.Seal.Segment != id })
	in.InFlight = slices.DeleteFunc(in.InFlight, func(a heal.Assignment) bool { return a.Seal.Segment == id })
	plan, err := heal.PlanHeals(b.healPlanConfig(), in)
	if err != nil {
		return false
	}
	for _, a := range plan.Tasks {
		if slices.Contains(a.Targets, b.cluster.cfg.NodeID) {
			return true
		}
	}
	return false
}

// keepUnknown protects a copy whose record got no answer from
// collection for a few metadata timeouts.
func (b *Broker) keepUnknown(id uint64) {
	h := &b.cluster.heal
	h.mu.Lock()
	h.unknown[id] = b.nowMs() + 4*b.cluster.cfg.MetadataTimeout.Milliseconds()
	h.mu.Unlock()
}

// collectUnlisted deletes this node's copies of sealed segments whose
// replica list does not name it, and its files of segments the metadata
// deleted (a delete this node missed while down and then learned from a
// snapshot), once a barrier on the segment's group confirms it (S4): the
// local metadata may lag a record this node's own fill made. Copies being
// filled, or whose record got no answer lately, are left alone. A file of
// a segment deleted as lost is set aside in the quarantine instead
// (keepLostCopy): it may be the last of its records.
func (b *Broker) collectUnlisted(ctx context.Context, now int64) {
	self := clusterNodeName(b.cluster.cfg.NodeID)
	unlisted := func(id uint64) bool {
		seg, ok := b.segmentByID(id)
		if !ok {
			return b.wasDeleted(id)
		}
		return !seg.Active && len(seg.Replicas) > 0 && !slices.Contains(seg.Replicas, self)
	}
	n := 0
	for _, info := range b.store.List() {
		id := uint64(info.ID)
		if n >= maxCollectPerPass || ctx.Err() != nil {
			return
		}
		if !unlisted(id) || b.healBusy(id, now) {
			continue
		}
		n++
		bctx, cancel := context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
		err := b.cluster.ctl.Barrier(bctx, control.GroupOfID(id))
		cancel()
		if err != nil || !unlisted(id) || b.healBusy(id, now) {
			continue
		}
		if b.keepLostCopy(id) {
			continue // recorded lost: this copy is set aside, never deleted
		}
		if _, listed := b.segmentByID(id); !listed {
			if h := b.replicas(); h != nil {
				h.Drop(id) // deleted: nothing may serve or replicate it
			}
		}
		if err := b.deleteCopy(id); err != nil {
			b.log.Warn("heal: could not delete a copy the metadata no longer lists", "segment", id, "err", err)
			continue
		}
		b.log.Info("heal: deleted a copy the metadata no longer lists", "segment", id)
	}
}

// healBusy reports whether a copy of id is being filled here or its
// record's answer is still awaited.
func (b *Broker) healBusy(id uint64, now int64) bool {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	if until, ok := h.unknown[id]; ok {
		if now < until {
			return true
		}
		delete(h.unknown, id)
	}
	_, filling := h.filling[id]
	return filling
}
