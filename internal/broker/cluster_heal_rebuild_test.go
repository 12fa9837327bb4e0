package broker_test

// A damaged holder rebuilding its own copy, driven step by step with the
// heal and scrub loops idle: it goes on only once the metadata records
// the damage, sets the old file aside, and never deletes a copy the list
// still names, even when the rebuild fails.

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// idleHeal leaves the heal and scrub loops idle for a test's length, so
// the test alone starts rebuilds.
var idleHeal = broker.HealConfig{DeadAfter: time.Hour, Interval: time.Hour, ScrubInterval: time.Hour}

// rebuildSetup is a three-node cluster with one sealed segment of topic
// held whole by all three, and the holder that will rebuild: the last
// listed.
func rebuildSetup(t *testing.T, topic string) (*testCluster, broker.SegmentDescription, *clusterNode, []string) {
	t.Helper()
	tc := startHealCluster(t, 3, 2<<10, idleHeal)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, topic, 1)
	want := produceSealed(t, n1.b, topic, 40)
	seg := tc.wholeSealed(n1.b, topic)
	return tc, seg, tc.node(seg.Replicas[2]), want
}

// recordDamaged records node's copy of seg damaged and waits until
// every node's metadata shows it.
func (tc *testCluster) recordDamaged(seg broker.SegmentDescription, node uint64) {
	t := tc.t
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("record node %d's copy damaged", node), func() error {
		return tc.nodes[0].b.RecordCopyDamaged(t.Context(), seg.ID, node)
	})
	for _, nd := range tc.nodes {
		eventually(t, 20*time.Second, fmt.Sprintf("node %d sees the damage", nd.id), func() error {
			if !slices.Contains(damagedOn(nd.b.ClusterStatus().Heal, node), seg.ID) {
				return fmt.Errorf("damaged copies %+v", nd.b.ClusterStatus().Heal)
			}
			return nil
		})
	}
}

// waitFillDone waits until nd fills no copy of id.
func waitFillDone(t *testing.T, nd *clusterNode, id uint64) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("node %d's fill of segment %d ends", nd.id, id), func() error {
		if nd.b.HealFilling(id) {
			return fmt.Errorf("still filling")
		}
		return nil
	})
}

func TestClusterHealRebuildGoesOnOnlyOnceTheDamageIsRecorded(t *testing.T) {
	tc, seg, bad, want := rebuildSetup(t, "gate")
	before, err := os.ReadFile(bad.b.SegmentLogPath(seg.ID))
	if err != nil {
		t.Fatal(err)
	}
	source := tc.node(seg.Replicas[0]).id
	if bad.b.StartRebuild(seg.ID, source) {
		t.Fatalf("node %d started a rebuild of a copy the metadata does not record damaged", bad.id)
	}
	if q := bad.b.QuarantinedCopies(seg.ID); len(q) != 0 {
		t.Fatalf("a copy set aside without a recorded damage: %v", q)
	}
	if now, err := os.ReadFile(bad.b.SegmentLogPath(seg.ID)); err != nil || !bytes.Equal(now, before) {
		t.Fatalf("node %d's copy changed without a recorded damage (%v)", bad.id, err)
	}

	tc.recordDamaged(seg, bad.id)
	if !bad.b.StartRebuild(seg.ID, source) {
		t.Fatalf("node %d did not rebuild a copy the metadata records damaged", bad.id)
	}
	waitFillDone(t, bad, seg.ID)
	eventually(t, 20*time.Second, "the rebuilt copy listed, undamaged, on every node", func() error {
		for _, nd := range tc.nodes {
			for _, s := range sealedSegments(t, nd.b, "gate") {
				if s.ID == seg.ID && (len(s.Replicas) != 3 || !slices.Contains(s.Replicas, fmt.Sprintf("node-%d", bad.id))) {
					return fmt.Errorf("node %d sees replicas %v", nd.id, s.Replicas)
				}
			}
			if slices.Contains(damagedOn(nd.b.ClusterStatus().Heal, bad.id), seg.ID) {
				return fmt.Errorf("node %d still reports the copy damaged", nd.id)
			}
		}
		return nil
	})
	tc.checkCopiesWhole(seg)
	if q := bad.b.QuarantinedCopies(seg.ID); len(q) != 1 {
		t.Fatalf("quarantined copies %v, want the one set aside", q)
	}
	for _, nd := range tc.nodes {
		checkRead(t, nd.b, "gate", want)
	}
}

func TestClusterHealFailedRebuildKeepsTheCopyTheListNames(t *testing.T) {
	tc, seg, bad, want := rebuildSetup(t, "failed")
	tc.recordDamaged(seg, bad.id)
	// The source's copy is recorded damaged too, so it refuses the copy
	// calls and the rebuild fails after the old file was set aside.
	refusing, healthy := tc.node(seg.Replicas[0]), tc.node(seg.Replicas[1])
	tc.recordDamaged(seg, refusing.id)
	if !bad.b.StartRebuild(seg.ID, refusing.id) {
		t.Fatalf("node %d did not rebuild a copy the metadata records damaged", bad.id)
	}
	waitFillDone(t, bad, seg.ID)
	if !bad.b.HasLocalCopy(seg.ID) {
		t.Fatalf("node %d deleted its new copy of segment %d while the list names it", bad.id, seg.ID)
	}
	if q := bad.b.QuarantinedCopies(seg.ID); len(q) != 1 {
		t.Fatalf("quarantined copies %v, want the one set aside", q)
	}
	for _, s := range sealedSegments(t, tc.nodes[0].b, "failed") {
		if s.ID == seg.ID && !slices.Equal(s.Replicas, seg.Replicas) {
			t.Fatalf("replicas %v after a failed rebuild, want %v", s.Replicas, seg.Replicas)
		}
	}
	if !slices.Contains(damagedOn(tc.nodes[0].b.ClusterStatus().Heal, bad.id), seg.ID) {
		t.Fatalf("node %d's copy no longer reported damaged after a failed rebuild", bad.id)
	}
	checkRead(t, bad.b, "failed", want) // from the healthy replica

	// The next rebuild, from the healthy holder, sets the partial copy
	// aside in turn and completes.
	if !bad.b.StartRebuild(seg.ID, healthy.id) {
		t.Fatalf("node %d did not retry its rebuild", bad.id)
	}
	waitFillDone(t, bad, seg.ID)
	eventually(t, 20*time.Second, "the rebuilt copy listed and undamaged", func() error {
		for _, s := range sealedSegments(t, tc.nodes[0].b, "failed") {
			if s.ID == seg.ID && !slices.Contains(s.Replicas, fmt.Sprintf("node-%d", bad.id)) {
				return fmt.Errorf("replicas %v", s.Replicas)
			}
		}
		if slices.Contains(damagedOn(tc.nodes[0].b.ClusterStatus().Heal, bad.id), seg.ID) {
			return fmt.Errorf("still reported damaged")
		}
		return nil
	})
	if v, err := bad.b.VerifyLocalCopy(seg.ID); err != nil || !v.Whole() {
		t.Fatalf("the rebuilt copy verifies %v (%v)", v, err)
	}
	if q := bad.b.QuarantinedCopies(seg.ID); len(q) != 2 {
		t.Fatalf("quarantined copies %v, want the first file and the failed rebuild's", q)
	}
	checkRead(t, bad.b, "failed", want)
}
