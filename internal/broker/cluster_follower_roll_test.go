package broker_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/replica"
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
	droppedNotStored(t, h, drainEventually(t, n1.b, topic, h))
}

// droppedNotStored fails the test if a value whose produce was answered
// with the primary's drop (retry: a failover the primary ran itself
// sealed at its commit watermark) was stored all the same: a client
// retrying it would store it twice.
func droppedNotStored(t *testing.T, h *history, recs []broker.Record) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := 0
	for _, r := range recs {
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			continue
		}
		if e := h.failed[v]; e != nil && strings.Contains(e.Error(), replica.ErrDropped.Error()) {
			t.Fatalf("value %d was answered %v and stored all the same", v, e)
		}
	}
	for _, e := range h.failed {
		if strings.Contains(e.Error(), replica.ErrDropped.Error()) {
			dropped++
		}
	}
	t.Logf("%d produces answered with the primary's drop, none stored", dropped)
}

func allOf(names []string, ok func(string) bool) bool {
	for _, n := range names {
		if !ok(n) {
			return false
		}
	}
	return true
}

// Many ranges, two replicas each, led by one node: its follower on half
// of them stops, and every one of those ranges is rolled onto live nodes
// within followerRollBound, not maxSweepFailovers per membership event
// or 5-second tick (32 ranges would take about 40 s that way).
func TestClusterManyRangesRollOffAStoppedFollowerTogether(t *testing.T) {
	const topic, ranges = "lost-follower-many", 64
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1 := tc.nodes[0]
	admin := broker.Identity{User: "admin", Perms: []string{"admin"}}
	eventually(t, 20*time.Second, "create "+topic, func() error {
		return n1.b.CreateTopicReplicatedAs(ctx, admin, topic, 0, ranges, 2)
	})
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("%s on node %d", topic, nd.id), func() error { return hasTopics(nd.b, topic) })
	}
	var recs []broker.Record
	for i := range 4000 {
		recs = append(recs, rec(fmt.Sprintf("k%d", i), "-1"))
	}
	eventually(t, 20*time.Second, "a record in every range", func() error {
		_, err := n1.b.Produce(ctx, topic, recs)
		return err
	})
	tc.waitVotersWithin(3, 3)
	onNode3 := activeOn(t, n1.b, topic, "node-3")
	if len(onNode3) < 3*4 {
		t.Fatalf("node 3 follows %d of %d ranges: too few to tell a sweep per tick from one that goes on", len(onNode3), ranges)
	}

	stopping := time.Now()
	tc.stop(tc.nodes[2])
	eventually(t, followerRollBound, fmt.Sprintf("the %d ranges node 3 followed rolled", len(onNode3)), func() error {
		if left := activeOn(t, n1.b, topic, "node-3"); len(left) > 0 {
			return fmt.Errorf("%d ranges still write to node 3", len(left))
		}
		_, err := n1.b.Produce(ctx, topic, recs)
		return err
	})
	t.Logf("%d ranges rolled, and a record acknowledged in each, %s after node 3 began to stop",
		len(onNode3), time.Since(stopping).Round(time.Millisecond))
}

// activeOn lists the ranges of topic whose active segment lists node.
func activeOn(t *testing.T, b *broker.Broker, topic, node string) []uint64 {
	t.Helper()
	d, err := b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.Active && slices.Contains(s.Replicas, node) {
				out = append(out, s.ID)
			}
		}
	}
	return out
}

// A segment whose successor cannot be placed keeps its replicas: with a
// hard spread over three zones and the only node of one zone stopped,
// a roll would find no placement and leave a range that still commits
// on two of its three copies with no active segment at all. Produces
// through the primary go on being acknowledged into the same segment.
func TestClusterFollowerLossWithoutAPlaceableSuccessorKeepsTheSegment(t *testing.T) {
	zones := map[uint64]string{1: "a", 2: "b", 3: "c", 4: "a"}
	tc := startClusterConfigured(t, 4, func(cfg *broker.Config) {
		cfg.Cluster.Attrs = map[string]string{"zone": zones[cfg.Cluster.NodeID]}
	})
	n1 := tc.nodes[0]
	definePolicyEverywhere(t, tc, "zones", map[string]metadata.PolicyValue{
		metadata.FieldSpreadBy:   {Str: "zone", IsStr: true},
		metadata.FieldMinDomains: {Int: 3},
		metadata.FieldPlacement:  {Str: "hard", IsStr: true},
	})
	admin := broker.Identity{User: "admin", Perms: []string{"admin"}}
	const topic = "zoned"
	eventually(t, 20*time.Second, "create "+topic, func() error {
		return n1.b.CreateTopicWithPolicyAs(t.Context(), admin, topic, 0, 1, 3, "zones")
	})
	eventually(t, 20*time.Second, "the first produce", func() error {
		_, err := n1.b.Produce(t.Context(), topic, []broker.Record{rec("k", "-1")})
		return err
	})
	seg := activeSegment(t, n1.b, topic)
	if !slices.Equal(seg.Replicas, []string{"node-1", "node-2", "node-3"}) && !slices.Equal(seg.Replicas, []string{"node-1", "node-3", "node-2"}) {
		t.Fatalf("replicas %v, want node-1 with the zone b and zone c nodes", seg.Replicas)
	}
	tc.waitVotersWithin(3, 4)

	tc.stop(tc.nodes[2]) // zone c's only node
	eventually(t, 30*time.Second, "node 1 sees node 3 down", func() error {
		for _, n := range n1.b.ClusterStatus().Nodes {
			if n.ID == 3 && (n.Liveness == "alive" || n.Liveness == "suspect") {
				return fmt.Errorf("node 3 is %s", n.Liveness)
			}
		}
		return nil
	})
	// A roll would follow the membership event at once; five seconds
	// cover it and the next sweep tick.
	for deadline, i := time.Now().Add(6*time.Second), 0; time.Now().Before(deadline); i++ {
		if _, err := n1.b.Produce(t.Context(), topic, []broker.Record{rec("k", strconv.Itoa(i))}); err != nil {
			t.Fatalf("produce %d after node 3 stopped: %v", i, err)
		}
	}
	if s := activeSegment(t, n1.b, topic); s.ID != seg.ID {
		t.Fatalf("the range rolled to %+v, which its placement cannot hold", s)
	}
}
