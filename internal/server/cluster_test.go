package server

import (
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// On a single node, cluster_status answers the node alone and
// cluster_remove and cluster_rebalance are not enabled; all need the
// admin permission.
func TestClusterKeysOnASingleNode(t *testing.T) {
	n := startAuthNode(t, broker.Config{NodeID: "node-7"}, Config{})
	admin := n.login(t, "admin", "admin123")
	var st wire.ClusterStatusResponse
	if err := st.Decode(admin.ok(2, &wire.ClusterStatusRequest{})); err != nil {
		t.Fatal(err)
	}
	if st.Node != 0 || st.Vnodes != 0 || len(st.Groups) != 0 || len(st.Nodes) != 1 ||
		st.Nodes[0].ID != 7 || !st.Nodes[0].Registered || st.Nodes[0].Liveness != "alive" {
		t.Fatalf("single-node cluster status: %+v", st)
	}
	admin.refused(3, &wire.ClusterRemoveRequest{Node: 2}, wire.ReasonNotEnabled)
	admin.refused(6, &wire.ClusterRebalanceRequest{}, wire.ReasonNotEnabled)
	admin.refused(7, &wire.ClusterRebalanceRequest{Apply: true}, wire.ReasonNotEnabled)

	producer := n.login(t, "producer", "producer123")
	producer.refused(4, &wire.ClusterStatusRequest{}, wire.ReasonPermissionDenied)
	producer.refused(5, &wire.ClusterRemoveRequest{Node: 2}, wire.ReasonPermissionDenied)
	producer.refused(8, &wire.ClusterRebalanceRequest{Apply: true}, wire.ReasonPermissionDenied)
}
