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

	// Asked for repair, the answer adds the section (and the node's
	// disk) after the same bytes.
	plain := admin.ok(9, &wire.ClusterStatusRequest{})
	withRepair := admin.ok(10, &wire.ClusterStatusRequest{Flags: wire.FlagRepair})
	var rs wire.ClusterStatusResponse
	if err := rs.Decode(withRepair); err != nil {
		t.Fatal(err)
	}
	if st.Repair != nil || rs.Repair == nil || rs.Nodes[0].Disk != "ok" || len(withRepair) <= len(plain) ||
		string(withRepair[:len(plain)]) != string(plain) {
		t.Fatalf("repair %+v, disk %q; %d bytes with repair, %d without", rs.Repair, rs.Nodes[0].Disk, len(withRepair), len(plain))
	}

	producer := n.login(t, "producer", "producer123")
	producer.refused(4, &wire.ClusterStatusRequest{}, wire.ReasonPermissionDenied)
	producer.refused(5, &wire.ClusterRemoveRequest{Node: 2}, wire.ReasonPermissionDenied)
	producer.refused(8, &wire.ClusterRebalanceRequest{Apply: true}, wire.ReasonPermissionDenied)
}

// The repair section lists at most maxRepairListed of each list, however
// many the broker hands over; the per-topic counts keep the total.
func TestClusterRepairListsAreCapped(t *testing.T) {
	var s broker.ClusterStatus
	s.UnderReplicated = []broker.UnderReplicatedTopic{{Topic: "t", Segments: 3 * maxRepairListed}}
	s.Heal = &broker.HealStatus{}
	for i := range 3 * maxRepairListed {
		s.UnderReplicatedSegments = append(s.UnderReplicatedSegments, broker.UnderReplicatedSegment{Topic: "t", Segment: uint64(i)})
		s.Heal.Damaged = append(s.Heal.Damaged, broker.DamagedSegment{Segment: uint64(i), Node: 1})
		s.Heal.Healing = append(s.Heal.Healing, broker.HealingSegment{Segment: uint64(i), Source: 1, Target: 2})
		s.Heal.Problems = append(s.Heal.Problems, broker.HealProblem{Segment: uint64(i), Problem: "lost"})
	}
	s.HealingBytes = map[uint64]uint64{0: 4096}
	r := clusterStatus(s, true).Repair
	if len(r.UnderReplicatedSegments) != maxRepairListed || len(r.Damaged) != maxRepairListed ||
		len(r.Healing) != maxRepairListed || len(r.Problems) != maxRepairListed {
		t.Fatalf("lists of %d, %d, %d, %d, want %d each", len(r.UnderReplicatedSegments), len(r.Damaged), len(r.Healing), len(r.Problems), maxRepairListed)
	}
	if r.UnderReplicated[0].Segments != 3*maxRepairListed || r.Healing[0].Bytes != 4096 || r.Healing[1].Bytes != 0 {
		t.Fatalf("counts %+v, healing %+v", r.UnderReplicated, r.Healing[:2])
	}
}
