package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage"
)

// Replicated segments (docs/architecture.md, "Replicated segments"). In a
// cluster a new segment is placed on SegmentReplicas live nodes (or its
// topic's factor), the opening node first as its primary. The primary's
// write head appends through the node's replica.Host, which ships every
// batch to the followers and answers a produce once a quorum fsynced it
// (W1); reads of an active replicated segment stop at its commit
// watermark on every replica (R1); rolls fence the primary and seal at
// exactly the fence's end (W4), and the followers seal their copies when
// they see the seal applied. A segment with one replica (a single node,
// a factor of 1, one registered node) keeps the direct path.

// registerReplication installs the replication handlers on the
// transport (before it starts). Until the host exists (the segment store
// is not open yet) messages are dropped, which the primaries' resends
// cover, and fence calls are refused.
func (c *clusterNode) registerReplication() error {
	if err := c.tr.HandleContext(peer.ChannelReplication, func(ctx context.Context, from uint64, msg []byte) {
		if h := c.repl.Load(); h != nil {
			h.HandleMessageContext(ctx, from, msg) // ctx: the primary's trace context, if it sent one
		}
	}); err != nil {
		return fmt.Errorf("broker: replication: %w", err)
	}
	err := c.tr.HandleCall(peer.ChannelReplication, func(ctx context.Context, from uint64, req []byte) ([]byte, error) {
		h := c.repl.Load()
		if h == nil {
			return nil, errors.New("node is starting: no replicas yet")
		}
		return h.HandleCall(ctx, from, req)
	})
	if err != nil {
		return fmt.Errorf("broker: replication: %w", err)
	}
	return nil
}

// startReplicas makes the replica host once the segment store is open.
func (b *Broker) startReplicas() error {
	c := b.cluster
	if c == nil {
		return nil
	}
	h, err := replica.New(replica.Config{
		Self: c.cfg.NodeID, Transport: c.tr, Store: b.store, Lookup: b.segmentInfo,
		OnCommit: b.onCommit, Clock: b.cfg.Clock, Logger: b.log, CommitTimeout: c.cfg.MetadataTimeout,
		Tracer: b.cfg.Tracer,
	})
	if err != nil {
		return err
	}
	c.repl.Store(h)
	b.startHeal()
	b.startDiskWatch()
	return nil
}

// replicas is the node's replica host, nil on a single node.
func (b *Broker) replicas() *replica.Host {
	if b.cluster == nil {
		return nil
	}
	return b.cluster.repl.Load()
}

// replicated reports whether seg has more than one replica: its writes
// go through the replica host and its reads stop at the watermark.
func replicated(seg metadata.Segment) bool { return len(seg.Replicas) > 1 }

// replicaIDs are the node ids of seg's replicas, the primary first.
func replicaIDs(seg metadata.Segment) []uint64 {
	ids := make([]uint64, 0, len(seg.Replicas))
	for _, name := range seg.Replicas {
		ids = append(ids, nodeOfName(name))
	}
	return ids
}

// segmentInfo is the replica host's view of the control plane.
func (b *Broker) segmentInfo(id uint64) (replica.SegmentInfo, bool) {
	var (
		seg metadata.Segment
		ok  bool
	)
	_ = b.plane.ViewID(id, func(st *metadata.State) { seg, ok = st.Segment(id) })
	if !ok {
		return replica.SegmentInfo{}, false
	}
	return replica.SegmentInfo{Base: seg.Base, Replicas: replicaIDs(seg), Active: seg.Active, Owner: ownerTag(seg.Range)}, true
}

// onCommit wakes the readers of a segment whose watermark moved: here,
// and, on its primary, on the nodes interested in its topic. It runs on
// the store's commit path or the replica host's loop: it only looks up
// and queues.
func (b *Broker) onCommit(segID, wm uint64) {
	var rangeID, topicID uint64
	_ = b.plane.ViewID(segID, func(st *metadata.State) {
		if seg, ok := st.Segment(segID); ok {
			rangeID = seg.Range
			if r, ok := st.Range(seg.Range); ok {
				topicID = r.Topic
			}
		}
	})
	if topicID == 0 {
		return
	}
	b.fireWatch(topicID)
	if h := b.replicas(); b.data != nil && h != nil && h.IsPrimary(segID) {
		b.data.appended(topicID, rangeID, wm)
	}
}

// writesHere reports whether this node writes seg: it is the segment's
// primary (a segment of one replica, or none, as before replication).
func (b *Broker) writesHere(seg metadata.Segment) bool {
	if !replicated(seg) {
		return b.holds(seg)
	}
	return seg.Replicas[0] == b.cfg.NodeID
}

// notOwner is the NotOwnerError naming seg's primary.
func (b *Broker) notOwner(seg metadata.Segment) error {
	e := &NotOwnerError{Segment: seg.ID, Node: seg.Replicas[0]}
	if id := nodeOfName(e.Node); id != 0 && b.cluster != nil {
		for _, m := range b.cluster.gossip.Members() {
			if m.ID == id {
				e.ClientAddr = m.ClientAddr
			}
		}
	}
	return e
}

// liveNodes are the registered nodes gossip sees alive (this node
// always), with their attributes, and how many are registered. It fails
// when this node cannot read the registry (it has not joined yet).
func (b *Broker) liveNodes() ([]placement.Node, int, error) {
	c := b.cluster
	reg, err := c.ctl.Registry()
	if err != nil {
		return nil, 0, err
	}
	ids := reg.NodeIDs()
	alive := map[uint64]map[string]string{c.cfg.NodeID: c.cfg.Attrs}
	for _, m := range c.gossip.Members() {
		if m.State.Live() {
			alive[m.ID] = m.Attributes
		}
	}
	var out []placement.Node
	for _, id := range ids {
		if attrs, ok := alive[id]; ok {
			out = append(out, placement.Node{ID: id, Attributes: attrs})
		}
	}
	if !slices.ContainsFunc(out, func(n placement.Node) bool { return n.ID == c.cfg.NodeID }) {
		out = append(out, placement.Node{ID: c.cfg.NodeID, Attributes: c.cfg.Attrs})
	}
	return out, max(len(ids), 1), nil
}

// nodeDead reports whether gossip declared node dead (or gone); a node
// gossip does not know is not taken for dead, nor one whose departure
// only a peer reported (membership.Member.Reported): a failover fences a
// primary on this node's own failure detection, not on a view that may
// be stale.
func (b *Broker) nodeDead(node uint64) bool {
	if b.cluster == nil || node == b.cluster.cfg.NodeID {
		return false
	}
	for _, m := range b.cluster.gossip.Members() {
		if m.ID == node {
			return !m.State.Live() && !m.Reported
		}
	}
	return false
}

// topicPlacement is how a new segment of a topic is placed: its
// replication factor and the constraints on its replica set.
type topicPlacement struct {
	factor int
	placement.Constraints
}

// topicFactor is the replication factor and placement a new segment of
// topicID asks for. A factor its policy sets wins; else the topic's own
// (given at create); else the node's default (ClusterConfig.SegmentReplicas,
// or replicas in Config.Retention). spread_by, min_domains and placement
// come from the effective policy; min_domains needs spread_by.
func (b *Broker) topicFactor(topicID uint64) topicPlacement {
	var t metadata.Topic
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { t, _ = st.TopicHeaderByID(topicID) })
	eff := b.resolvePolicy(t.Policy)
	tp := topicPlacement{factor: factorFrom(t.Replicas, eff, b.cluster.cfg.SegmentReplicas)}
	if attr, ok := eff.SpreadBy(); ok {
		tp.SpreadBy = attr
		if n, ok := eff.MinDomains(); ok && n > 1 {
			tp.MinDomains = int(n)
		}
		if mode, _ := eff.Placement(); mode == "hard" {
			tp.Mode = placement.Hard
		}
	}
	return tp
}

// factorOf is the replication factor of a topic created with factor
// replicas (0 for none) and bound to policy.
func (b *Broker) factorOf(replicas int, policy string) int {
	return factorFrom(replicas, b.resolvePolicy(policy), b.cluster.cfg.SegmentReplicas)
}

// factorFrom: a factor the policy sets wins, then the topic's own, then
// the node's default.
func factorFrom(replicas int, eff retention.Effective, def int) int {
	if n, ok := eff.Replicas(); ok && (replicas <= 0 || eff.Field(retention.FieldReplicas).Origin == retention.OriginPolicy) {
		return int(n)
	}
	if replicas > 0 {
		return replicas
	}
	return def
}

// placeSegment chooses the replica set of a new segment of h's range:
// HRW over the live nodes, this node first as its primary, shaped by the
// topic's spread_by and min_domains. The factor is clamped to the
// registered nodes, then to the live ones; fewer live nodes than a
// majority of it refuse the open (a retriable reason), so that a cluster
// that lost most of its nodes does not go on with copies too few to
// survive another loss. A hard placement that cannot cover min_domains
// refuses the open (retriable: a node may come back); a soft one places
// what it can and logs the shortfall. Nodes whose disk is full or failing
// take no replica, and such a node opens no segment (cluster_disk.go).
func (b *Broker) placeSegment(h *head) ([]string, error) {
	if b.cluster == nil {
		return []string{b.cfg.NodeID}, nil
	}
	if st := b.store.DiskState(); st != storage.DiskOK {
		return nil, b.openElsewhere(h, st)
	}
	tp := b.topicFactor(h.topicID)
	p, err := b.placeReplicas(h, tp)
	if err != nil {
		return nil, err
	}
	if v := p.Violation; v != nil {
		b.log.Warn("a segment's replicas span fewer failure domains than its policy asks",
			"range", h.rangeID, "spread_by", tp.SpreadBy, "need", v.Need, "got", v.Got, "why", v.Reason)
	}
	names := make([]string, 0, len(p.Replicas))
	for _, id := range p.Replicas {
		names = append(names, clusterNodeName(id))
	}
	return names, nil
}

// placeReplicas is placeSegment's choice, without its side effects (the
// open sent elsewhere from a full disk, the log of a soft shortfall).
func (b *Broker) placeReplicas(h *head, tp topicPlacement) (placement.Placement, error) {
	self := b.cluster.cfg.NodeID
	if tp.factor <= 1 {
		return placement.Placement{Replicas: []uint64{self}}, nil
	}
	live, registered, err := b.liveNodes()
	live = b.diskOKNodes(live) // a full or failing disk takes no new replica
	want, err := clampFactor(tp.factor, registered, len(live), err)
	if err != nil {
		return placement.Placement{}, fmt.Errorf("%w: a segment of range %d: %v", ErrMetadataUnavailable, h.rangeID, err)
	}
	if want <= 1 {
		return placement.Placement{Replicas: []uint64{self}}, nil
	}
	for i := range live {
		live[i].Attributes = placementAttrs(live[i].Attributes)
	}
	p, err := placement.Replace([]uint64{self}, nil, placement.Request{
		Topic: fmt.Sprint(h.topicID), Range: h.rangeID, Segment: h.next, Nodes: live, Factor: want,
		Constraints: tp.Constraints,
	})
	if err != nil {
		return placement.Placement{}, fmt.Errorf("%w: placing a segment of range %d: %v", ErrRetry, h.rangeID, err)
	}
	return p, nil
}

// clampFactor is the replication factor a new segment gets: factor,
// clamped to the registered nodes, refused when fewer than a majority of
// it are live or when the registry could not be read. An unreadable
// registry must not read as a cluster of one: the segment would be
// acknowledged on a single fsync (W1).
func clampFactor(factor, registered, live int, regErr error) (int, error) {
	if regErr != nil {
		return 0, fmt.Errorf("the node registry is not readable here: %w", regErr)
	}
	want := min(factor, registered)
	if want > 1 && live < replication.Quorum(want) {
		return 0, fmt.Errorf("%d of the %d nodes it needs are live", live, want)
	}
	return want, nil
}

// openReplicas starts the primary of a segment this node just opened
// with replicas; the file exists.
func (b *Broker) openReplicas(id, base uint64, replicas []string) error {
	h := b.replicas()
	if h == nil {
		return fmt.Errorf("%w: the replica host is not running", ErrShuttingDown)
	}
	ids := make([]uint64, 0, len(replicas))
	for _, name := range replicas {
		ids = append(ids, nodeOfName(name))
	}
	return h.Open(id, base, ids)
}

// replicaAppendError maps a refusal of the replica host to the broker's
// reasons, and tells whether the head must be reconciled again.
func replicaAppendError(seg uint64, err error) (bool, error) {
	switch {
	case errors.Is(err, replica.ErrBackpressure):
		return false, fmt.Errorf("%w: segment %d: %v", ErrTooManyRequests, seg, err)
	case errors.Is(err, replica.ErrClosed), errors.Is(err, storage.ErrClosed):
		return true, fmt.Errorf("%w: %v", ErrShuttingDown, err)
	case errors.Is(err, replication.ErrSealed), errors.Is(err, replica.ErrUnknownSegment),
		errors.Is(err, replica.ErrNotPrimary), errors.Is(err, replica.ErrDropped), errors.Is(err, replica.ErrFailed):
		return true, fmt.Errorf("%w: segment %d: %v", ErrRetry, seg, err)
	}
	return true, fmt.Errorf("broker: append: %w", err)
}

// replicaDoneError maps the failure of a replicated append that was
// taken but not committed: retriable, the records may or may not be in
// the segment.
func replicaDoneError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, replica.ErrClosed) || errors.Is(err, storage.ErrClosed) {
		return fmt.Errorf("%w: %v", ErrShuttingDown, err)
	}
	// A replicated append taken and then not committed (dropped by a
	// seal, no quorum in time, the primary's copy failed) may or may not
	// be in the segment: a client retries it.
	return fmt.Errorf("%w: %v", ErrRetry, err)
}

// rollReplicatedLocked is rollLocked for a replicated segment: the
// primary is fenced and drained (every append before the fence is
// committed on a quorum), the local copy sealed at exactly the fence's
// end and the seal recorded (W4). The followers seal their copies when
// they see it applied (sealCopies).
//
// REQUIRES: h.mu held, h.segment replicated and led here.
func (b *Broker) rollReplicatedLocked(h *head) error {
	host := b.replicas()
	ctx, cancel := context.WithTimeout(b.life, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	end, err := host.Fence(ctx, h.segment)
	if err != nil {
		h.ready = false
		return fmt.Errorf("broker: fence segment %d: %w", h.segment, err)
	}
	footer, err := b.store.SealWith(ctx, storage.SegmentID(h.segment), storage.SealOptions{End: end, Exact: true})
	if err != nil {
		h.ready = false
		return fmt.Errorf("broker: seal segment %d at %d: %w", h.segment, end, err)
	}
	if err := b.sealInMetadata(h.segment, footer); err != nil {
		h.ready = false
		return err
	}
	host.Drop(h.segment)
	h.sealedAt(end)
	return nil
}

// sealCopy applies a seal recorded in the metadata to this node's copy
// of a replicated segment, if it keeps one: cut to the seal, or left
// unsealed and reported when it is behind (a later heal copies what it
// lacks).
func (b *Broker) sealCopy(seg metadata.Segment) {
	h := b.replicas()
	if h == nil || !replicated(seg) || !b.holds(seg) {
		return
	}
	ctx, cancel := context.WithTimeout(b.life, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	var err error
	if skipSealCopy.Load() {
		h.Drop(seg.ID)
		err = fmt.Errorf("sealing skipped by a test: %w", context.DeadlineExceeded)
	} else {
		err = h.SealCopy(ctx, seg.ID, seg.End)
	}
	b.noteResealable(seg.ID, err)
	switch {
	case err == nil:
		if !skipContentOnSeal.Load() {
			b.recordSealContent(ctx, seg)
		}
	case errors.Is(err, storage.ErrNotFound):
	case errors.Is(err, replica.ErrBehind), errors.Is(err, storage.ErrBehind):
		b.log.Warn("a copy of a sealed segment is behind its seal; it stays unsealed until healed",
			"segment", seg.ID, "end", seg.End, "err", err)
	default:
		b.log.Error("sealing a copy of a sealed segment failed", "segment", seg.ID, "end", seg.End, "err", err)
	}
}

// readBound lowers upTo to the watermark when seg is an active
// replicated segment (R1), and to its seal when it is sealed (a copy may
// hold an unacknowledged suffix until it is cut). ok is false when this node does not know the
// watermark (its copy is not running yet, or it led the segment before
// a restart): it must not serve reads of it.
func (b *Broker) readBound(seg metadata.Segment, upTo uint64) (uint64, bool) {
	if !replicated(seg) {
		return upTo, true
	}
	if !seg.Active {
		return min(upTo, seg.End), true
	}
	h := b.replicas()
	if h == nil {
		return 0, false
	}
	wm, ok := h.Watermark(seg.ID)
	if !ok {
		return 0, false
	}
	return min(upTo, wm), true
}

// followsActive reports whether seg is an active replicated segment this
// node keeps a follower's copy of: its watermark here lags the primary's.
func (b *Broker) followsActive(seg metadata.Segment) bool {
	if !seg.Active || !replicated(seg) {
		return false
	}
	h := b.replicas()
	return h == nil || !h.IsPrimary(seg.ID)
}

// firesHere reports whether every append to the active segment seg fires
// its topic's watch on this node: its only copy is here, or this node
// leads it (commits fire onCommit). A follower's copy learns the
// watermark late, or not at all before its copy exists, so a read plan
// must not take it for idle.
func (b *Broker) firesHere(seg metadata.Segment) bool {
	if !replicated(seg) {
		return b.holds(seg)
	}
	h := b.replicas()
	return h != nil && h.IsPrimary(seg.ID)
}

// segmentByID reads a segment from the metadata.
func (b *Broker) segmentByID(id uint64) (metadata.Segment, bool) {
	var (
		seg metadata.Segment
		ok  bool
	)
	_ = b.plane.ViewID(id, func(st *metadata.State) { seg, ok = st.Segment(id) })
	return seg, ok
}

// copyComplete reports whether this node's copy of a replicated segment
// can serve it: an active one whose watermark is known here, a sealed
// one holding everything to its seal (a copy left behind at a seal
// must not serve reads, which would end early; one not cut yet serves
// up to the seal only, see readBound).
func (b *Broker) copyComplete(seg metadata.Segment) bool {
	if !replicated(seg) {
		// The only copy: its reads verify every batch and fail at a bad
		// one, serving the good prefix; refusing it would hide it all.
		return true
	}
	if b.copyDamaged(seg) {
		return false // found damaged or missing: another replica serves (cluster_scrub.go)
	}
	if seg.Active {
		_, ok := b.readBound(seg, 0)
		return ok
	}
	_, d, err := b.store.Ends(storage.SegmentID(seg.ID))
	return err == nil && d >= seg.End
}

// CreateTopicReplicatedAs is CreateTopicAs with the topic's replication
// factor: replicas per segment, 0 for the cluster's default
// (ClusterConfig.SegmentReplicas). A single node records it and keeps one
// copy of everything.
func (b *Broker) CreateTopicReplicatedAs(ctx context.Context, id Identity, name string, bits uint8, ranges, replicas int) error {
	if replicas == 0 {
		return b.CreateTopicAs(ctx, id, name, bits, ranges)
	}
	if id.User == "" {
		return ErrPermission // an unaccountable caller gets no share
	}
	if err := b.checkCreate(id.User, IsAdmin(id), name, ranges); err != nil {
		return err
	}
	_, err := b.apply(ctx, metadata.Command{Kind: "create_topic", Topic: name, Bits: bits, Ranges: ranges,
		ReplicationFactor: replicas, Owner: id.User, Quota: b.cfg.Limits.quotaFor(id)})
	return err
}
