package client

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// TopicOption configures CreateTopic.
type TopicOption func(*topicConfig)

type topicConfig struct {
	bits     uint8
	ranges   int
	replicas int
	policy   string
}

// WithKeyspaceBits sets the size of the topic's keyspace, 2^bits key
// positions, 1 to 32 (default: the broker's, 16). It bounds how finely the
// topic can ever be split.
func WithKeyspaceBits(bits uint8) TopicOption {
	return func(c *topicConfig) { c.bits = bits }
}

// WithRanges sets the number of ranges the topic starts with, a power of
// two (default 1). Ranges split and merge later, online, so this is only
// a head start for topics known to be busy.
func WithRanges(n int) TopicOption {
	return func(c *topicConfig) { c.ranges = n }
}

// WithReplicas sets the topic's replication factor: how many nodes of a
// cluster keep each of its segments, 1 to 16 (default: the cluster's,
// usually 3). A single node keeps one copy whatever it is set to.
func WithReplicas(n int) TopicOption {
	return func(c *topicConfig) { c.replicas = n }
}

// TopicSummary is one topic in ListTopics.
type TopicSummary struct {
	Name         string
	KeyspaceBits uint8
	ActiveRanges int
	Ranges       int // active and sealed
	Segments     int // active and sealed
	Records      uint64
	Bytes        uint64
}

// TopicDescription is DescribeTopic's answer: the topic's ranges (sealed
// ones too, in creation order) with their segments, and its groups.
type TopicDescription struct {
	ID           uint64
	Name         string
	KeyspaceBits uint8
	CreatedAt    time.Time
	Ranges       []RangeInfo
	Groups       []string
	// GroupsOmitted counts the groups a node describing by pages left
	// out of Groups to keep its first page within bounds (the first by
	// name are listed); ListGroups names them all.
	GroupsOmitted int
	// CopiesOmitted counts the last segments (in the order of Ranges)
	// whose Copies the node left out to keep its answer within a frame;
	// zero when every segment's copies were reported. Described by pages,
	// it sums what each page left out.
	CopiesOmitted int
	// RangesTotal and ActiveRangesTotal count the topic's ranges, all and
	// active, as the node saw them (on the last page, when described by
	// pages); Ranges may hold fewer (DescribeActiveOnly, DescribeLimit).
	RangesTotal, ActiveRangesTotal int
	// Truncated says Ranges stops short of the topic's last range
	// because of DescribeLimit.
	Truncated bool
}

// ActiveRanges returns the ranges that take writes, in creation order.
func (d *TopicDescription) ActiveRanges() []RangeInfo {
	var out []RangeInfo
	for _, r := range d.Ranges {
		if r.Active {
			out = append(out, r)
		}
	}
	return out
}

// RangeInfo is one range: the slice [Start, End) of the topic's keyspace
// it owns, its lineage and its segments.
type RangeInfo struct {
	ID         uint64
	Start, End uint64
	// Active is false once the range was split or merged away; its records
	// stay readable through its children.
	Active    bool
	Parents   []uint64
	CreatedAt time.Time
	SealedAt  time.Time // zero while active
	Segments  []SegmentInfo
	// SegmentsOmitted counts the oldest segments a node describing by
	// pages left out of a range too large for a page on its own.
	SegmentsOmitted int
}

// Records returns the number of records stored in the range's segments.
func (r *RangeInfo) Records() uint64 {
	var n uint64
	for _, s := range r.Segments {
		n += s.Records
	}
	return n
}

// SegmentInfo is one segment (file) of a range. Base and End are storage
// positions, useful to operators; clients never address records by them.
// For the active segment of a replicated range (more than one replica),
// End is where readers stop: its commit watermark as the answering node
// knows it, when that node keeps a running copy (see Watermark).
type SegmentInfo struct {
	ID        uint64
	Active    bool
	Base, End uint64
	Records   uint64
	Bytes     uint64
	Replicas  []string // the first is the primary
	OpenedAt  time.Time
	SealedAt  time.Time // zero while active
	MaxExpiry time.Time // zero when no record expires
	// Copies are the segment's copies in a cluster with their state as
	// the answering node sees it: its replicas in order, then a copy
	// being filled. Nil from a node that does not report them (a single
	// node, or one older than version 2 of describe_topic).
	Copies []SegmentCopy
}

// SegmentCopy is one copy of a segment. State is one of the Copy*
// constants.
type SegmentCopy struct {
	Node  string `json:"node"` // "node-<id>"
	State string `json:"state"`
}

// The states of a segment's copy. A node knows only its own copies'
// scrub verdicts, so only the answering node's copies can be verified.
const (
	// CopyUnchecked: on a live node and not found damaged; no scrub of
	// it found it whole yet, or it is another node's copy (the segment
	// may also be active, with no seal to check against yet).
	CopyUnchecked = "unchecked"
	// CopyVerified: the answering node's own copy, which its last scrub
	// found whole against the seal.
	CopyVerified = "verified"
	// CopyDamaged: found damaged or missing on its node; never served,
	// replaced from a healthy copy.
	CopyDamaged = "damaged"
	// CopyHealing: the answering node is filling this copy.
	CopyHealing = "healing"
	// CopyMissing: the copy's node is not live in the answering node's
	// view.
	CopyMissing = "missing"
)

// Primary is the node that writes the segment: the first of Replicas, ""
// when none is recorded (a segment a single node opened).
func (s SegmentInfo) Primary() string {
	if len(s.Replicas) == 0 {
		return ""
	}
	return s.Replicas[0]
}

// Watermark is the commit watermark of an active replicated segment as
// the answering node reported it (End), and false for any other segment.
// A node that keeps no copy of the segment, or whose copy has not heard
// from the primary since it started, reports the control plane's end
// instead, which is not a watermark: ask the primary or a follower.
func (s SegmentInfo) Watermark() (uint64, bool) {
	if !s.Active || len(s.Replicas) < 2 {
		return 0, false
	}
	return s.End, true
}

// GroupStatus is DescribeGroup's answer.
type GroupStatus struct {
	Group string
	// Cursor is the committed position, "" when the group has committed
	// nothing.
	Cursor string
	// Lag is the number of records after the committed position, summed
	// over Ranges.
	Lag    uint64
	Ranges []RangeLag
	// Skipped counts the records retention deleted that the group's
	// commits passed without having read them; SkippedBound says it is
	// an upper bound. 0 from a node that does not report skips.
	Skipped      uint64
	SkippedBound bool
}

// RangeLag is one active range's lag in records.
type RangeLag struct {
	Range uint64
	Lag   uint64
}

// Status is a node's summary.
type Status struct {
	NodeID  string
	Version string
	DataDir string
	Uptime  time.Duration
	Topics  int
	Records uint64
	Bytes   uint64
}

// CreateTopic creates a topic. It fails with ErrAlreadyExists if the name
// is taken and ErrInvalidTopicName, ErrInvalidKeyspaceBits or
// ErrInvalidRangeCount for bad arguments. It needs the produce permission
// on the topic.
func (c *Client) CreateTopic(ctx context.Context, name string, opts ...TopicOption) error {
	var tc topicConfig
	for _, o := range opts {
		o(&tc)
	}
	if tc.ranges < 0 || uint64(tc.ranges) > math.MaxUint32 {
		return opError("create_topic", name, errorFor(wire.ReasonInvalidRangeCount))
	}
	if tc.replicas < 0 || tc.replicas > math.MaxUint8 {
		return opError("create_topic", name, errorFor(wire.ReasonInvalidCommand))
	}
	var req wire.Request = wire.CreateTopicRequest{Topic: str(name), Bits: tc.bits}
	if tc.ranges > 1 || tc.replicas > 0 || tc.policy != "" {
		// Only the extended key carries a range count, a replication
		// factor and a policy; keep v1 otherwise so the request is one any
		// v1 broker understands.
		req = wire.CreateTopicExRequest{
			Topic: str(name), Bits: tc.bits, Ranges: uint32(max(tc.ranges, 1)),
			Replicas: uint8(tc.replicas), Policy: tc.policy,
		}
	}
	return c.do(ctx, request{req: req})
}

// ListTopics summarises every topic, sorted by name.
func (c *Client) ListTopics(ctx context.Context) ([]TopicSummary, error) {
	var resp wire.ListTopicsResponse
	if err := c.do(ctx, request{req: wire.ListTopicsRequest{}, resp: &resp, resend: true}); err != nil {
		return nil, err
	}
	out := make([]TopicSummary, len(resp.Topics))
	for i, t := range resp.Topics {
		out[i] = TopicSummary{
			Name: t.Name, KeyspaceBits: t.Bits,
			ActiveRanges: int(t.ActiveRanges), Ranges: int(t.Ranges), Segments: int(t.Segments),
			Records: t.Records, Bytes: t.Bytes,
		}
	}
	return out, nil
}

func toRangeInfo(w *wire.RangeInfo) RangeInfo {
	r := RangeInfo{
		ID: w.ID, Start: w.Start, End: w.End, Active: w.Active, Parents: w.Parents,
		CreatedAt: msTime(w.CreatedAt), SealedAt: msTime(w.SealedAt),
		Segments: make([]SegmentInfo, len(w.Segments)), SegmentsOmitted: int(w.SegmentsOmitted),
	}
	for i, s := range w.Segments {
		r.Segments[i] = SegmentInfo{
			ID: s.ID, Active: s.Active, Base: s.Base, End: s.End, Records: s.Records, Bytes: s.Bytes,
			Replicas: s.Replicas, OpenedAt: msTime(s.OpenedAt), SealedAt: msTime(s.SealedAt),
			MaxExpiry: msTime(s.MaxExpiry),
		}
		for _, cp := range s.Copies {
			r.Segments[i].Copies = append(r.Segments[i].Copies, SegmentCopy{Node: "node-" + strconv.FormatUint(cp.Node, 10), State: cp.State.String()})
		}
	}
	return r
}

// DeleteTopic deletes a topic, its records and its groups' positions.
// Admin only.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	c.forgetRoutes(name)
	return c.do(ctx, request{req: wire.DeleteTopicRequest{Topic: str(name)}})
}

// SplitRange splits an active range of topic in two halves, online, and
// returns the two new ranges, lower half first. rangeID 0 picks the active
// range holding the most bytes. Admin only.
func (c *Client) SplitRange(ctx context.Context, topic string, rangeID uint64) ([]uint64, error) {
	var resp wire.SplitRangeResponse
	// In a cluster, not_owner names the node writing the range: only
	// that node can split it, so asking this one again is no use.
	err := c.do(ctx, request{req: wire.SplitRangeRequest{Topic: str(topic), Range: rangeID}, resp: &resp, stopOn: ErrNotOwner})
	return resp.Children, err
}

// MergeRanges merges two active buddy ranges (the halves of one block) of
// topic into one, online, and returns the new range. Admin only.
func (c *Client) MergeRanges(ctx context.Context, topic string, a, b uint64) (uint64, error) {
	var resp wire.MergeRangesResponse
	err := c.do(ctx, request{req: wire.MergeRangesRequest{Topic: str(topic), A: a, B: b}, resp: &resp, stopOn: ErrNotOwner})
	return resp.Child, err
}

// DescribeGroup returns group's committed position in topic and its lag.
func (c *Client) DescribeGroup(ctx context.Context, topic, group string) (GroupStatus, error) {
	var resp wire.DescribeGroupResponse
	_, err := c.doPick(ctx, func(cn *conn) (request, error) {
		req := wire.DescribeGroupRequest{Topic: str(topic), Group: str(group)}
		if cn.wire.groupSkips {
			req.Flags = wire.FlagSkips
		}
		return request{req: req, resp: &resp, resend: true}, nil
	})
	if err != nil {
		return GroupStatus{}, err
	}
	g := GroupStatus{
		Group: resp.Group, Lag: resp.Lag, Ranges: make([]RangeLag, len(resp.Ranges)),
		Skipped: resp.Skips.Count, SkippedBound: resp.Skips.Bound,
	}
	if resp.Cursor != nil {
		g.Cursor = *resp.Cursor
	}
	for i, rl := range resp.Ranges {
		g.Ranges[i] = RangeLag{Range: rl.Range, Lag: rl.Lag}
	}
	return g, nil
}

// ListGroups names the groups of topic, sorted.
func (c *Client) ListGroups(ctx context.Context, topic string) ([]string, error) {
	var resp wire.ListGroupsResponse
	err := c.do(ctx, request{req: wire.ListGroupsRequest{Topic: str(topic)}, resp: &resp, resend: true})
	return resp.Groups, err
}

// Status returns the node's summary.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var resp wire.StatusResponse
	if err := c.do(ctx, request{req: wire.StatusRequest{}, resp: &resp, resend: true}); err != nil {
		return Status{}, err
	}
	return Status{
		NodeID: resp.NodeID, Version: resp.Version, DataDir: resp.DataDir,
		Uptime: time.Duration(resp.UptimeMs) * time.Millisecond, Topics: int(resp.Topics),
		Records: resp.Records, Bytes: resp.Bytes,
	}, nil
}

// EndCursor returns a cursor positioned after everything topic holds now:
// fetching with it returns only records produced later.
func (c *Client) EndCursor(ctx context.Context, topic string) (string, error) {
	var resp wire.CursorResponse
	if err := c.do(ctx, request{req: wire.EndCursorRequest{Topic: &topic}, resp: &resp, resend: true}); err != nil {
		return "", err
	}
	if resp.Cursor == nil {
		return "", nil
	}
	return *resp.Cursor, nil
}

// msTime converts wire milliseconds; 0 means unset and gives the zero
// time.
func msTime(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}
