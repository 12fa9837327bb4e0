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
		rd := RangeDescription{
			ID: r.ID, Start: r.Start, End: r.End, Active: r.Active,
			Parents: r.Parents, CreatedAt: msTime(r.CreatedAt), SealedAt: msTime(r.SealedAt),
		}
		for _, s := range st.RangeSegments(rid) {
			rd.Segments = append(rd.Segments, SegmentDescription{
				ID: s.ID, Active: s.Active, Base: s.Base, End: s.End, Records: s.Records,
				Bytes: uint64(s.Bytes), Replicas: s.Replicas, Primary: primaryName(s), OpenedAt: msTime(s.OpenedAt),
				SealedAt: msTime(s.SealedAt), MaxExpiry: msTime(s.MaxExpiry),
			})
		}
		d.Ranges = append(d.Ranges, rd)
	}
	return d
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
