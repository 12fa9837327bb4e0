package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// R3: a node restarted with the freshest copy of an active segment's
// tail (its watermark forgotten) while the primary and the third copy
// are gone cannot say where the range ends: a read through it answers
// metadata_unavailable, the reason a reader waits on, not an empty page
// and not the reason of whichever copy it tried last.
func TestClusterRestartedTailHolderReadIsUnavailable(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitQuorumSafe()
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "restarttail", 1)
	for i := range 3 {
		if _, err := n1.Produce(ctx, "restarttail", []broker.Record{rec("k", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seg := activeSegment(t, n1, "restarttail")
	eventually(t, 10*time.Second, "node 2 to serve the acknowledged records", func() error {
		if end, err := n2.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
			return fmt.Errorf("serves to %d, %v", end, err)
		}
		return nil
	})
	tc.stop(tc.nodes[0])
	tc.stop(tc.nodes[2])
	n2.ForgetReplica(seg.ID)
	p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "restarttail", Max: 1000})
	if err == nil && len(p.Records) == 3 {
		return // the range failed over before the stops: its end is known
	}
	if err == nil {
		t.Fatalf("a read of a range whose end is unknown answered %d of 3 acknowledged records", len(p.Records))
	}
	if !errors.Is(err, broker.ErrMetadataUnavailable) {
		t.Fatalf("a read of a range whose end is unknown: %v, want metadata unavailable", err)
	}
}
