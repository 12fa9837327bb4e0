package broker_test

import (
	"fmt"
	"testing"
)

// A write acknowledged by a node must be visible to the next request on
// that node: a client that creates a topic through a node and then
// describes it, produces to it or logs in as a user it just created,
// through the same node, must not be told it does not exist. Apply
// returns once the group's leader applied the command; a follower's own
// replica may not have it yet, and every read is served from it.
func TestClusterFollowerReadsItsOwnMetadataWrites(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	createRetried(t, tc.nodes[0].b, inVnode0("warm"), 1)
	tc.waitVoters(3)
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	var follower *clusterNode
	for _, nd := range tc.nodes {
		if nd != leader {
			follower = nd
			break
		}
	}
	missed := 0
	const n = 30
	for i := range n {
		name := inVnode0(fmt.Sprintf("own-%d", i))
		if err := follower.b.CreateTopic(ctx, name, 0, 1); err != nil {
			t.Fatalf("create %s through node %d: %v", name, follower.id, err)
		}
		if _, err := follower.b.DescribeTopic(name); err != nil {
			missed++
		}
	}
	if missed > 0 {
		t.Fatalf("node %d (a follower of vnode-0, led by node %d) answered no such topic right after acknowledging its creation %d times of %d",
			follower.id, leader.id, missed, n)
	}
}
