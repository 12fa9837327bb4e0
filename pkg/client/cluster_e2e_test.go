package client_test

import (
	"errors"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// A single node answers ClusterStatus with itself alone and refuses
// RemoveNode and Rebalance as not enabled; all are for administrators.
func TestClusterStatusOfASingleNode(t *testing.T) {
	n := clienttest.Start(t)
	ctx := t.Context()
	admin := n.Client(t, "admin", "admin123")
	st, err := admin.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != 0 || st.Vnodes != 0 || len(st.Groups) != 0 || len(st.Nodes) != 1 ||
		st.Nodes[0].ID != 1 || !st.Nodes[0].Registered || st.Nodes[0].Liveness != "alive" {
		t.Fatalf("status: %+v", st)
	}
	// The node reports repair (nothing to repair, no copies to scrub)
	// and its disk.
	if st.Repair == nil || st.Repair.UnderReplicatedTotal != 0 || len(st.Repair.Damaged) != 0 || st.Nodes[0].Disk != "ok" {
		t.Fatalf("repair %+v, disk %q", st.Repair, st.Nodes[0].Disk)
	}
	if err := admin.CreateTopic(ctx, "alone"); err != nil {
		t.Fatal(err)
	}
	d, err := admin.DescribeTopic(ctx, "alone")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.Copies != nil {
				t.Fatalf("a single node describes segment %d's copies as %+v", s.ID, s.Copies)
			}
		}
	}
	if err := admin.RemoveNode(ctx, 2); !errors.Is(err, client.ErrNotEnabled) {
		t.Fatalf("RemoveNode on a single node: %v, want not_enabled", err)
	}
	for _, apply := range []bool{false, true} {
		if _, err := admin.Rebalance(ctx, apply); !errors.Is(err, client.ErrNotEnabled) {
			t.Fatalf("Rebalance(apply %v) on a single node: %v, want not_enabled", apply, err)
		}
	}
	producer := n.Client(t, "producer", "producer123")
	if _, err := producer.Rebalance(ctx, false); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("Rebalance as a producer: %v, want permission_denied", err)
	}
	if _, err := producer.ClusterStatus(ctx); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("ClusterStatus as a producer: %v, want permission_denied", err)
	}
}
