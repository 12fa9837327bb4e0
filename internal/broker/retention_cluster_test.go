package broker_test

// Retention on three nodes: the vnode leader proposes the deletes, and
// every replica deletes its file when it applies them, a node that was
// down included once it is back.

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
)

// policySegments produces n segments of topic through nd, each rolled
// by its policy's segment_max_bytes, and returns them, oldest first.
func policySegments(t *testing.T, nd *clusterNode, topic string, n int) []broker.SegmentDescription {
	t.Helper()
	for i := range n {
		recs := make([]broker.Record, 5)
		for j := range recs {
			recs[j] = broker.Record{Key: fmt.Appendf(nil, "k%d-%d", i, j), Value: make([]byte, 1024)}
		}
		if _, err := nd.b.Produce(t.Context(), topic, recs); err != nil {
			t.Fatal(err)
		}
		nd.b.RollDue()
	}
	d, err := nd.b.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []broker.SegmentDescription
	for _, s := range d.Ranges[0].Segments {
		if !s.Active {
			out = append(out, s)
		}
	}
	if len(out) != n {
		t.Fatalf("%d sealed segments, want %d: %+v", len(out), n, d.Ranges[0].Segments)
	}
	return out
}

// fileOn reports whether a node's data directory holds a file of segment id.
func fileOn(t *testing.T, nd *clusterNode, id uint64) bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(nd.dir, "segments", fmt.Sprintf("%020d*", id)))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

// sweepUntil sweeps on every running node until topic keeps exactly
// want sealed segments (the vnode's leader is whichever node it is).
func sweepUntil(t *testing.T, tc *testCluster, topic string, want []uint64) {
	t.Helper()
	eventually(t, 30*time.Second, "retention on "+topic, func() error {
		for _, nd := range tc.nodes {
			if nd.b != nil {
				nd.b.SweepRetention(t.Context())
			}
		}
		var got []uint64
		d, err := tc.nodes[0].b.DescribeTopic(topic)
		if err != nil {
			return err
		}
		for _, s := range d.Ranges[0].Segments {
			if !s.Active {
				got = append(got, s.ID)
			}
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("sealed segments %v, want %v", got, want)
		}
		return nil
	})
}

// holders lists the running nodes that have a file of segment id.
func holders(t *testing.T, tc *testCluster, id uint64) []uint64 {
	var out []uint64
	for _, nd := range tc.nodes {
		if nd.b != nil && fileOn(t, nd, id) {
			out = append(out, nd.id)
		}
	}
	return out
}

// quorumHolds waits until at least two nodes have a file of each
// segment: a produce is acknowledged once a quorum of its copies has it.
func quorumHolds(t *testing.T, tc *testCluster, segs []broker.SegmentDescription) map[uint64][]uint64 {
	t.Helper()
	held := map[uint64][]uint64{}
	for _, s := range segs {
		eventually(t, 30*time.Second, fmt.Sprint("copies of segment ", s.ID), func() error {
			if h := holders(t, tc, s.ID); len(h) < 2 {
				return fmt.Errorf("segment %d has files on nodes %v only", s.ID, h)
			}
			return nil
		})
		held[s.ID] = holders(t, tc, s.ID)
	}
	return held
}

// filesSettle waits until no running node has a file of gone, and
// checks that each of kept is still on every node that held it.
func filesSettle(t *testing.T, tc *testCluster, gone []uint64, kept map[uint64][]uint64) {
	t.Helper()
	eventually(t, 30*time.Second, "files of deleted segments", func() error {
		for _, id := range gone {
			if h := holders(t, tc, id); len(h) > 0 {
				return fmt.Errorf("segment %d was deleted but nodes %v still have its file", id, h)
			}
		}
		return nil
	})
	for id, was := range kept {
		for _, nd := range was {
			if !fileOn(t, tc.nodes[nd-1], id) {
				t.Fatalf("segment %d is kept but node %d lost its file", id, nd)
			}
		}
	}
}

func definePolicyEverywhere(t *testing.T, tc *testCluster, name string, fields map[string]metadata.PolicyValue) {
	t.Helper()
	eventually(t, 20*time.Second, "define "+name, func() error { return tc.nodes[0].b.DefinePolicy(t.Context(), name, fields) })
}

func TestClusterRetentionDeletesOnEveryReplica(t *testing.T) {
	tc := startCluster(t, 3)
	n1 := tc.nodes[0]
	definePolicyEverywhere(t, tc, "small", map[string]metadata.PolicyValue{metadata.FieldSegmentMaxBytes: {Int: 4096}})
	tc.createEverywhere(n1, "kept", 1)
	name := "small"
	eventually(t, 20*time.Second, "bind", func() error { return n1.b.BindTopicPolicy(t.Context(), "kept", &name) })
	segs := policySegments(t, n1, "kept", 3)
	for _, s := range segs {
		if len(s.Replicas) != 3 {
			t.Fatalf("segment %d on %v, want three replicas", s.ID, s.Replicas)
		}
	}
	held := quorumHolds(t, tc, segs)
	// Keep at most one segment's records: the two oldest go.
	definePolicyEverywhere(t, tc, "small", map[string]metadata.PolicyValue{
		metadata.FieldSegmentMaxBytes: {Int: 4096}, metadata.FieldMaxRecords: {Int: int64(segs[2].Records)},
	})
	sweepUntil(t, tc, "kept", []uint64{segs[2].ID})
	filesSettle(t, tc, []uint64{segs[0].ID, segs[1].ID}, map[uint64][]uint64{segs[2].ID: held[segs[2].ID]})
}

func TestClusterRetentionReachesANodeThatWasDown(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitQuorumSafe()
	n1, n3 := tc.nodes[0], tc.nodes[2]
	definePolicyEverywhere(t, tc, "small", map[string]metadata.PolicyValue{metadata.FieldSegmentMaxBytes: {Int: 4096}})
	tc.createEverywhere(n1, "late", 1)
	name := "small"
	eventually(t, 20*time.Second, "bind", func() error { return n1.b.BindTopicPolicy(t.Context(), "late", &name) })
	segs := policySegments(t, n1, "late", 2)
	held := quorumHolds(t, tc, segs)
	// Stop a follower holding copies: its files are what must go later.
	var down *clusterNode
	var had []uint64
	for _, nd := range tc.nodes[1:] {
		var ids []uint64
		for _, s := range segs {
			if slices.Contains(held[s.ID], nd.id) {
				ids = append(ids, s.ID)
			}
		}
		if len(ids) > len(had) {
			down, had = nd, ids
		}
	}
	if down == nil {
		t.Fatalf("no follower holds a copy: %v", held)
	}
	n3 = down
	waitGroupsFormed(tc) // every group keeps a quorum with one node down
	tc.stop(n3)
	definePolicyEverywhere(t, tc, "small", map[string]metadata.PolicyValue{
		metadata.FieldSegmentMaxBytes: {Int: 4096}, metadata.FieldMaxRecords: {Int: 0},
	})
	sweepUntil(t, tc, "late", nil)
	for _, id := range had {
		if !fileOn(t, n3, id) {
			t.Fatalf("the stopped node's file of segment %d went before it came back", id)
		}
	}
	tc.open(n3, []string{n1.gossip})
	filesSettle(t, tc, []uint64{segs[0].ID, segs[1].ID}, nil)
}

// policy_in_use looks at every vnode: the root group, which holds the
// policies, sees no topic, so the node checks the bindings itself.
func TestClusterDeletePolicyInUseAcrossVnodes(t *testing.T) {
	tc := startCluster(t, 3)
	n1, n2 := tc.nodes[0], tc.nodes[1]
	definePolicyEverywhere(t, tc, "shared", map[string]metadata.PolicyValue{metadata.FieldMaxAge: {Int: 1000}})
	name := "shared"
	last := "bound"
	tc.createEverywhere(n1, last, 1)
	eventually(t, 20*time.Second, "bind", func() error { return n1.b.BindTopicPolicy(t.Context(), last, &name) })
	eventually(t, 20*time.Second, "bind seen on node 2", func() error {
		tp, err := n2.b.TopicPolicy(last)
		if err == nil && (tp.Policy == nil || *tp.Policy != name) {
			err = errors.New("not bound yet")
		}
		return err
	})
	if err := n2.b.DeletePolicy(t.Context(), name, false); !errors.Is(err, metadata.ErrPolicyInUse) {
		t.Fatalf("delete a bound policy: %v, want policy_in_use", err)
	}
	eventually(t, 20*time.Second, "forced delete", func() error { return n2.b.DeletePolicy(t.Context(), name, true) })
	eventually(t, 20*time.Second, "unresolved", func() error {
		tp, err := n1.b.TopicPolicy(last)
		if err == nil && tp.Resolution != "unresolved" {
			err = fmt.Errorf("resolution %s", tp.Resolution)
		}
		return err
	})
	if ps := n1.b.ListPolicies(); len(ps) != 0 {
		t.Fatalf("policies after the forced delete: %v", ps)
	}
}

// Healing never brings back a segment retention deleted: with a node
// dead and its segments due for new copies, the deleted ones get none,
// while a kept topic's segments are healed as usual (so heal passes did
// run after the deletes).
func TestClusterHealDoesNotResurrectDeletedSegments(t *testing.T) {
	hc := broker.HealConfig{DeadAfter: time.Second, Interval: 100 * time.Millisecond, ScrubInterval: time.Hour}
	tc := startHealCluster(t, 4, 2<<10, hc)
	n1 := tc.nodes[0]
	tc.createEverywhere(n1, "expiring", 1)
	tc.createEverywhere(n1, "kept", 1)
	produceSealed(t, n1.b, "expiring", 40)
	produceSealed(t, n1.b, "kept", 40)
	expiring := sealedSegments(t, n1.b, "expiring")
	var victim string
	for _, name := range expiring[0].Replicas {
		if name != "node-1" {
			victim = name
			break
		}
	}
	var keptHeld []uint64
	for _, s := range sealedSegments(t, n1.b, "kept") {
		if slices.Contains(s.Replicas, victim) {
			keptHeld = append(keptHeld, s.ID)
		}
	}
	waitGroupsFormed(tc)
	tc.stop(tc.node(victim))
	definePolicyEverywhere(t, tc, "none", map[string]metadata.PolicyValue{metadata.FieldMaxRecords: {Int: 0}})
	name := "none"
	eventually(t, 20*time.Second, "bind", func() error { return n1.b.BindTopicPolicy(t.Context(), "expiring", &name) })
	sweepUntil(t, tc, "expiring", nil)
	eventually(t, 60*time.Second, "the kept topic healed", func() error {
		for _, s := range sealedSegments(t, n1.b, "kept") {
			if slices.Contains(keptHeld, s.ID) && (len(s.Replicas) != 3 || slices.Contains(s.Replicas, victim)) {
				return fmt.Errorf("segment %d has replicas %v", s.ID, s.Replicas)
			}
		}
		return nil
	})
	var gone []uint64
	for _, s := range expiring {
		gone = append(gone, s.ID)
	}
	filesSettle(t, tc, gone, nil)
	for _, s := range sealedSegments(t, n1.b, "expiring") {
		t.Fatalf("segment %d is back in the metadata", s.ID)
	}
}

// waitGroupsFormed waits until every group has at least three voters and
// a leader on every node, so one node stopping leaves each a quorum.
func waitGroupsFormed(tc *testCluster) {
	tc.t.Helper()
	for _, nd := range tc.nodes {
		eventually(tc.t, 30*time.Second, fmt.Sprintf("groups formed on node %d", nd.id), func() error {
			for _, g := range nd.b.ClusterStatus().Groups {
				if len(g.Voters) < 3 || g.Leader == 0 {
					return fmt.Errorf("%s: voters %v, leader %d", g.Name, g.Voters, g.Leader)
				}
			}
			return nil
		})
	}
}

// A policy's spread_by and min_domains shape where new segments go: on
// nodes with no rack attribute, a hard placement asking for two racks
// refuses to open a segment (a retriable reason), a soft one places it.
func TestClusterPolicyPlacementHardRefusesSoftPlaces(t *testing.T) {
	tc := startCluster(t, 3)
	n1 := tc.nodes[0]
	fields := func(mode string) map[string]metadata.PolicyValue {
		return map[string]metadata.PolicyValue{
			metadata.FieldSpreadBy:   {Str: "rack", IsStr: true},
			metadata.FieldMinDomains: {Int: 2},
			metadata.FieldPlacement:  {Str: mode, IsStr: true},
		}
	}
	definePolicyEverywhere(t, tc, "racks", fields("hard"))
	admin := broker.Identity{User: "admin", Perms: []string{"admin"}}
	eventually(t, 20*time.Second, "create", func() error {
		return n1.b.CreateTopicWithPolicyAs(t.Context(), admin, "placed", 0, 1, 0, "racks")
	})
	_, err := n1.b.Produce(t.Context(), "placed", []broker.Record{rec("k", "v")})
	if !errors.Is(err, broker.ErrRetry) {
		t.Fatalf("produce under a hard placement that cannot be met: %v, want retry", err)
	}
	definePolicyEverywhere(t, tc, "racks", fields("soft"))
	eventually(t, 20*time.Second, "produce under a soft placement", func() error {
		_, err := n1.b.Produce(t.Context(), "placed", []broker.Record{rec("k", "v")})
		return err
	})
	if s := activeSegment(t, n1.b, "placed"); len(s.Replicas) != 3 {
		t.Fatalf("soft placement put the segment on %v, want three nodes", s.Replicas)
	}
}
