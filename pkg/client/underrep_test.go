package client_test

import (
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
)

// A segment counts as under-replicated when a replica's node is not
// live (dead, left, or unknown to the answering node); the list stops at
// the limit, the counts do not.
func TestUnderReplicated(t *testing.T) {
	st := client.ClusterStatus{Node: 1, Nodes: []client.ClusterNode{
		{ID: 1, Liveness: "alive"}, {ID: 2, Liveness: "suspect"}, {ID: 3, Liveness: "dead"},
	}}
	seg := func(id uint64, active bool, replicas ...string) client.SegmentInfo {
		return client.SegmentInfo{ID: id, Active: active, Replicas: replicas}
	}
	topics := []client.TopicDescription{
		{Name: "a", Ranges: []client.RangeInfo{{ID: 1, Segments: []client.SegmentInfo{
			seg(10, false, "node-1", "node-2", "node-3"),
			seg(11, true, "node-2", "node-1"),
		}}}},
		{Name: "b", Ranges: []client.RangeInfo{{ID: 2, Segments: []client.SegmentInfo{
			seg(20, false, "node-3"),
			seg(21, false, "node-4", "node-1"),
			seg(22, true, "node-1", "node-2", "node-3"),
		}}}},
	}
	counts, listed := client.UnderReplicated(st, topics, 2)
	if len(counts) != 2 || counts[0] != (client.UnderReplicatedTopic{Topic: "a", Segments: 1}) ||
		counts[1] != (client.UnderReplicatedTopic{Topic: "b", Segments: 3}) {
		t.Fatalf("counts %+v, want a:1 b:3", counts)
	}
	if len(listed) != 2 || listed[0].Segment != 10 || listed[0].Live != 2 || listed[1].Segment != 20 || listed[1].Live != 0 {
		t.Fatalf("listed %+v, want segments 10 (2 live) and 20 (none live)", listed)
	}
}

// The primary is the first replica; a watermark is reported only for an
// active segment with more than one replica.
func TestSegmentPrimaryAndWatermark(t *testing.T) {
	s := client.SegmentInfo{Active: true, End: 42, Replicas: []string{"node-2", "node-1"}}
	if s.Primary() != "node-2" {
		t.Fatalf("primary %q", s.Primary())
	}
	if wm, ok := s.Watermark(); !ok || wm != 42 {
		t.Fatalf("watermark %d %v, want 42", wm, ok)
	}
	for _, o := range []client.SegmentInfo{
		{Active: false, End: 42, Replicas: []string{"node-2", "node-1"}},
		{Active: true, End: 42, Replicas: []string{"node-2"}},
		{Active: true, End: 42},
	} {
		if _, ok := o.Watermark(); ok {
			t.Fatalf("%+v reports a watermark", o)
		}
	}
	if (client.SegmentInfo{}).Primary() != "" {
		t.Fatal("a segment with no replicas names a primary")
	}
}
