package broker

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// CreateTopic creates a topic with bits of keyspace (0 = default) and
// ranges initial ranges (0 = 1) on the node's own account: it has no owner
// and only the node-wide limits hold. A user's request goes through
// CreateTopicAs.
func (b *Broker) CreateTopic(ctx context.Context, name string, bits uint8, ranges int) error {
	if err := b.checkCreate("", true, name, ranges); err != nil {
		return err
	}
	q := &metadata.Quota{Topics: b.cfg.Limits.MaxTopics, Ranges: b.cfg.Limits.MaxRanges}
	_, err := b.apply(ctx, metadata.Command{Kind: "create_topic", Topic: name, Bits: bits, Ranges: ranges, Quota: q})
	return err
}

// DeleteTopic removes a topic, its ranges and group positions from the
// metadata, then deletes the segment files the metadata freed. Once it has
// begun fencing it runs on the broker's lifetime, not ctx: a caller that
// goes away must not leave store segments sealed under an active range, or
// files of a deleted topic behind. If it fails part-way, the heads it
// dropped are reconciled by their next user.
func (b *Broker) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx = b.life
	topicID, err := b.topicID(name)
	if err != nil {
		return err
	}
	var rangeIDs []uint64
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		if t, ok := st.TopicByID(topicID); ok {
			rangeIDs = t.Ranges
		}
	})
	// Retire the heads first so no produce lands in a segment being deleted.
	for _, rid := range rangeIDs {
		b.mu.Lock()
		h := b.mu.heads[rid]
		delete(b.mu.heads, rid)
		b.mu.Unlock()
		if h != nil {
			h.mu.Lock()
			h.retired = true
			if h.segment != 0 {
				if _, err := b.store.Seal(ctx, storage.SegmentID(h.segment)); err != nil {
					b.log.Warn("fence before delete failed", "segment", h.segment, "err", err)
				}
			}
			h.mu.Unlock()
		}
	}
	res, err := b.apply(ctx, metadata.Command{Kind: "delete_topic", Topic: name, TopicID: topicID})
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range res.Deleted {
		if err := b.store.Delete(storage.SegmentID(id)); err != nil && !errors.Is(err, storage.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	b.mu.Lock()
	if w, ok := b.mu.watches[topicID]; ok {
		w.fire()
		delete(b.mu.watches, topicID)
	}
	b.mu.Unlock()
	return errors.Join(errs...)
}

// TopicSummary is one line of a topic listing.
type TopicSummary struct {
	Name         string
	Bits         uint8
	ActiveRanges int
	Ranges       int
	Segments     int
	Records      uint64
	Bytes        uint64
}

// ListTopics summarises every topic, sorted by name.
func (b *Broker) ListTopics() []TopicSummary {
	var out []TopicSummary
	for _, d := range b.describeAll() {
		s := TopicSummary{Name: d.Name, Bits: d.Bits, Ranges: len(d.Ranges)}
		for _, r := range d.Ranges {
			if r.Active {
				s.ActiveRanges++
			}
			s.Segments += len(r.Segments)
			for _, seg := range r.Segments {
				s.Records += seg.Records
				s.Bytes += seg.Bytes
			}
		}
		out = append(out, s)
	}
	return out
}

// TopicDescription is a topic's ranges and segments.
type TopicDescription struct {
	ID        uint64
	Name      string
	Bits      uint8
	Owner     string // the user that created it; "" for the node's own
	CreatedAt time.Time
	Ranges    []RangeDescription
	Groups    []string
}

// RangeDescription is one range of a topic.
type RangeDescription struct {
	ID, Start, End uint64
	Active         bool
	Parents        []uint64
	CreatedAt      time.Time
	SealedAt       time.Time
	Segments       []SegmentDescription
	// SegmentsOmitted counts the oldest segments a page left out
	// (DescribeTopicPage with MaxSegments); 0 otherwise.
	SegmentsOmitted int
}

// SegmentDescription is one segment of a range. For the active segment the
// figures are the store's live ones.
type SegmentDescription struct {
	ID        uint64
	Active    bool
	Base, End uint64
	Records   uint64
	Bytes     uint64
	Replicas  []string
	// Primary is the node that writes the segment (Replicas[0]), "" for a
	// segment opened by a single node.
	Primary   string
	OpenedAt  time.Time
	SealedAt  time.Time
	MaxExpiry time.Time
	// Watermark is, for an active replicated segment, its commit
	// watermark as this node knows it (WatermarkKnown): its primary's, or
	// what its copy here learned. A node without a running copy knows
	// none. End is then the lower of it and the copy's durable end.
	Watermark      uint64
	WatermarkKnown bool
	// Copies are the segment's copies in a cluster, its replicas in
	// order and then a copy this node is filling for it, each with its
	// state as this node sees it (Copy*); only from DescribeTopicCopies.
	Copies  []SegmentCopy
	damaged []string // replicas the metadata records damaged
}

// The states of a segment's copy in DescribeTopicCopies. A node knows
// only its own copies' scrub verdicts, so only the answering node's copy
// can be verified; another node's copy not known to be anything else is
// unchecked (ask that node to see its verdict).
const (
	// CopyUnchecked: on a live node and not found damaged; no scrub of
	// it found it whole yet, or it is another node's copy.
	CopyUnchecked = "unchecked"
	// CopyVerified: the answering node's own copy, which its last scrub
	// found whole against the seal.
	CopyVerified = "verified"
	// CopyDamaged: found damaged or missing on its node, never served.
	CopyDamaged = "damaged"
	// CopyHealing: this node is filling the copy from a healthy peer.
	CopyHealing = "healing"
	// CopyMissing: its node is not live in this node's view.
	CopyMissing = "missing"
)

// SegmentCopy is one copy of a segment: its node's id and its state.
type SegmentCopy struct {
	Node  uint64
	State string
}

// DescribeTopic reports a topic's ranges (with lineage) and segments.
func (b *Broker) DescribeTopic(name string) (TopicDescription, error) {
	var (
		d  TopicDescription
		ok bool
	)
	_ = b.plane.ViewTopicName(name, func(st *metadata.State) {
		var t metadata.Topic
		t, ok = st.Topic(name)
		if ok {
			d = describe(st, t)
		}
	})
	if !ok {
		return d, metadata.ErrNoSuchTopic
	}
	b.fillLive(&d)
	return d, nil
}

// DescribeTopicCopies is DescribeTopic with each segment's copies and
// their state, in a cluster.
func (b *Broker) DescribeTopicCopies(name string) (TopicDescription, error) {
	d, err := b.DescribeTopic(name)
	if err == nil {
		b.fillCopies(&d)
	}
	return d, err
}

// fillCopies sets the copies of d's segments in a cluster.
func (b *Broker) fillCopies(d *TopicDescription) {
	if b.cluster == nil {
		return
	}
	live := b.liveSet()
	local := b.cluster.heal.localDamaged()
	verified := b.cluster.heal.localVerified()
	self := clusterNodeName(b.cluster.cfg.NodeID)
	h := &b.cluster.heal
	h.mu.Lock()
	filling := make(map[uint64]bool, len(h.filling))
	for id := range h.filling {
		filling[id] = true
	}
	h.mu.Unlock()
	for i := range d.Ranges {
		for j := range d.Ranges[i].Segments {
			s := &d.Ranges[i].Segments[j]
			for _, r := range s.Replicas {
				st := copyState(s, r, r == self && local[s.ID], r == self && filling[s.ID], live)
				if st == CopyUnchecked && r == self && verified[s.ID] {
					st = CopyVerified
				}
				s.Copies = append(s.Copies, SegmentCopy{Node: nodeOfName(r), State: st})
			}
			if filling[s.ID] && !slices.Contains(s.Replicas, self) {
				s.Copies = append(s.Copies, SegmentCopy{Node: b.cluster.cfg.NodeID, State: CopyHealing})
			}
		}
	}
}

// copyState is the state of node's copy of s. foundHere and fillingHere
// say this node found its copy damaged, or is filling it.
func copyState(s *SegmentDescription, node string, foundHere, fillingHere bool, live map[uint64]bool) string {
	switch {
	case fillingHere:
		return CopyHealing
	case foundHere || slices.Contains(s.damaged, node):
		return CopyDamaged
	case !live[nodeOfName(node)]:
		return CopyMissing
	}
	return CopyUnchecked
}

func (b *Broker) describeAll() []TopicDescription {
	var out []TopicDescription
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			out = append(out, describe(st, t))
		}
	})
	slices.SortFunc(out, func(x, y TopicDescription) int { return cmp.Compare(x.Name, y.Name) })
	for i := range out {
		b.fillLive(&out[i])
	}
	return out
}

func describe(st *metadata.State, t metadata.Topic) TopicDescription {
	d := TopicDescription{ID: t.ID, Name: t.Name, Bits: t.Bits, Owner: t.Owner, CreatedAt: msTime(t.CreatedAt), Groups: st.Groups(t.ID)}
	for _, rid := range t.Ranges {
		r, ok := st.Range(rid)
		if !ok {
			continue
		}
		d.Ranges = append(d.Ranges, describeRange(r, st.RangeSegments(rid), 0))
	}
	return d
}

// describeRange describes r with segs, its segments (the newest of
// them, omitted older ones left out).
func describeRange(r metadata.Range, segs []metadata.Segment, omitted int) RangeDescription {
	rd := RangeDescription{
		ID: r.ID, Start: r.Start, End: r.End, Active: r.Active,
		Parents: r.Parents, CreatedAt: msTime(r.CreatedAt), SealedAt: msTime(r.SealedAt),
		SegmentsOmitted: omitted,
	}
	if len(segs) > 0 {
		rd.Segments = make([]SegmentDescription, 0, len(segs))
	}
	for _, s := range segs {
		rd.Segments = append(rd.Segments, SegmentDescription{
			ID: s.ID, Active: s.Active, Base: s.Base, End: s.End, Records: s.Records,
			Bytes: uint64(s.Bytes), Replicas: s.Replicas, Primary: primaryName(s), OpenedAt: msTime(s.OpenedAt),
			SealedAt: msTime(s.SealedAt), MaxExpiry: msTime(s.MaxExpiry), damaged: s.Damaged,
		})
	}
	return rd
}

// fillLive replaces the active segments' zero figures with the store's.
func (b *Broker) fillLive(d *TopicDescription) {
	for i := range d.Ranges {
		for j := range d.Ranges[i].Segments {
			s := &d.Ranges[i].Segments[j]
			if !s.Active {
				continue
			}
			info, err := b.store.Info(storage.SegmentID(s.ID))
			if err != nil {
				continue
			}
			s.End = info.DurableEnd
			if len(s.Replicas) > 1 {
				// A replicated segment ends, for readers, at its commit
				// watermark (R1); a copy that does not know it shows what
				// the metadata says.
				wm, known := uint64(0), false
				if host := b.replicas(); host != nil {
					wm, known = host.Watermark(s.ID)
				}
				if !known {
					continue
				}
				s.Watermark, s.WatermarkKnown = wm, true
				s.End = min(s.End, wm)
			}
			s.Records = info.Records
			s.Bytes = uint64(info.Bytes)
		}
	}
}

// primaryName is the node writing seg, "" when no replica is recorded.
func primaryName(seg metadata.Segment) string {
	if len(seg.Replicas) == 0 {
		return ""
	}
	return seg.Replicas[0]
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Status is the node's identity and totals.
type Status struct {
	NodeID  string
	Version string
	DataDir string
	Uptime  time.Duration
	Topics  int
	Records uint64
	Bytes   uint64
}

// Status reports the node's identity and totals.
func (b *Broker) Status() Status {
	s := Status{
		NodeID: b.cfg.NodeID, Version: Version, DataDir: b.cfg.DataDir,
		Uptime: b.cfg.Clock.Now().Sub(b.started),
	}
	for _, t := range b.ListTopics() {
		s.Topics++
		s.Records += t.Records
		s.Bytes += t.Bytes
	}
	return s
}

// Ready reports whether the node serves requests: not while it stops, and
// not once a disk write or fsync failed (the stores are then fail-stop
// until a restart re-reads what is really on disk).
func (b *Broker) Ready() error {
	if b.closed.Load() {
		return ErrShuttingDown
	}
	if err := b.store.Err(); err != nil {
		return err
	}
	return b.plane.Err()
}
