package broker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// With five nodes, a dead node's segments may be healed onto any of two
// spare nodes, and one of them is stopped and restarted while the heals
// run (its fills cut off mid-copy or mid-record). Whatever each node
// decided, the end state holds: every segment back at three listed
// copies that verify whole, and no node keeps a copy no list names.
func TestClusterHealsAroundATargetRestartedMidHealWithoutOrphans(t *testing.T) {
	healAroundARestartedSpare(t, "orphans", true)
}

// A node that restarts right after another died, before any heal began
// and well within the dead node's dead-after grace, must not leave the
// dead node's sealed copies unhealed. The restarted node joins gossip
// after the death, so it learns of the dead node only from the others'
// record of it; a node it never heard of counts as holding its copies,
// and where the restarted node is the planned target no node would ever
// take the new copy.
func TestClusterHealsADeadNodesSegmentsWhenAnotherRestartsAtOnce(t *testing.T) {
	healAroundARestartedSpare(t, "prompt", false)
}

// healAroundARestartedSpare stops a holder of topic's first sealed
// segment for good and restarts a node that holds none of it: once a
// heal is under way or recorded when midHeal is set, at once otherwise.
// Every sealed segment must get back to three whole copies without the
// dead node, no node may keep a copy no list names, and every record
// stays readable on every node.
func healAroundARestartedSpare(t *testing.T, topic string, midHeal bool) {
	hc := broker.HealConfig{DeadAfter: time.Second, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour}
	tc := startHealCluster(t, 5, 2<<10, hc)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, topic, 1)
	want := produceSealed(t, n1.b, topic, 60)
	sealed := sealedSegments(t, n1.b, topic)
	var victim string
	for _, name := range sealed[0].Replicas {
		if name != "node-1" {
			victim = name
			break
		}
	}
	var spare *clusterNode
	for _, nd := range tc.nodes[1:] {
		if !slices.Contains(sealed[0].Replicas, fmt.Sprintf("node-%d", nd.id)) {
			spare = nd
			break
		}
	}
	tc.stop(tc.node(victim))
	if midHeal {
		// Heals of 2 KiB segments can start and end between two looks at
		// the status: one already recorded counts too, and the restart
		// then cuts off the heals still running, if any.
		eventually(t, 30*time.Second, "a heal under way or recorded", func() error {
			for _, nd := range tc.nodes {
				if nd.b != nil {
					if h := nd.b.ClusterStatus().Heal; h != nil && len(h.Healing) > 0 {
						return nil
					}
				}
			}
			for _, s := range sealedSegments(t, n1.b, topic) {
				if s.ID == sealed[0].ID && len(s.Replicas) == 3 && !slices.Contains(s.Replicas, victim) {
					return nil
				}
			}
			return fmt.Errorf("no heal under way or recorded")
		})
	}
	tc.stop(spare)
	cfg := tc.config(spare, []string{n1.gossip})
	cfg.SegmentMaxBytes = 2 << 10
	cfg.Cluster.Heal = hc
	tc.openHeal(spare, cfg)

	eventually(t, 90*time.Second, "every segment at three whole copies and no orphan copy", func() error {
		for _, s := range sealedSegments(t, n1.b, topic) {
			if len(s.Replicas) != 3 || slices.Contains(s.Replicas, victim) {
				return fmt.Errorf("segment %d: replicas %v (%s down); heal problems seen: %v", s.ID, s.Replicas, victim, healProblems(tc))
			}
			if err := tc.copiesWhole(s); err != nil {
				return err
			}
			for _, nd := range tc.nodes {
				name := fmt.Sprintf("node-%d", nd.id)
				if nd.b != nil && nd.b.HasLocalCopy(s.ID) && !slices.Contains(s.Replicas, name) {
					return fmt.Errorf("%s keeps an unlisted copy of segment %d", name, s.ID)
				}
			}
		}
		return nil
	})
	for _, nd := range tc.nodes {
		if nd.b != nil {
			checkRead(t, nd.b, topic, want)
		}
	}
}
