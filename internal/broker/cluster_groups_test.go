package broker_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// groupTopic creates a topic of 8 ranges in vnode 0 through node 1,
// waits until every node sees it, and returns its name and range ids.
func groupTopic(t *testing.T, tc *testCluster, prefix string) (string, []uint64) {
	t.Helper()
	name := inVnode0(prefix)
	createRetried(t, tc.nodes[0].b, name, 8)
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("%s on node %d", name, nd.id), func() error { return hasTopics(nd.b, name) })
	}
	d, err := tc.nodes[0].b.DescribeTopic(name)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, r := range d.Ranges {
		ids = append(ids, r.ID)
	}
	return name, ids
}

// settle polls every member, each through its own node, round after round
// until all answer one generation and their ranges cover the topic; it
// returns that generation. Two members answered the same range in one
// round fails the test at once when strict: the coordinator hands a
// range over only once its holder has polled again.
func settle(t *testing.T, topic, group string, members map[string]*clusterNode, all []uint64, strict bool) uint64 {
	t.Helper()
	var gen uint64
	eventually(t, 20*time.Second, fmt.Sprintf("%d members of %s share %s", len(members), group, topic), func() error {
		owner := map[uint64]string{}
		gens := map[uint64]bool{}
		for _, name := range slices.Sorted(maps.Keys(members)) {
			g, ranges, err := members[name].b.MemberRanges(topic, group, name)
			if err != nil {
				return fmt.Errorf("poll %s through node %d: %w", name, members[name].id, err)
			}
			gens[g], gen = true, g
			for _, r := range ranges {
				if prev, ok := owner[r]; ok {
					if strict {
						t.Fatalf("range %d answered to both %s and %s", r, prev, name)
					}
					return fmt.Errorf("range %d answered to both %s and %s", r, prev, name)
				}
				owner[r] = name
			}
		}
		if len(gens) != 1 || len(owner) != len(all) {
			return fmt.Errorf("generations %v, %d of %d ranges answered", slices.Collect(maps.Keys(gens)), len(owner), len(all))
		}
		return nil
	})
	return gen
}

// describedMembers checks that node nd describes the group with exactly
// names as members, at generation gen, their ranges covering all.
func describedMembers(t *testing.T, nd *clusterNode, topic, group string, gen uint64, names []string, all []uint64) {
	t.Helper()
	g, members, err := nd.b.GroupMembers(topic, group)
	if err != nil {
		t.Fatalf("describe %s through node %d: %v", group, nd.id, err)
	}
	var got []string
	var ranges []uint64
	for _, m := range members {
		got = append(got, m.Name)
		ranges = append(ranges, m.Ranges...)
	}
	slices.Sort(ranges)
	if g != gen || !slices.Equal(got, names) || !slices.Equal(ranges, all) {
		t.Fatalf("node %d describes generation %d, members %v with ranges %v; want %d, %v covering %v", nd.id, g, got, ranges, gen, names, all)
	}
}

// Members of one group connected to different nodes share the topic's
// ranges: the leader of the topic's vnode coordinates them all, and the
// member operations work through every node.
func TestClusterGroupAcrossNodes(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	tc.waitVoters(3)
	topic, all := groupTopic(t, tc, "shared")
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	var others []*clusterNode
	for _, nd := range tc.nodes {
		if nd != leader {
			others = append(others, nd)
		}
	}
	n1, n2 := others[0], others[1]

	two := settle(t, topic, "g", map[string]*clusterNode{"a": n1, "b": n2}, all, true)
	three := settle(t, topic, "g", map[string]*clusterNode{"a": n1, "b": n2, "c": leader}, all, true)
	if three <= two {
		t.Fatalf("generation %d after a third member joined, %d before", three, two)
	}
	for _, nd := range tc.nodes {
		describedMembers(t, nd, topic, "g", three, []string{"a", "b", "c"}, all)
		names, err := nd.b.ListGroups(topic)
		if err != nil || !slices.Equal(names, []string{"g"}) {
			t.Fatalf("list groups through node %d: %v, %v", nd.id, names, err)
		}
	}
	st, err := n2.b.MemberHeartbeat(topic, "g", "a")
	if err != nil || st.Generation != three || st.Members != 3 || st.Ranges == 0 {
		t.Fatalf("heartbeat of a through node %d: %+v, %v", n2.id, st, err)
	}

	// a reads and commits through its own node; the position is seen
	// through every node.
	recs := make([]broker.Record, 64)
	for i := range recs {
		recs[i] = broker.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
	}
	if _, err := n1.b.Produce(ctx, topic, recs); err != nil {
		t.Fatal(err)
	}
	group, member := "g", "a"
	page, err := n1.b.Fetch(ctx, broker.FetchRequest{Topic: topic, Group: &group, Member: &member, Max: 100})
	if err != nil || page.Cursor == nil || len(page.Records) == 0 || len(page.Records) == len(recs) {
		t.Fatalf("a's fetch: %d records, %v; want some of %d", len(page.Records), err, len(recs))
	}
	if err := n1.b.MemberCommit(ctx, topic, "g", "a", three, *page.Cursor); err != nil {
		t.Fatalf("a's commit through node %d: %v", n1.id, err)
	}
	eventually(t, 10*time.Second, "a's commit seen through node "+fmt.Sprint(n2.id), func() error {
		if d, err := n2.b.DescribeGroup(topic, "g"); err != nil || d.Cursor == nil || d.Lag != uint64(len(recs)-len(page.Records)) {
			return fmt.Errorf("after a's commit of %d records: %+v, %v", len(page.Records), d, err)
		}
		return nil
	})

	// c leaves through another node than its own; its commit is refused
	// through every node, and so is a generation from before a joined.
	if err := n1.b.LeaveGroup(topic, "g", "c"); err != nil {
		t.Fatal(err)
	}
	for _, nd := range tc.nodes {
		if err := nd.b.MemberCommit(ctx, topic, "g", "c", three, *page.Cursor); !errors.Is(err, broker.ErrStaleMember) {
			t.Fatalf("commit of c, who left, through node %d: %v, want stale_member", nd.id, err)
		}
		if err := nd.b.MemberCommit(ctx, topic, "g", "a", 1, *page.Cursor); !errors.Is(err, broker.ErrStaleMember) {
			t.Fatalf("commit of a under generation 1 through node %d: %v, want stale_member", nd.id, err)
		}
	}
	if err := leader.b.DeleteGroup(ctx, topic, "g"); !errors.Is(err, broker.ErrGroupHasMembers) {
		t.Fatalf("delete of a group with members on other nodes: %v, want group_has_members", err)
	}
	after := settle(t, topic, "g", map[string]*clusterNode{"a": n1, "b": n2}, all, true)
	describedMembers(t, leader, topic, "g", after, []string{"a", "b"}, all)
}

// When the coordinator's node stops, the vnode's new leader coordinates:
// the members join it within seconds and share the ranges again, and a
// commit under a generation of the old coordinator is refused.
func TestClusterGroupCoordinatorMoves(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	tc.waitVoters(3)
	topic, all := groupTopic(t, tc, "moving")
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	var others []*clusterNode
	for _, nd := range tc.nodes {
		if nd != leader {
			others = append(others, nd)
		}
	}
	n1, n2 := others[0], others[1]
	members := map[string]*clusterNode{"a": n1, "b": n2}
	before := settle(t, topic, "g", members, all, true)
	if _, err := n1.b.Produce(ctx, topic, []broker.Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	group := "g"
	var cur string
	for _, name := range []string{"a", "b"} {
		page, err := members[name].b.Fetch(ctx, broker.FetchRequest{Topic: topic, Group: &group, Member: &name, Max: 10})
		if err != nil || page.Cursor == nil {
			t.Fatalf("%s's fetch: %v", name, err)
		}
		if len(page.Records) > 0 {
			cur = *page.Cursor
		}
	}
	if cur == "" {
		t.Fatal("neither member read the record")
	}

	stopped := time.Now()
	tc.stop(leader)
	next := settle(t, topic, "g", members, all, false)
	t.Logf("the members shared the topic again %v after the coordinator's node began to stop", time.Since(stopped))
	if next>>32 <= before>>32 {
		t.Fatalf("generation %#x after the move, %#x before: the new coordinator's must be above every old one", next, before)
	}
	for _, nd := range others {
		if err := nd.b.MemberCommit(ctx, topic, "g", "a", before, cur); !errors.Is(err, broker.ErrStaleMember) {
			t.Fatalf("commit under the old coordinator's generation through node %d: %v, want stale_member", nd.id, err)
		}
	}
	if err := n2.b.MemberCommit(ctx, topic, "g", "a", next, cur); err != nil {
		t.Fatalf("commit under the new generation: %v", err)
	}
	describedMembers(t, n2, topic, "g", next, []string{"a", "b"}, all)
}

// BenchmarkClusterMemberHeartbeat measures a member heartbeat answered by
// the coordinator's node itself and one forwarded to it over the data
// path.
func BenchmarkClusterMemberHeartbeat(b *testing.B) {
	tc := startCluster(b, 3)
	tc.waitVoters(3)
	name := inVnode0("bench")
	createRetried(b, tc.nodes[0].b, name, 8)
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	other := tc.nodes[0]
	if other == leader {
		other = tc.nodes[1]
	}
	eventually(b, 10*time.Second, "topic on every node", func() error { return hasTopics(other.b, name) })
	if _, _, err := other.b.MemberRanges(name, "g", "m"); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		via  string
		node *clusterNode
	}{{"coordinator", leader}, {"forwarded", other}} {
		b.Run(bc.via, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.node.b.MemberHeartbeat(name, "g", "m"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
