package control

// Removing nodes while others are down, and what a removed node meets
// when it comes back.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/raft"
)

// TestRemoveDownNodeRecovers: with node 3 down, removing the live node 2
// is refused with a message naming node 3, and removing node 3 (the way
// back to a healthy cluster) succeeds: every group ends on voters {1, 2}
// and takes writes.
func TestRemoveDownNodeRecovers(t *testing.T) {
	c := threeNodes(t, 2)
	c.stopNode(3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.node(1).Remove(ctx, 2)
	if err == nil || isUnavailable(err) || !strings.Contains(err.Error(), "without a live quorum") || !strings.Contains(err.Error(), "node 3") {
		t.Fatalf("Remove(2) with node 3 down: %v, want a refusal naming node 3", err)
	}
	if reg, _ := c.node(1).Registry(); !reg.Has(2) {
		t.Fatal("the refused removal changed the registry")
	}
	if err := c.node(2).Remove(ctx, 3); err != nil {
		t.Fatalf("Remove(3), down, through node 2: %v\n%s", err, c.describe())
	}
	for _, g := range c.node(1).Status().Groups {
		if !slices.Equal(g.Voters, []uint64{1, 2}) || len(g.Learners) != 0 {
			t.Errorf("%s: voters %v learners %v, want voters [1 2]", g.Name, g.Voters, g.Learners)
		}
	}
	if res := c.apply(1, createTopic("after-removing-3")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := c.apply(2, createTopic("after-removing-3-through-2")); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestReconcilerHoldsBackChangeWithoutLiveQuorum: a removal that reached
// the registry without the leader's check (here proposed directly) is
// not carried out while it would leave a group without a live quorum;
// the group's leader says why in Status. Removing the down node too
// lets both go, the down one first.
func TestReconcilerHoldsBackChangeWithoutLiveQuorum(t *testing.T) {
	c := threeNodes(t, 2)
	c.stopNode(3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.node(1).proposeEntry(ctx, RootGroup, entry{Reg: &regCommand{Kind: regRemove, Node: NodeRecord{ID: 2}}}); err != nil {
		t.Fatal(err)
	}
	waiting := func() bool {
		for _, id := range c.ids() {
			for _, g := range c.node(id).Status().Groups {
				if g.Waiting != "" && strings.Contains(g.Waiting, "node 3") {
					return true
				}
			}
		}
		return false
	}
	c.waitFor("a group leader to report the held-back removal", 1000, waiting)
	for _, id := range c.ids() {
		for _, g := range c.node(id).Status().Groups {
			if !slices.Contains(g.Voters, 2) {
				t.Errorf("node %d, %s: voters %v: node 2 left while node 3 is down", id, g.Name, g.Voters)
			}
		}
	}
	if err := c.node(1).Remove(ctx, 3); err != nil {
		t.Fatalf("Remove(3): %v\n%s", err, c.describe())
	}
	c.waitFor("node 2 out of every group", 2000, func() bool { return len(c.node(1).groupsWith(2)) == 0 })
	if res := c.apply(1, createTopic("alone")); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, g := range c.node(1).Status().Groups {
		if g.Waiting != "" {
			t.Errorf("%s still waiting: %s", g.Name, g.Waiting)
		}
	}
}

// TestRestartedMemberJoinsUnchanged: a node restarted with the record it
// registered with joins again without a change (its root replica is
// confirmed current), and a removed one is refused for good, with the
// way out in the message.
func TestRestartedMemberJoinsUnchanged(t *testing.T) {
	c := threeNodes(t, 2)
	c.stopNode(3)
	n3 := c.start(3, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n3.Join(ctx); err != nil {
		t.Fatalf("join after a restart: %v", err)
	}
	c.waitPlaced(3000)
	c.stopNode(3)
	if err := c.node(1).Remove(ctx, 3); err != nil {
		t.Fatalf("Remove(3): %v", err)
	}
	n3 = c.start(3, false)
	err := n3.Join(ctx)
	if err == nil || !strings.Contains(err.Error(), "new node id") {
		t.Fatalf("join of a removed node: %v, want a refusal naming a new node id", err)
	}
	if reg, _ := c.node(1).Registry(); reg.Has(3) {
		t.Fatal("the removed node was registered again")
	}
}

// TestPlanOffersEveryRemovableVoter: when several voters are no longer
// placed, each is a candidate, so one held back does not hold the others.
func TestPlanOffersEveryRemovableVoter(t *testing.T) {
	got := plan([]uint64{1}, []uint64{1}, []uint64{1, 2, 3}, nil)
	want := []raft.ReplicaChange{{Kind: raft.RemoveVoter, Node: 2}, {Kind: raft.RemoveVoter, Node: 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
}

// TestLivenessCountsFramesAfterAMoment: a voter counts as live only when
// heard from after the given moment; self always counts.
func TestLivenessCountsFramesAfterAMoment(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	l := newLiveness(clk)
	l.note(2)
	l.note(3)
	since := clk.Now()
	if down := l.down(1, []uint64{1, 2, 3}, since); !slices.Equal(down, []uint64{2, 3}) {
		t.Fatalf("nothing heard after since: down %v, want [2 3]", down)
	}
	clk.Advance(time.Millisecond)
	l.note(2)
	if down := l.down(1, []uint64{1, 2, 3}, since); down != nil {
		t.Fatalf("1 and 2 live of 3: down %v, want none", down)
	}
	if down := l.down(1, []uint64{1, 3}, since); !slices.Equal(down, []uint64{3}) {
		t.Fatalf("voters [1 3] with 3 silent: down %v, want [3]", down)
	}
	l.forget(2)
	if down := l.down(1, []uint64{1, 2, 3}, since); !slices.Equal(down, []uint64{2, 3}) {
		t.Fatalf("after forget: down %v", down)
	}
}

// TestRemovedIDsAreBounded: the registry remembers the last maxRemoved
// removed ids, refuses them, and forgets the oldest beyond.
func TestRemovedIDsAreBounded(t *testing.T) {
	r := newRegistry(2, 3, NodeRecord{ID: 1, Addr: "a1"})
	last := uint64(maxRemoved + 2)
	for id := uint64(2); id <= last; id++ {
		if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: id, Addr: "a"}}); err != nil {
			t.Fatalf("register %d: %v", id, err)
		}
		if err := r.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: id}}); err != nil {
			t.Fatalf("remove %d: %v", id, err)
		}
	}
	if len(r.Removed) != maxRemoved || r.Removed[0] != 3 || r.Removed[len(r.Removed)-1] != last {
		t.Fatalf("removed ids: %d, from %d to %d", len(r.Removed), r.Removed[0], r.Removed[len(r.Removed)-1])
	}
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: last, Addr: "a"}}); err != errRemovedNode {
		t.Fatalf("register the last removed id: %v", err)
	}
	if err := r.validate(); err != nil {
		t.Fatal(err)
	}
	bad := r.Clone()
	bad.Removed = append(bad.Removed, 1)
	if bad.validate() == nil {
		t.Fatal("a registry naming a registered node as removed validated")
	}
}
