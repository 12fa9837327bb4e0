package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// Removing a node id the cluster never registered (a typo: 33 for 3)
// must be refused, not reported done: the operator and the audit log
// would otherwise record a removal that did not happen, while the node
// meant stays in every group.
func TestClusterRemoveOfAnUnknownNodeIsRefused(t *testing.T) {
	cfg := broker.Config{DataDir: t.TempDir(), Logger: quietLogger(), Cluster: &broker.ClusterConfig{
		NodeID: 1, PeerListen: "127.0.0.1:0", GossipListen: "127.0.0.1:0", Vnodes: 2,
		TickInterval: 20 * time.Millisecond, MetadataTimeout: 2 * time.Second,
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	createRetried(t, b, "t", 1)
	if err := b.RemoveNode(ctx, 33); err == nil {
		t.Fatalf("removing node 33, which was never registered, answered success; status: %+v", b.ClusterStatus().Nodes)
	}
}

// A single node answers cluster_status with itself. Its id comes from
// Config.NodeID, which a single node may name freely: a name that is not
// "node-<n>" must not turn into node 0, the id that means "no node".
func TestSingleNodeClusterStatusNamesItself(t *testing.T) {
	b, err := broker.Open(t.Context(), broker.Config{DataDir: t.TempDir(), Logger: quietLogger(), NodeID: "edge-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := b.ClusterStatus()
	if len(st.Nodes) != 1 || st.Nodes[0].ID == 0 {
		t.Fatalf("single node %q in its cluster status: %+v", "edge-a", st)
	}
}
