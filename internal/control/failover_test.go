package control

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
)

// TestVnodeLeaderStopped: stopping a vnode's leader, writes to that vnode
// through the other nodes succeed again within a bounded number of ticks,
// and nothing committed before is lost.
func TestVnodeLeaderStopped(t *testing.T) {
	c := threeNodes(t, 4)
	const name = "failover"
	g, _ := c.node(1).GroupOfTopic(name)
	if res := c.apply(1, createTopic(name)); res.Err != nil {
		t.Fatal(res.Err)
	}
	leader := c.leaderOf(g)
	c.stopNode(leader)
	rest := c.ids()
	start := c.ticks.Load()
	// A write with a context long enough for an election: it must ride
	// through the leader change, not fail.
	res := c.apply(rest[0], metadata.Command{Kind: metadata.KindCommitOffsets, Topic: name, Group: "g1"})
	if res.Err != nil {
		t.Fatalf("commit after the leader stopped: %v", res.Err)
	}
	took := c.ticks.Load() - start
	t.Logf("node %d led %s; the write through node %d succeeded %d ticks after it stopped", leader, groupName(g), rest[0], took)
	// Election timeout is 10..20 ticks; allow a few rounds of it.
	if took > 200 {
		t.Errorf("failover took %d ticks", took)
	}
	if res := c.apply(rest[1], createTopic(name+"-2")); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, id := range rest {
		if err := c.node(id).Barrier(context.Background(), g); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.topicOn(id, name); !ok {
			t.Errorf("node %d lost topic %s", id, name)
		}
	}
}

// TestNoQuorumFailsFast: with two of three nodes stopped, writes and
// barriers fail with ErrUnavailable when their context ends (they do not
// hang), and when the nodes return nothing committed is lost and writes
// work again.
func TestNoQuorumFailsFast(t *testing.T) {
	c := threeNodes(t, 4)
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("kept-%d", i)
		if res := c.apply(uint64(i%3+1), createTopic(name)); res.Err != nil {
			t.Fatal(res.Err)
		}
		names = append(names, name)
	}
	c.stopNode(2)
	c.stopNode(3)
	for _, cmd := range []metadata.Command{
		createTopic("lonely"),
		{Kind: metadata.KindCreateUser, User: "dave", PasswordHash: "h", Perms: []string{"consume"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		cmd.V = metadata.Version
		_, err := c.node(1).Apply(ctx, cmd)
		cancel()
		if !isUnavailable(err) {
			t.Errorf("%s without a quorum: %v, want ErrUnavailable", cmd.Kind, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := c.node(1).Barrier(ctx, RootGroup)
	cancel()
	if !isUnavailable(err) {
		t.Errorf("barrier without a quorum: %v, want ErrUnavailable", err)
	}

	c.start(2, false)
	c.start(3, false)
	c.waitPlaced(3000)
	for _, id := range c.ids() {
		for _, name := range names {
			if err := c.node(id).BarrierTopic(context.Background(), name); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.topicOn(id, name); !ok {
				t.Errorf("node %d lost topic %s", id, name)
			}
		}
	}
	if res := c.apply(3, createTopic("after")); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestRestartCatchesUp: a node stopped while the others keep writing
// comes back over its kept log and catches up with everything, through
// the log or a snapshot.
func TestRestartCatchesUp(t *testing.T) {
	c := threeNodes(t, 4)
	c.stopNode(3)
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("while-down-%d", i)
		if res := c.apply(uint64(i%2+1), createTopic(name)); res.Err != nil {
			t.Fatal(res.Err)
		}
		names = append(names, name)
	}
	if res := c.apply(1, metadata.Command{Kind: metadata.KindCreateUser, User: "erin", PasswordHash: "h", Perms: []string{"consume"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	c.start(3, false)
	c.waitFor("node 3 to catch up", 3000, func() bool {
		for _, name := range names {
			if _, ok := c.topicOn(3, name); !ok {
				return false
			}
		}
		var ok bool
		_ = c.node(3).ViewRoot(func(st *metadata.State) { _, ok = st.User("erin") })
		return ok
	})
	// And it serves writes again as a full member.
	c.waitPlaced(3000)
	if res := c.apply(3, createTopic("back")); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestFourthNodeJoinsThenRemove: a fourth node joins as a learner of every
// group and is promoted where placement picks it, other voters stepping
// down to learner only after (add before remove; three voters per vnode
// throughout). Removing a node moves its voter slots to the others and
// takes it out of every group.
func TestFourthNodeJoinsThenRemove(t *testing.T) {
	c := threeNodes(t, 8)
	if res := c.apply(1, createTopic("before-join")); res.Err != nil {
		t.Fatal(res.Err)
	}
	c.join(4)
	c.waitPlaced(5000)
	st := c.node(4).Status()
	voterOf := 0
	for _, g := range st.Groups {
		want := 3
		if g.Group == RootGroup {
			want = 4
		}
		if len(g.Voters) != want {
			t.Errorf("%s: voters %v, want %d", g.Name, g.Voters, want)
		}
		if slices.Contains(g.Voters, 4) {
			voterOf++
		} else if !slices.Contains(g.Learners, 4) {
			t.Errorf("%s: node 4 is neither voter nor learner", g.Name)
		}
	}
	t.Logf("node 4 votes in %d of %d groups", voterOf, len(st.Groups))
	if voterOf == 0 {
		t.Errorf("placement picked node 4 nowhere")
	}
	if _, ok := c.topicOn(4, "before-join"); !ok {
		t.Errorf("node 4 does not see the topic created before it joined")
	}
	if res := c.apply(4, createTopic("through-4")); res.Err != nil {
		t.Fatal(res.Err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.node(1).Remove(ctx, 2); err != nil {
		t.Fatalf("remove node 2: %v\n%s", err, c.describe())
	}
	c.stopNode(2)
	c.waitPlaced(5000)
	for _, g := range c.node(1).Status().Groups {
		if slices.Contains(g.Voters, 2) || slices.Contains(g.Learners, 2) {
			t.Errorf("%s still names node 2: %v %v", g.Name, g.Voters, g.Learners)
		}
		if g.Group != RootGroup && len(g.Voters) != 3 {
			t.Errorf("%s: %d voters after the removal, want 3", g.Name, len(g.Voters))
		}
	}
	if res := c.apply(3, createTopic("after-remove")); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestPlanOrder: the replica plan adds before it removes and never drops
// a voter while a picked node is not yet one.
func TestPlanOrder(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		placed, members, voters, learners []uint64
		want                              string
	}{
		{"new member", []uint64{1, 2, 3}, []uint64{1, 2, 3, 4}, []uint64{1, 2, 3}, nil, "[add learner 4]"},
		{"promote first", []uint64{1, 2, 4}, []uint64{1, 2, 3, 4}, []uint64{1, 2, 3}, []uint64{4}, "[promote learner 4]"},
		{"then demote", []uint64{1, 2, 4}, []uint64{1, 2, 3, 4}, []uint64{1, 2, 3, 4}, nil, "[remove voter 3]"},
		{"demoted comes back as learner", []uint64{1, 2, 4}, []uint64{1, 2, 3, 4}, []uint64{1, 2, 4}, nil, "[add learner 3]"},
		{"removed node leaves last", []uint64{1, 3, 4}, []uint64{1, 3, 4}, []uint64{1, 2, 3}, []uint64{4}, "[promote learner 4]"},
		{"removed voter out", []uint64{1, 3, 4}, []uint64{1, 3, 4}, []uint64{1, 2, 3, 4}, nil, "[remove voter 2]"},
		{"removed learner out", []uint64{1, 3, 4}, []uint64{1, 3, 4}, []uint64{1, 3, 4}, []uint64{2}, "[remove voter 2]"},
		{"settled", []uint64{1, 2, 3}, []uint64{1, 2, 3, 4}, []uint64{1, 2, 3}, []uint64{4}, "[]"},
		{"picked node not a replica yet", []uint64{1, 2, 5}, []uint64{1, 2, 3, 5}, []uint64{1, 2, 3}, []uint64{5}, "[promote learner 5]"},
	} {
		var got []string
		for _, ch := range plan(tc.placed, tc.members, tc.voters, tc.learners) {
			got = append(got, fmt.Sprintf("%s %d", ch.Kind, ch.Node))
		}
		if s := fmt.Sprint(got); s != tc.want && !(tc.want == "[]" && len(got) == 0) {
			t.Errorf("%s: plan %s, want %s", tc.name, s, tc.want)
		}
	}
}
