package broker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
)

// A reader's plan is kept across pages and taken afresh only when a read
// of its range runs dry, so a page may read a segment as active that was
// sealed meanwhile. This node's copy then has no replica state (the seal
// dropped it) but holds everything to the seal: it serves the read to
// the seal, with the other copies gone.
func TestClusterSealThePlanPredatesServedByThisCopy(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitQuorumSafe()
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	const topic = "stalelocal"
	tc.createEverywhere(tc.nodes[0], topic, 1)
	for i := range 3 {
		if _, err := n1.Produce(ctx, topic, []broker.Record{rec("k", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seg := activeSegment(t, n1, topic)
	eventually(t, 10*time.Second, "node 2 to serve the acknowledged records", func() error {
		if end, err := n2.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
			return fmt.Errorf("serves to %d, %v", end, err)
		}
		return nil
	})
	p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: topic, Max: 1})
	if err != nil || len(p.Records) != 1 {
		t.Fatalf("first page: %d records, %v", len(p.Records), err)
	}
	splitAndWait(t, tc, topic, seg, 3, n2)
	tc.stop(tc.nodes[2])
	tc.stop(tc.nodes[0])
	p, err = n2.Fetch(ctx, broker.FetchRequest{Topic: topic, Cursor: p.Cursor, Max: 10})
	if err != nil {
		t.Fatalf("a read of a sealed segment this node holds whole, its plan made while it was active: %v", err)
	}
	if got := values(p.Records); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("read %v; want [1 2]", got)
	}
}

// R3, the other way: a copy that answers no batches and cannot vouch
// for the end as the reader's plan has the segment (active, the copy a
// follower's) does say the end when the segment was sealed there since.
// The reader holds no copy (two replicas of three nodes); the copy left
// has not sealed its store (its fsyncs are held), so only the metadata
// says the segment ended: a reader caught up is answered an empty page,
// not metadata_unavailable.
func TestClusterSealThePlanPredatesEndsTheRead(t *testing.T) {
	gates := []*syncGate{newSyncGate(), newSyncGate(), newSyncGate()}
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		nd.replicas = 2
		nd.fs = vfs.NewFaulty(vfs.OS(), gates[nd.id-1].rule)
	})
	t.Cleanup(func() { // runs before the cluster closes
		for _, g := range gates {
			g.open()
		}
	})
	tc.waitQuorumSafe()
	ctx := t.Context()
	const topic = "staleremote"
	tc.createEverywhere(tc.nodes[0], topic, 1)
	seg, primary, follower, reader, p := readThreeThroughANonHolder(t, tc, topic)
	gates[follower.id-1].closed.Store(true) // the follower's copy stays unsealed in its store
	splitAndWait(t, tc, topic, seg, 3, reader.b, follower.b)
	tc.stop(primary)
	p, err := reader.b.Fetch(ctx, broker.FetchRequest{Topic: topic, Cursor: p.Cursor, Max: 10})
	if err != nil || len(p.Records) != 0 {
		t.Fatalf("a reader caught up on a segment sealed since its plan: %d records, %v; want an empty page", len(p.Records), err)
	}
}

// splitAndWait splits the range of active segment seg, which seals seg,
// and waits until each of bs has the seal at end in its metadata.
func splitAndWait(t *testing.T, tc *testCluster, topic string, seg broker.SegmentDescription, end uint64, bs ...*broker.Broker) {
	t.Helper()
	d, err := tc.nodes[0].b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	var rangeID uint64
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.ID == seg.ID {
				rangeID = r.ID
			}
		}
	}
	eventually(t, 20*time.Second, "the range to split", func() error {
		_, err := tc.nodes[0].b.SplitRange(t.Context(), topic, rangeID)
		return err
	})
	for _, b := range bs {
		eventually(t, 10*time.Second, "the seal to be applied", func() error {
			if got := sealedEnd(t, b, topic, seg.ID); got != end {
				return fmt.Errorf("sealed at %d", got)
			}
			return nil
		})
	}
}

// R3: the primary's "no such segment" means nothing of the segment is
// durable yet (its file is made a moment after the segment is
// registered), whatever a follower's copy answers: a follower answering
// nothing at its watermark does not turn it into metadata_unavailable.
// Here the primary's file is removed to make it answer so.
func TestClusterPrimaryNotFoundStandsOverAnEmptyFollower(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitQuorumSafe()
	ctx := t.Context()
	const topic = "primarynotfound"
	eventually(t, 20*time.Second, "create "+topic, func() error {
		return tc.nodes[0].b.CreateTopicReplicatedAs(ctx, broker.Identity{User: "admin"}, topic, 0, 1, 2)
	})
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("%s on node %d", topic, nd.id), func() error { return hasTopics(nd.b, topic) })
	}
	seg, primary, _, reader, p := readThreeThroughANonHolder(t, tc, topic)
	if err := primary.b.DeleteLocalFile(seg.ID); err != nil {
		t.Fatal(err)
	}
	p, err := reader.b.Fetch(ctx, broker.FetchRequest{Topic: topic, Cursor: p.Cursor, Max: 10})
	if err != nil || len(p.Records) != 0 {
		t.Fatalf("the primary has no file, a follower nothing past the reader: %d records, %v; want an empty page", len(p.Records), err)
	}
}

// readThreeThroughANonHolder produces three records into topic, whose
// active segment must have two replicas, waits until its follower serves
// them, and reads them through the third node, which holds no copy. It
// answers the segment, its primary, follower and reader, and the page.
func readThreeThroughANonHolder(t *testing.T, tc *testCluster, topic string) (seg broker.SegmentDescription, primary, follower, reader *clusterNode, p broker.Page) {
	t.Helper()
	ctx := t.Context()
	for i := range 3 {
		if _, err := tc.nodes[0].b.Produce(ctx, topic, []broker.Record{rec("k", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	seg = activeSegment(t, tc.nodes[0].b, topic)
	if len(seg.Replicas) != 2 {
		t.Fatalf("segment %d: replicas %v; want two", seg.ID, seg.Replicas)
	}
	primary, follower = nodeNamed(t, tc, seg.Replicas[0]), nodeNamed(t, tc, seg.Replicas[1])
	for _, nd := range tc.nodes {
		if nd != primary && nd != follower {
			reader = nd
		}
	}
	eventually(t, 10*time.Second, "the follower to serve the acknowledged records", func() error {
		if end, err := follower.b.ServedBound(seg.ID, ^uint64(0)); err != nil || end != 3 {
			return fmt.Errorf("serves to %d, %v", end, err)
		}
		return nil
	})
	p, err := reader.b.Fetch(ctx, broker.FetchRequest{Topic: topic, Max: 10})
	if err != nil || len(p.Records) != 3 {
		t.Fatalf("first page: %d records, %v", len(p.Records), err)
	}
	return seg, primary, follower, reader, p
}
