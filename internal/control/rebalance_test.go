package control

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/placement"
)

// hrw is the voter set placement picks for group g over nodes, sorted.
func hrw(g uint64, nodes []uint64, k int) []uint64 {
	pn := make([]placement.Node, len(nodes))
	for i, id := range nodes {
		pn[i] = placement.Node{ID: id}
	}
	return sortedIDs(placement.VnodeReplicas(placementKey(g), pn, k))
}

// concentrate moves the leadership of every group to node to.
func (c *testCluster) concentrate(to uint64) {
	c.t.Helper()
	groups := append([]uint64{RootGroup}, vnodeGroups(c.vnodes)...)
	c.waitFor(fmt.Sprintf("node %d to lead every group", to), 5000, func() bool {
		all := true
		for _, g := range groups {
			l := c.leaderOf(g)
			if l == to {
				continue
			}
			all = false
			if n := c.node(l); n != nil {
				_ = n.host.TransferLeadership(g, to) // refused while to catches up
			}
		}
		return all
	})
}

// leaders counts the groups each node leads, as the lowest running node
// sees them.
func (c *testCluster) leaders() map[uint64]int {
	out := map[uint64]int{}
	for _, g := range append([]uint64{RootGroup}, vnodeGroups(c.vnodes)...) {
		out[c.leaderOf(g)]++
	}
	return out
}

func (c *testCluster) rebalance(through uint64, apply bool) Plan {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.node(through).Rebalance(ctx, apply)
	if err != nil {
		c.t.Fatalf("rebalance through node %d (apply %v): %v\n%s", through, apply, err, c.describe())
	}
	return p
}

// carriedOut reports whether every running node sees every group with
// the plan's target voters and led by the plan's leader.
func (c *testCluster) carriedOut(p Plan) bool {
	for _, id := range c.ids() {
		byGroup := map[uint64]GroupStatus{}
		for _, g := range c.node(id).Status().Groups {
			byGroup[g.Group] = g
		}
		for _, pg := range p.Groups {
			g := byGroup[pg.Group]
			if !slices.Equal(g.Voters, pg.Target) || g.Leader != pg.NewLeader {
				return false
			}
		}
	}
	return true
}

// TestRebalanceAfterNodesJoin: nodes 4 and 5 join a cluster of three
// whose groups all have their three voters and are all led by node 1.
// They become learners everywhere (and voters of the root, which wants
// five) and take vnode slots only when a rebalance is applied: the plan
// shown first changes nothing, the applied one moves the voters to what
// placement picks over the five live nodes, adding before removing, and
// spreads leadership so that no node leads more than one group more than
// another.
func TestRebalanceAfterNodesJoin(t *testing.T) {
	c := threeNodes(t, 8)
	c.join(4)
	c.join(5)
	c.waitPlaced(5000)
	c.concentrate(1)
	for _, g := range c.node(5).Status().Groups {
		if g.Group != RootGroup && (slices.Contains(g.Voters, 4) || slices.Contains(g.Voters, 5)) {
			t.Fatalf("%s: a joining node took a voter slot before any rebalance: %v", g.Name, g.Voters)
		}
	}
	before, _ := c.node(1).Registry()

	p := c.rebalance(3, false)
	if p.Applied || p.Moves() == 0 {
		t.Fatalf("plan: applied %v, %d moves", p.Applied, p.Moves())
	}
	all := []uint64{1, 2, 3, 4, 5}
	for _, pg := range p.Groups {
		k := 3
		if pg.Group == RootGroup {
			k = 5
		}
		if want := hrw(pg.Group, all, k); !slices.Equal(pg.Target, want) || pg.Held != "" {
			t.Errorf("%s: target %v (held %q), want %v", pg.Name, pg.Target, pg.Held, want)
		}
		if !slices.Equal(pg.Add, minus(pg.Target, pg.Voters)) || !slices.Equal(pg.Remove, minus(pg.Voters, pg.Target)) {
			t.Errorf("%s: add %v remove %v from %v to %v", pg.Name, pg.Add, pg.Remove, pg.Voters, pg.Target)
		}
		if pg.Leader != 1 || !slices.Contains(pg.Target, pg.NewLeader) {
			t.Errorf("%s: leader %d now, %d after (target %v)", pg.Name, pg.Leader, pg.NewLeader, pg.Target)
		}
	}
	lo, hi := len(p.Groups), 0
	for _, pn := range p.Nodes {
		if !pn.Live {
			t.Errorf("node %d not live in the plan", pn.ID)
		}
		lo, hi = min(lo, pn.LeadsAfter), max(hi, pn.LeadsAfter)
	}
	if hi-lo > 1 {
		t.Errorf("planned leadership %+v: from %d to %d groups per node", p.Nodes, lo, hi)
	}
	if after, _ := c.node(1).Registry(); !slices.Equal(fmt.Append(nil, after.Voters), fmt.Append(nil, before.Voters)) || after.Leaders != nil {
		t.Fatalf("showing a plan changed the registry: %v → %v, leaders %v", before.Voters, after.Voters, after.Leaders)
	}

	applied := c.rebalance(2, true)
	if !applied.Applied || !slices.EqualFunc(applied.Groups, p.Groups, func(a, b PlanGroup) bool {
		return slices.Equal(a.Target, b.Target) && a.NewLeader == b.NewLeader
	}) {
		t.Fatalf("applied plan differs from the plan shown:\n%+v\n%+v", applied.Groups, p.Groups)
	}
	c.waitFor("the plan carried out", 10000, func() bool { return c.placed() && c.carriedOut(applied) })
	counts := c.leaders()
	t.Logf("leaders per node after the rebalance: %v", counts)
	for _, id := range all {
		if n := counts[id]; n < lo || n > hi {
			t.Errorf("node %d leads %d groups, want %d to %d", id, n, lo, hi)
		}
	}
	if res := c.apply(5, createTopic("after-rebalance")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if again := c.rebalance(4, false); again.Moves() != 0 {
		t.Errorf("a plan right after the rebalance still moves %d: %+v", again.Moves(), again.Groups)
	}
}

// TestRebalanceKeepsALiveQuorum: two of a vnode's three voters stop.
// The plan moves every group off the stopped nodes where each step keeps
// a live quorum, holds back the groups where none can (naming the nodes
// to bring back), and never targets a stopped node; once applied, the
// groups that could move have only live voters and take writes.
func TestRebalanceKeepsALiveQuorum(t *testing.T) {
	c := threeNodes(t, 8)
	c.join(4)
	c.join(5)
	c.waitPlaced(5000)
	spread := c.rebalance(1, true)
	c.waitFor("a spread plan carried out", 10000, func() bool { return c.placed() && c.carriedOut(spread) })
	rootLeader := c.leaderOf(RootGroup)
	var stop []uint64
	for _, g := range c.node(1).Status().Groups {
		others := slices.DeleteFunc(slices.Clone(g.Voters), func(id uint64) bool { return id == rootLeader })
		if g.Group != RootGroup && len(others) >= 2 {
			stop = others[:2]
			break
		}
	}
	for _, id := range stop {
		c.stopNode(id)
	}
	live := func(id uint64) bool { return !slices.Contains(stop, id) }
	p := c.rebalance(rootLeader, false)
	held := 0
	for _, pg := range p.Groups {
		if pg.Held != "" {
			held++
			if len(pg.Add)+len(pg.Remove) != 0 || !slices.Equal(pg.Target, pg.Voters) {
				t.Errorf("%s: held (%s) but moves %v/%v", pg.Name, pg.Held, pg.Add, pg.Remove)
			}
			continue
		}
		for _, id := range pg.Target {
			if !live(id) && (len(pg.Target) <= 5-len(stop) || !slices.Contains(pg.Voters, id)) {
				t.Errorf("%s: target %v names stopped node %d", pg.Name, pg.Target, id)
			}
		}
		// The reconciler's order: every addition, then the removals.
		cur := slices.Clone(pg.Voters)
		steps := [][]uint64{slices.Clone(cur)}
		for _, a := range pg.Add {
			cur = append(cur, a)
			steps = append(steps, slices.Clone(cur))
		}
		for _, r := range pg.Remove {
			if !live(r) {
				cur = slices.DeleteFunc(cur, func(v uint64) bool { return v == r })
				steps = append(steps, slices.Clone(cur))
			}
		}
		for _, r := range pg.Remove {
			if live(r) {
				cur = slices.DeleteFunc(cur, func(v uint64) bool { return v == r })
				steps = append(steps, slices.Clone(cur))
			}
		}
		for _, s := range steps {
			n := 0
			for _, id := range s {
				n += count(live(id))
			}
			if n < len(s)/2+1 {
				t.Errorf("%s: step to voters %v has %d live of %d (plan %v → %v)", pg.Name, s, n, len(s), pg.Voters, pg.Target)
			}
		}
	}
	if held == 0 {
		t.Fatalf("no group held with nodes %v stopped: %+v", stop, p.Groups)
	}
	for _, pn := range p.Nodes {
		if pn.Live != live(pn.ID) {
			t.Errorf("node %d live %v in the plan, stopped %v", pn.ID, pn.Live, !live(pn.ID))
		}
	}

	applied := c.rebalance(rootLeader, true)
	c.waitFor("the movable groups on live voters", 10000, func() bool {
		for _, g := range c.node(rootLeader).Status().Groups {
			for _, pg := range applied.Groups {
				if pg.Group == g.Group && pg.Held == "" && !slices.Equal(g.Voters, pg.Target) {
					return false
				}
			}
		}
		return true
	})
	for i := 0; i < 64; i++ {
		name := fmt.Sprintf("t-%d", i)
		g, _ := c.node(rootLeader).GroupOfTopic(name)
		for _, pg := range applied.Groups {
			if pg.Group == g && pg.Held == "" {
				if res := c.apply(rootLeader, createTopic(name)); res.Err != nil {
					t.Fatalf("create %s in %s: %v", name, pg.Name, res.Err)
				}
			}
		}
	}
}

// TestAutoRebalanceAfterAStablePeriod: with AutoRebalance, the root's
// leader applies the plan by itself once the nodes have been the same
// for RebalanceStable, and not before.
func TestAutoRebalanceAfterAStablePeriod(t *testing.T) {
	const stableTicks = 200
	c := newTestCluster(t, 4)
	c.tune = func(cfg *Config) {
		cfg.AutoRebalance = true
		cfg.RebalanceStable = stableTicks * testTick
	}
	c.start(1, true)
	for id := uint64(2); id <= 5; id++ {
		c.join(id)
	}
	joined := c.ticks.Load()
	all := []uint64{1, 2, 3, 4, 5}
	c.waitFor("voters placed over the five nodes", 20000, func() bool {
		if !c.placed() {
			return false
		}
		for _, g := range c.node(1).Status().Groups {
			k := 3
			if g.Group == RootGroup {
				k = 5
			}
			if !slices.Equal(g.Voters, hrw(g.Group, all, k)) {
				return false
			}
		}
		return true
	})
	waited := c.ticks.Load() - joined
	t.Logf("rebalanced %d ticks after the last join", waited)
	if waited < stableTicks {
		t.Errorf("rebalanced %d ticks after the last join, before the stable period of %d", waited, stableTicks)
	}
	reg, _ := c.node(2).Registry()
	if len(reg.Leaders) != 5 {
		t.Errorf("chosen leaders %v, want one for each of the 5 groups", reg.Leaders)
	}
	c.waitFor("leadership as chosen", 5000, func() bool {
		for g, l := range reg.Leaders {
			if c.leaderOf(g) != l {
				return false
			}
		}
		return true
	})
	for id, n := range c.leaders() {
		if n > 2 {
			t.Errorf("node %d leads %d of 5 groups: %v", id, n, c.leaders())
		}
	}
}

// TestPlanNeverLosesALiveQuorum checks plans over random registries,
// present voters and live nodes: a target is always its group's factor of
// registered nodes, takes live nodes first, and a group that moves keeps
// a live quorum at every step of the reconciler's order.
func TestPlanNeverLosesALiveQuorum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		nodes := 3 + rng.IntN(5)
		var recs []NodeRecord
		for id := 1; id <= nodes; id++ {
			recs = append(recs, NodeRecord{ID: uint64(id), Addr: fmt.Sprint("n", id)})
		}
		reg := &Registry{Vnodes: 6, Factor: 3, RootVoters: 5, Nodes: recs}
		reg.place()
		live := map[uint64]bool{}
		for _, r := range recs {
			live[r.ID] = rng.IntN(4) > 0
		}
		var now []groupNow
		for _, g := range reg.groupIDs() {
			vs := slices.Clone(reg.Voters[g])
			if rng.IntN(2) == 0 { // a group still converging: some other voter set
				vs = hrw(g, reg.NodeIDs()[rng.IntN(nodes):], reg.factorOf(g))
			}
			now = append(now, groupNow{group: g, voters: vs})
		}
		p, cmd := planRebalance(reg, live, now)
		for _, pg := range p.Groups {
			k := reg.factorOf(pg.Group)
			if pg.Held != "" {
				continue
			}
			if len(pg.Target) != k {
				t.Fatalf("trial %d %s: target %v, factor %d", trial, pg.Name, pg.Target, k)
			}
			liveIn := 0
			for _, id := range pg.Target {
				liveIn += count(live[id])
			}
			liveAll := 0
			for _, id := range reg.NodeIDs() {
				liveAll += count(live[id])
			}
			if liveIn != min(k, liveAll) {
				t.Fatalf("trial %d %s: target %v has %d live nodes, %d live in all", trial, pg.Name, pg.Target, liveIn, liveAll)
			}
			cur := slices.Clone(pg.Voters)
			check := func() {
				n := 0
				for _, id := range cur {
					n += count(live[id])
				}
				if n < len(cur)/2+1 {
					t.Fatalf("trial %d %s: %v → %v passes %v with %d live (live %v)", trial, pg.Name, pg.Voters, pg.Target, cur, n, live)
				}
			}
			check()
			for _, a := range pg.Add {
				cur = append(cur, a)
				check()
			}
			for _, down := range []bool{true, false} {
				for _, r := range pg.Remove {
					if live[r] != down {
						cur = slices.DeleteFunc(cur, func(v uint64) bool { return v == r })
						check()
					}
				}
			}
		}
		if cmd != nil {
			after := reg.Clone()
			if err := after.apply(&regCommand{Kind: regRebalance, Rebalance: cmd}); err != nil {
				t.Fatalf("trial %d: the registry refuses its own plan: %v", trial, err)
			}
		}
	}
}

// TestRegistryRefusesAStalePlan: a plan made before a node registered
// does not apply, and voter sets that do not fit are refused.
func TestRegistryRefusesAStalePlan(t *testing.T) {
	reg := &Registry{Vnodes: 2, Factor: 3, RootVoters: 5, Nodes: []NodeRecord{{ID: 1, Addr: "a"}, {ID: 2, Addr: "b"}, {ID: 3, Addr: "c"}}}
	reg.place()
	g := VnodeGroup(0)
	for name, cmd := range map[string]*rebalanceCommand{
		"stale":         {Nodes: []uint64{1, 2}, Voters: map[uint64][]uint64{g: {1, 2, 3}}},
		"short":         {Nodes: []uint64{1, 2, 3}, Voters: map[uint64][]uint64{g: {1, 2}}},
		"twice":         {Nodes: []uint64{1, 2, 3}, Voters: map[uint64][]uint64{g: {1, 1, 2}}},
		"unknown node":  {Nodes: []uint64{1, 2, 3}, Voters: map[uint64][]uint64{g: {1, 2, 9}}},
		"unknown group": {Nodes: []uint64{1, 2, 3}, Voters: map[uint64][]uint64{99: {1, 2, 3}}},
		"leader":        {Nodes: []uint64{1, 2, 3}, Leaders: map[uint64]uint64{g: 7}},
	} {
		if err := reg.Clone().apply(&regCommand{Kind: regRebalance, Rebalance: cmd}); err == nil {
			t.Errorf("%s: plan applied", name)
		}
	}
	ok := &rebalanceCommand{Nodes: []uint64{1, 2, 3}, Leaders: map[uint64]uint64{g: 2}}
	if err := reg.apply(&regCommand{Kind: regRebalance, Rebalance: ok}); err != nil || reg.Leaders[g] != 2 {
		t.Fatalf("apply: %v, leaders %v", err, reg.Leaders)
	}
	if err := reg.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Leaders[g]; ok {
		t.Errorf("a removed node is still the chosen leader: %v", reg.Leaders)
	}
}
