package broker_test

// Splits and merges asked of a node that does not write the range: the
// node holds the range, has the writer seal its segment, and splits or
// merges it, while produces keep arriving.

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
)

// Node 1 writes the range and a producer keeps producing through it;
// node 3, which writes nothing of the topic, splits the range. The split
// succeeds, produces go on into the children, and every node reads every
// acked record once, in order per key.
func TestClusterSplitThroughANodeThatDoesNotWriteTheRange(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n3 := tc.nodes[0].b, tc.nodes[2].b
	tc.createEverywhere(tc.nodes[0], "splitanywhere", 1)
	if _, err := n1.Produce(ctx, "splitanywhere", []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n3, "splitanywhere", 1)
	_, routes, err := n3.Routes("splitanywhere")
	if err != nil || len(routes) != 1 {
		t.Fatalf("routes: %v, %v", routes, err)
	}

	keys := []string{"a", "b", "c", "d", "e", "f"}
	p := startPipeline(ctx, n1, "splitanywhere", keys)
	eventually(t, 30*time.Second, "produces through node 1 before the split", p.ackedAtLeast(300))
	children, err := splitRetrying(t, n3, "splitanywhere", routes[0].Range)
	if err != nil {
		p.finish(t)
		t.Fatalf("split through node 3: %v", err)
	}
	if len(children) != 2 {
		t.Fatalf("split into %v", children)
	}
	eventually(t, 30*time.Second, "produces through node 1 after the split", p.ackedAtLeast(p.ackedNow()+500))
	n := p.finish(t)
	for _, nd := range tc.nodes {
		p.checkKeyOrder(t, drain(t, nd.b, "splitanywhere"), n)
	}
	_, after, err := n1.Routes("splitanywhere")
	if err != nil || len(after) != 2 {
		t.Fatalf("routes after the split: %v, %v", after, err)
	}
}

// Two buddy ranges whose active segments are on two different nodes
// (each opened by the node that first produced to it) are merged through
// the third node while both keep taking produces through their writers.
func TestClusterMergeOfRangesWrittenOnTwoNodes(t *testing.T) {
	tc := startClusterWith(t, 3, unreplicated) // each range's segment on one node
	ctx := t.Context()
	n1, n2, n3 := tc.nodes[0].b, tc.nodes[1].b, tc.nodes[2].b
	tc.createEverywhere(tc.nodes[0], "mergeanywhere", 2)
	bits, routes, err := n1.Routes("mergeanywhere")
	if err != nil || len(routes) != 2 {
		t.Fatalf("routes: %v, %v", routes, err)
	}
	k0, k1 := string(keyIn(t, bits, routes[0])), string(keyIn(t, bits, routes[1]))
	if _, err := n1.Produce(ctx, "mergeanywhere", []broker.Record{rec(k0, "-1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Produce(ctx, "mergeanywhere", []broker.Record{rec(k1, "-2")}); err != nil {
		t.Fatal(err)
	}
	// Node 3 sees both opens once it has applied them.
	eventually(t, 10*time.Second, "node 3 sees a segment on node-1 and one on node-2", func() error {
		d, err := n3.DescribeTopic("mergeanywhere")
		if err != nil {
			return err
		}
		var writers []string
		for _, r := range d.Ranges {
			for _, s := range r.Segments {
				writers = append(writers, s.Replicas...)
			}
		}
		slices.Sort(writers)
		if !slices.Equal(writers, []string{"node-1", "node-2"}) {
			return fmt.Errorf("the ranges' segments are on %v", writers)
		}
		return nil
	})

	p1 := startPipeline(ctx, n1, "mergeanywhere", []string{k0})
	p2 := startPipeline(ctx, n2, "mergeanywhere", []string{k1})
	eventually(t, 30*time.Second, "produces before the merge", p1.ackedAtLeast(200))
	eventually(t, 30*time.Second, "produces before the merge", p2.ackedAtLeast(200))
	child, err := mergeRetrying(t, n3, "mergeanywhere", routes[0].Range, routes[1].Range)
	if err != nil {
		p1.finish(t)
		p2.finish(t)
		t.Fatalf("merge through node 3: %v", err)
	}
	eventually(t, 30*time.Second, "produces after the merge", p1.ackedAtLeast(p1.ackedNow()+300))
	eventually(t, 30*time.Second, "produces after the merge", p2.ackedAtLeast(p2.ackedNow()+300))
	n1made, n2made := p1.finish(t), p2.finish(t)
	for _, nd := range tc.nodes {
		recs := drain(t, nd.b, "mergeanywhere")
		p1.checkKeyOrder(t, only(recs, k0), n1made)
		p2.checkKeyOrder(t, only(recs, k1), n2made)
	}
	_, after, err := n2.Routes("mergeanywhere")
	if err != nil || len(after) != 1 || after[0].Range != child {
		t.Fatalf("routes after the merge: %v, %v; want the child %d", after, err, child)
	}
}

// splitRetrying splits through b, trying again while the answer is one a
// client is told to retry (a produce opened a segment on another node in
// the instant before the hold landed there).
func splitRetrying(t *testing.T, b *broker.Broker, topic string, rangeID uint64) ([]uint64, error) {
	t.Helper()
	var err error
	for range 10 {
		var ids []uint64
		ids, err = b.SplitRange(t.Context(), topic, rangeID)
		if !retriableChange(err) {
			return ids, err
		}
		t.Logf("split: %v; again", err)
	}
	return nil, err
}

func mergeRetrying(t *testing.T, b *broker.Broker, topic string, a, c uint64) (uint64, error) {
	t.Helper()
	var err error
	for range 10 {
		var id uint64
		id, err = b.MergeRanges(t.Context(), topic, a, c)
		if !retriableChange(err) {
			return id, err
		}
		t.Logf("merge: %v; again", err)
	}
	return 0, err
}

func retriableChange(err error) bool {
	return errors.Is(err, metadata.ErrActiveSegmentExists) || errors.Is(err, broker.ErrRetry)
}

func only(recs []broker.Record, key string) []broker.Record {
	var out []broker.Record
	for _, r := range recs {
		if string(r.Key) == key {
			out = append(out, r)
		}
	}
	return out
}
