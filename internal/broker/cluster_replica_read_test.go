package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/storage"
)

// R3: a copy of an active replicated segment that does not know its
// commit watermark (its node restarted and the primary is gone) refuses
// another node's read as metadata_unavailable. Not found would tell the
// reader nothing in the segment is durable yet: an empty page although
// acknowledged records are there.
func TestClusterReplicatedCopyWithoutWatermarkRefusesReads(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitQuorumSafe()
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "unknownwm", 1)
	for i := range 3 {
		if _, err := n1.Produce(ctx, "unknownwm", []broker.Record{rec("k", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seg := activeSegment(t, n1, "unknownwm")
	eventually(t, 10*time.Second, "node 2 to serve the acknowledged records", func() error {
		if end, err := n2.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
			return fmt.Errorf("serves to %d, %v", end, err)
		}
		return nil
	})
	tc.stop(tc.nodes[0])
	n2.ForgetReplica(seg.ID)
	end, err := n2.ServedBound(seg.ID, ^uint64(0))
	if err == nil && sealedEnd(t, n2, "unknownwm", seg.ID) == 3 && end == 3 {
		// The stopped primary left the cluster and the idle-range sweep
		// failed its segment over first: sealed at 3, served to its seal.
		return
	}
	if errors.Is(err, storage.ErrNotFound) || !errors.Is(err, broker.ErrMetadataUnavailable) {
		t.Fatalf("a copy without a watermark serves to %d, %v; want metadata unavailable", end, err)
	}
}

// sealedEnd is the end of segment id of topic when b's metadata has it
// sealed, else 0.
func sealedEnd(t *testing.T, b *broker.Broker, topic string, id uint64) uint64 {
	t.Helper()
	for _, s := range sealedSegments(t, b, topic) {
		if s.ID == id {
			return s.End
		}
	}
	return 0
}

// R3: a read of an active replicated segment that no copy can serve (the
// primary's and this node's replica state gone, as after restarts, the
// third copy's file missing) fails with metadata_unavailable. It must
// not come back as an empty page: "not found" from a copy other than
// the primary does not mean nothing in the segment is durable.
func TestClusterReplicatedReadWithNoServingCopyIsUnavailable(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2, n3 := tc.nodes[0].b, tc.nodes[1].b, tc.nodes[2].b
	tc.createEverywhere(tc.nodes[0], "noserve", 1)
	for i := range 3 {
		if _, err := n1.Produce(ctx, "noserve", []broker.Record{rec("k", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seg := activeSegment(t, n1, "noserve")
	for _, b := range []*broker.Broker{n2, n3} {
		eventually(t, 10*time.Second, "the followers to serve the acknowledged records", func() error {
			if end, err := b.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
				return fmt.Errorf("serves to %d, %v", end, err)
			}
			return nil
		})
	}
	n1.ForgetReplica(seg.ID)
	n2.ForgetReplica(seg.ID)
	if err := n3.DeleteLocalFile(seg.ID); err != nil {
		t.Fatal(err)
	}
	p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "noserve", Max: 1000})
	if err == nil {
		t.Fatalf("a read no copy can serve answered %d records and no error", len(p.Records))
	}
	if !errors.Is(err, broker.ErrMetadataUnavailable) {
		t.Fatalf("a read no copy can serve: %v, want metadata unavailable", err)
	}
}
