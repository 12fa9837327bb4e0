package broker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// followerRollBound is how long after a follower stops its range's
// primary may take to commit again: membership learning of the stop,
// the roll (one metadata timeout at most) and the successor's open, with
// room for a loaded machine. Without the roll, nothing commits before
// the segment fills (64 MiB here).
const followerRollBound = 20 * time.Second

// The only follower of a topic of two replicas on three nodes stops, or
// one follower of a topic of three replicas on four: the primary rolls
// its active segment off it at once, sealed with every acknowledged
// record, and produces through the primary are acknowledged within
// followerRollBound of the stop, into a successor with the topic's
// factor of replicas on live nodes. Every acknowledged record reads back
// once, in order per key, through the primary and another live node.
// (With three replicas on three nodes a roll gains nothing and none
// happens: TestClusterReplicatedFollowerStops.)
func TestClusterActiveSegmentRollsOffAStoppedFollower(t *testing.T) {
	for _, sh := range []struct{ nodes, replicas int }{{3, 2}, {4, 3}} {
		t.Run(fmt.Sprintf("%d nodes, %d replicas", sh.nodes, sh.replicas), func(t *testing.T) {
			rollOffStoppedFollower(t, sh.nodes, sh.replicas)
		})
	}
}

func rollOffStoppedFollower(t *testing.T, nodes, replicas int) {
	tc := startCluster(t, nodes)
	ctx := t.Context()
	n1 := tc.nodes[0]
	admin := broker.Identity{User: "admin", Perms: []string{"admin"}}
	const topic = "lost-follower"
	eventually(t, 20*time.Second, "create "+topic, func() error {
		return n1.b.CreateTopicReplicatedAs(ctx, admin, topic, 0, 1, replicas)
	})
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("%s on node %d", topic, nd.id), func() error { return hasTopics(nd.b, topic) })
	}
	if _, err := n1.b.Produce(ctx, topic, []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	old := activeSegment(t, n1.b, topic)
	if len(old.Replicas) != replicas || old.Replicas[0] != "node-1" {
		t.Fatalf("replicas %v, want %d led by node-1", old.Replicas, replicas)
	}
	tc.waitVotersWithin(3, nodes)
	// The stopped follower is old's last replica; other is a live node.
	var follower, other *clusterNode
	var live []string
	for _, nd := range tc.nodes {
		name := fmt.Sprintf("node-%d", nd.id)
		switch {
		case name == old.Replicas[len(old.Replicas)-1]:
			follower = nd
			continue
		case nd != n1 && other == nil:
			other = nd
		}
		live = append(live, name)
	}

	h := produceLoop(ctx, n1.b, topic, replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the stop", h.ackedAtLeast(200))
	// Every record acknowledged before the stop began is in old: no
	// other roll is due.
	stopping, before := time.Now(), h.ackedCount()
	tc.stop(follower)
	eventually(t, followerRollBound-time.Since(stopping), "the roll, and produces after the follower stopped", func() error {
		s, err := findActive(n1.b, topic)
		if err != nil {
			return err
		}
		if s.ID == old.ID {
			return fmt.Errorf("segment %d is still active", s.ID)
		}
		return h.ackedAtLeast(before + 200)()
	})
	t.Logf("rolled and 200 more acknowledged %s after the follower began to stop", time.Since(stopping).Round(time.Millisecond))
	rolled := h.ackedCount()
	eventually(t, followerRollBound, "produces into the successor", h.ackedAtLeast(rolled+100))
	h.finish(t)

	d, err := n1.b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Ranges[0].Segments {
		if s.ID == old.ID && (s.Active || s.End < uint64(before+1)) {
			t.Fatalf("the stopped follower's segment: %+v, want sealed past the %d records acknowledged before the stop", s, before+1)
		}
	}
	seg := activeSegment(t, n1.b, topic)
	onLive := func(name string) bool { return slices.Contains(live, name) }
	if seg.ID == old.ID || len(seg.Replicas) != replicas || !allOf(seg.Replicas, onLive) {
		t.Fatalf("after the stop the range is written to %+v (was %+v), want %d replicas on %v", seg, old, replicas, live)
	}
	sameHistory(t, h, topic, other, n1)
}

func allOf(names []string, ok func(string) bool) bool {
	for _, n := range names {
		if !ok(n) {
			return false
		}
	}
	return true
}
