package broker_test

// A node removed from the cluster by an operator (RemoveNode) is healed
// around at once: four nodes on loopback, a topic kept in three copies
// rolled into several small sealed segments, and a holder stopped and
// removed through another node. The dead-after grace is longer than the
// test, so only the removal can make its copies dead: every sealed
// segment it held comes back to three copies on the live nodes, byte for
// byte the same and whole against the seal, and every acknowledged
// record reads back once, in order, from every node. Started again on its
// old data directory, the removed node is refused by the cluster and does
// not run, so its stale copies cannot come back into any replica list.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

func TestClusterHealsTheSegmentsOfARemovedNode(t *testing.T) {
	hc := broker.HealConfig{DeadAfter: time.Hour, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour}
	tc := startHealCluster(t, 4, 2<<10, hc)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "removed", 1)
	want := produceSealed(t, n1.b, "removed", 60)
	sealed := sealedSegments(t, n1.b, "removed")
	if len(sealed) < 3 {
		t.Fatalf("%d sealed segments, want several", len(sealed))
	}
	victim, held := victimOf(sealed)
	gone := tc.node(victim)
	tc.stop(gone)

	// A removal slower than RemoveNode waits carries on: asked again, or
	// done once the registry no longer lists the node.
	eventually(t, 60*time.Second, "remove "+victim, func() error {
		err := n1.b.RemoveNode(t.Context(), gone.id)
		if err == nil {
			return nil
		}
		for _, n := range n1.b.ClusterStatus().Nodes {
			if n.ID == gone.id && n.Registered {
				return err
			}
		}
		return nil
	})
	// Produce goes on meanwhile; these records are acknowledged too.
	want = append(want, produceSealed(t, n1.b, "removed", 20)...)

	// A copy that stopped short of its seal is healed too, after the
	// others: the list may be back at three before it is whole.
	eventually(t, 60*time.Second, "every sealed segment "+victim+" held back at three whole replicas", func() error {
		for _, s := range sealedSegments(t, n1.b, "removed") {
			if !slices.Contains(held, s.ID) {
				continue
			}
			if len(s.Replicas) != 3 || slices.Contains(s.Replicas, victim) {
				return fmt.Errorf("segment %d has replicas %v", s.ID, s.Replicas)
			}
			if err := tc.copiesWhole(s); err != nil {
				return err
			}
		}
		return nil
	})
	for _, s := range sealedSegments(t, n1.b, "removed") {
		if slices.Contains(held, s.ID) {
			tc.checkCopiesWhole(s)
		}
	}
	for _, nd := range tc.nodes {
		if nd.b != nil {
			checkRead(t, nd.b, "removed", want)
		}
	}

	// Its old data directory started again: the cluster refuses the node.
	cfg := tc.config(gone, []string{n1.gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = hc
	err := tc.openConfig(gone, cfg)
	if err == nil {
		t.Fatalf("%s started again on its old data directory after its removal", victim)
	}
	if !strings.Contains(err.Error(), "removed") {
		t.Fatalf("%s started again: refused for another reason: %v", victim, err)
	}
	for _, s := range sealedSegments(t, n1.b, "removed") {
		if slices.Contains(s.Replicas, victim) {
			t.Fatalf("segment %d lists the removed %s: %v", s.ID, victim, s.Replicas)
		}
	}
	checkRead(t, n1.b, "removed", want)
}
