package broker_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// The primary of an idle range stops: with nobody producing, membership
// declaring it gone is enough for the range to fail over, its segment
// sealed past every acknowledged record (W6) and a successor opened on a
// live primary; both survivors read everything back.
func TestClusterIdleRangeFailsOverWithoutAProducer(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "idle", 1)
	var want []string
	for i := range 20 {
		v := strconv.Itoa(i)
		if _, err := n1.Produce(ctx, "idle", []broker.Record{rec(replicaKeys[i%len(replicaKeys)], v)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	old := activeSegment(t, n1, "idle")
	if old.Replicas[0] != "node-1" || len(old.Replicas) != 3 || old.Primary != "node-1" {
		t.Fatalf("segment %+v, want three replicas led by node-1", old)
	}
	if !old.WatermarkKnown || old.Watermark != uint64(len(want)) {
		t.Fatalf("the primary describes watermark %d (known %v), want %d", old.Watermark, old.WatermarkKnown, len(want))
	}
	if st := n1.ClusterStatus(); len(st.UnderReplicated) != 0 {
		t.Fatalf("under-replicated with every node up: %+v", st.UnderReplicated)
	}
	tc.waitVoters(3)
	tc.stop(tc.nodes[0])

	n2, n3 := tc.nodes[1].b, tc.nodes[2].b
	var moved broker.SegmentDescription
	eventually(t, 60*time.Second, "the idle range's head on a live primary", func() error {
		d, err := n3.DescribeTopic("idle")
		if err != nil {
			return err
		}
		for _, s := range d.Ranges[0].Segments {
			if s.ID == old.ID && s.Active {
				return fmt.Errorf("segment %d, led by the stopped node, is still active", old.ID)
			}
			if s.Active {
				moved = s
			}
		}
		if moved.ID == 0 {
			return fmt.Errorf("no successor open yet")
		}
		return nil
	})
	if moved.Replicas[0] == "node-1" || moved.Base < uint64(len(want)) {
		t.Fatalf("successor %+v: want a live primary and a base past the %d acknowledged records", moved, len(want))
	}
	// Both segments have a copy on the stopped node, or were placed on
	// the two live ones: each has fewer live replicas than the factor 3.
	// This node's membership may learn of the stopped node a moment after
	// the node that ran the failover did: until then the old segment's
	// copies all look live here.
	var st broker.ClusterStatus
	eventually(t, 30*time.Second, "both segments listed as under-replicated", func() error {
		st = n3.ClusterStatus()
		if len(st.UnderReplicated) != 1 || st.UnderReplicated[0].Topic != "idle" || st.UnderReplicated[0].Segments != 2 {
			return fmt.Errorf("under-replicated topics %+v, want idle with 2 segments", st.UnderReplicated)
		}
		return nil
	})
	for _, u := range st.UnderReplicatedSegments {
		if u.Live >= u.Factor || u.Factor != 3 {
			t.Fatalf("listed as under-replicated: %+v", u)
		}
	}
	for _, b := range []*broker.Broker{n2, n3} {
		if got := values(readAll(t, b, "idle", len(want))); !slices.Equal(got, want) {
			t.Fatalf("read back %v, want %v", got, want)
		}
	}
}
