package control

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/malachi-log/malachi/internal/placement"
)

// Placement of voters, and how it moves.
//
// The registry's Voters are the committed voter sets; the reconciler
// moves every group towards them. They change in three ways only:
//
//   - growth: a group with fewer voters than its factor (clamped to the
//     registered nodes) gains the best-ranked registered nodes by HRW,
//     at once, when a node registers (settle);
//   - removal: a removed node's slots go to the best-ranked other nodes,
//     at once, when it is removed (settle);
//   - rebalance: an operator's `malachi cluster rebalance --apply`, or the
//     root's leader in automatic mode, commits a plan (a rebalance
//     command in the root group): for every group, the voters HRW picks
//     over the live registered nodes, and a leader for every group so
//     that each live node leads about as many groups as the others.
//
// So a node joining a cluster whose groups have their factor already
// becomes a learner of every group and takes voter slots only when a
// rebalance is applied: moving replicas for balance is staged (the
// target over the live nodes, computed on demand), planned (shown with
// the moves it needs) and committed (applied), each a separate step.
// The reconciler carries a committed plan out as it does any change:
// add before remove, one change per group per round, none that would
// leave a group's voters without a live quorum.

// rebalanceCommand is a committed plan, in a root group entry.
type rebalanceCommand struct {
	// Nodes are the registered nodes the plan was made over; the command
	// is refused if the registry has others by the time it applies.
	Nodes []uint64 `json:"nodes"`
	// Voters are the new voter sets of the groups the plan moves.
	Voters map[uint64][]uint64 `json:"voters,omitempty"`
	// Leaders replace the registry's chosen leaders.
	Leaders map[uint64]uint64 `json:"leaders,omitempty"`
}

var errStalePlan = errors.New("control: the cluster's nodes changed since the rebalance was planned: plan again")

// factorOf is the voter count group g asks for: its factor clamped to the
// registered nodes.
func (r *Registry) factorOf(g uint64) int {
	f := r.Factor
	if g == RootGroup {
		f = r.RootVoters
	}
	return min(f, len(r.Nodes))
}

// placementKey is the HRW key of group g.
func placementKey(g uint64) uint32 {
	if g == RootGroup {
		return rootKey
	}
	return groupVnode(g)
}

func (r *Registry) groupIDs() []uint64 { return append([]uint64{RootGroup}, vnodeGroups(r.Vnodes)...) }

func placementNodes(recs []NodeRecord, keep func(uint64) bool) []placement.Node {
	out := make([]placement.Node, 0, len(recs))
	for _, n := range recs {
		if keep == nil || keep(n.ID) {
			out = append(out, placement.Node{ID: n.ID, Attributes: n.Attrs})
		}
	}
	return out
}

// ranking is every node of nodes, best first for group g.
func ranking(g uint64, nodes []placement.Node) []uint64 {
	return placement.VnodeReplicas(placementKey(g), nodes, len(nodes))
}

// settle keeps each group's committed voters that are still registered
// and brings the set to its factor: the best-ranked registered nodes fill
// a short set, the worst-ranked leave a long one. Chosen leaders that are
// no longer voters are dropped. Deterministic: it reads only the registry.
func (r *Registry) settle() {
	nodes := placementNodes(r.Nodes, nil)
	old := r.Voters
	r.Voters = make(map[uint64][]uint64, r.Vnodes+1)
	for _, g := range r.groupIDs() {
		r.Voters[g] = fill(old[g], ranking(g, nodes), r.factorOf(g))
	}
	for g, l := range r.Leaders {
		if !slices.Contains(r.Voters[g], l) {
			delete(r.Leaders, g)
		}
	}
	if len(r.Leaders) == 0 {
		r.Leaders = nil
	}
}

// fill keeps the members of cur found in rank, best first, up to k, and
// tops the set up with the best of the others; sorted.
func fill(cur, rank []uint64, k int) []uint64 {
	out := make([]uint64, 0, k)
	for _, id := range rank {
		if len(out) < k && slices.Contains(cur, id) {
			out = append(out, id)
		}
	}
	for _, id := range rank {
		if len(out) < k && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return sorted(out)
}

// rebalance applies a committed plan. It refuses one made over other
// nodes, or whose sets do not fit the groups' factors.
func (r *Registry) rebalance(c *rebalanceCommand) error {
	if c == nil || !slices.Equal(c.Nodes, r.NodeIDs()) {
		return errStalePlan
	}
	groups := r.groupIDs()
	for g, vs := range c.Voters {
		if !slices.Contains(groups, g) || len(sortedIDs(vs)) != len(vs) || len(vs) != r.factorOf(g) {
			return fmt.Errorf("control: rebalance: voters %v do not fit %s", vs, groupName(g))
		}
		for _, id := range vs {
			if !r.Has(id) {
				return fmt.Errorf("control: rebalance: node %d of %s is not registered", id, groupName(g))
			}
		}
	}
	for g, l := range c.Leaders {
		vs, ok := c.Voters[g]
		if !ok {
			vs = r.Voters[g]
		}
		if !slices.Contains(vs, l) {
			return fmt.Errorf("control: rebalance: leader %d of %s is not among its voters", l, groupName(g))
		}
	}
	for g, vs := range c.Voters {
		r.Voters[g] = sortedIDs(vs)
	}
	r.Leaders = maps.Clone(c.Leaders)
	return nil
}

// Plan is a rebalance as the root group's leader staged it: for every
// group, the voters to reach placement over the live nodes and the leader
// that spreads leadership, with the moves from the groups' present
// configuration. Applied says it was committed.
type Plan struct {
	Applied bool        `json:"applied"`
	Nodes   []PlanNode  `json:"nodes"`
	Groups  []PlanGroup `json:"groups"`
}

// PlanNode is one registered node in a plan: whether the root's leader
// hears from it, and how many groups it votes in and leads, now and once
// the plan is carried out.
type PlanNode struct {
	ID         uint64 `json:"id"`
	Live       bool   `json:"live"`
	Voter      int    `json:"voter"`
	VoterAfter int    `json:"voter_after"`
	Leads      int    `json:"leads"`
	LeadsAfter int    `json:"leads_after"`
}

// PlanGroup is one group in a plan. Add and Remove are the voters the
// group gains and loses (the reconciler adds before it removes); Leader
// is the leader now and NewLeader the one the plan picks (0: none, no
// live voter). Held says why the group's voters do not move: the moves
// would leave its voters without a live quorum at some step.
type PlanGroup struct {
	Group     uint64   `json:"group"`
	Name      string   `json:"name"`
	Voters    []uint64 `json:"voters"`
	Target    []uint64 `json:"target"`
	Add       []uint64 `json:"add,omitempty"`
	Remove    []uint64 `json:"remove,omitempty"`
	Leader    uint64   `json:"leader"`
	NewLeader uint64   `json:"new_leader"`
	Held      string   `json:"held,omitempty"`
}

// Moves counts the voter changes and leadership changes the plan makes.
func (p *Plan) Moves() int {
	n := 0
	for _, g := range p.Groups {
		n += len(g.Add) + len(g.Remove)
		if g.NewLeader != 0 && g.NewLeader != g.Leader {
			n++
		}
	}
	return n
}

// groupNow is a group's present configuration as the planner sees it.
type groupNow struct {
	group          uint64
	voters, leader []uint64 // leader: zero or one id
}

// planRebalance stages a rebalance: pure, it reads the registry, the
// live nodes and the groups' present configuration, and returns the plan
// with the command that commits it (nil when it changes nothing the
// registry holds).
func planRebalance(reg *Registry, live map[uint64]bool, now []groupNow) (Plan, *rebalanceCommand) {
	isLive := func(id uint64) bool { return live[id] && reg.Has(id) }
	all := placementNodes(reg.Nodes, nil)
	liveNodes := placementNodes(reg.Nodes, isLive)
	cmd := &rebalanceCommand{Nodes: reg.NodeIDs(), Voters: map[uint64][]uint64{}, Leaders: map[uint64]uint64{}}
	var p Plan
	for _, gn := range now {
		g := gn.group
		k := reg.factorOf(g)
		target := placement.VnodeReplicas(placementKey(g), liveNodes, k)
		if len(target) < k {
			// Too few live nodes: keep the committed voters that are down
			// rather than shrink the group, then the best of the others.
			for _, pass := range []func(uint64) bool{
				func(id uint64) bool { return slices.Contains(reg.Voters[g], id) }, func(uint64) bool { return true },
			} {
				for _, id := range ranking(g, all) {
					if len(target) < k && pass(id) && !slices.Contains(target, id) {
						target = append(target, id)
					}
				}
			}
		}
		target = sortedIDs(target)
		pg := PlanGroup{Group: g, Name: groupName(g), Voters: sortedIDs(gn.voters), Target: target}
		if len(gn.leader) == 1 {
			pg.Leader = gn.leader[0]
		}
		if why := quorumKept(pg.Voters, target, isLive); why != "" {
			// The group stays as it is, as far as this plan goes.
			pg.Held, pg.Target = why, pg.Voters
		} else {
			pg.Add, pg.Remove = minus(target, pg.Voters), minus(pg.Voters, target)
			if !slices.Equal(target, reg.Voters[g]) {
				cmd.Voters[g] = target
			}
		}
		p.Groups = append(p.Groups, pg)
	}
	committed := func(g uint64) []uint64 {
		if vs, ok := cmd.Voters[g]; ok {
			return vs
		}
		return reg.Voters[g]
	}
	spreadLeaders(&p, reg, isLive, committed)
	for _, pg := range p.Groups {
		if pg.NewLeader != 0 {
			cmd.Leaders[pg.Group] = pg.NewLeader
		}
	}
	for _, n := range reg.Nodes {
		pn := PlanNode{ID: n.ID, Live: isLive(n.ID)}
		for _, pg := range p.Groups {
			pn.Voter += count(slices.Contains(pg.Voters, n.ID))
			pn.VoterAfter += count(slices.Contains(pg.Target, n.ID))
			pn.Leads += count(pg.Leader == n.ID)
			pn.LeadsAfter += count(pg.NewLeader == n.ID)
		}
		p.Nodes = append(p.Nodes, pn)
	}
	if len(cmd.Voters) == 0 && maps.Equal(cmd.Leaders, reg.Leaders) {
		return p, nil
	}
	if len(cmd.Voters) == 0 {
		cmd.Voters = nil
	}
	return p, cmd
}

func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// minus is a without b, sorted.
func minus(a, b []uint64) []uint64 {
	var out []uint64
	for _, id := range a {
		if !slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return sortedIDs(out)
}

// quorumKept walks a group from voters to target as the reconciler does,
// every addition first (one at a time), then every removal (down nodes
// first), and says why it cannot: some step would leave the voters
// without a quorum of live nodes. "" when every step keeps one.
func quorumKept(voters, target []uint64, live func(uint64) bool) string {
	cur := slices.Clone(voters)
	check := func() string {
		n := 0
		for _, id := range cur {
			n += count(live(id))
		}
		if n >= len(cur)/2+1 {
			return ""
		}
		var down []uint64
		for _, id := range cur {
			if !live(id) {
				down = append(down, id)
			}
		}
		return fmt.Sprintf("voters %v would have no live quorum without %s; bring %s back or remove %s",
			sortedIDs(cur), nodeList(sortedIDs(down)), nodeList(sortedIDs(down)), pronoun(down))
	}
	if why := check(); why != "" {
		return why
	}
	for _, id := range minus(target, voters) {
		cur = append(cur, id)
		if why := check(); why != "" {
			return why
		}
	}
	removals := minus(voters, target)
	slices.SortStableFunc(removals, func(a, b uint64) int { return count(live(a)) - count(live(b)) })
	for _, id := range removals {
		cur = slices.DeleteFunc(cur, func(v uint64) bool { return v == id })
		if why := check(); why != "" {
			return why
		}
	}
	return ""
}

// spreadLeaders picks a leader for every group among its live target
// voters so that each live node leads about as many groups as the
// others: the leader chosen before (or the present one) is kept while
// its node leads fewer than its share; the other groups go to the least
// loaded voter; then a group moves from the most loaded node to a voter
// leading at least two fewer, until none can.
//
// A leader is one of the group's target voters that the registry will
// hold as voters once the plan is committed (committed), since only
// those does the reconciler hand leadership to.
func spreadLeaders(p *Plan, reg *Registry, live func(uint64) bool, committed func(uint64) []uint64) {
	load := map[uint64]int{}
	nodes := 0
	for _, n := range reg.Nodes {
		if live(n.ID) {
			load[n.ID] = 0
			nodes++
		}
	}
	if nodes == 0 {
		return
	}
	candidates := func(pg *PlanGroup) []uint64 {
		vs := committed(pg.Group)
		return slices.DeleteFunc(slices.Clone(pg.Target), func(id uint64) bool { return !live(id) || !slices.Contains(vs, id) })
	}
	share := (len(p.Groups) + nodes - 1) / nodes
	var open []int
	for i := range p.Groups {
		pg := &p.Groups[i]
		prev := pg.Leader
		if l, ok := reg.Leaders[pg.Group]; ok {
			prev = l
		}
		if slices.Contains(candidates(pg), prev) && load[prev] < share {
			pg.NewLeader = prev
			load[prev]++
			continue
		}
		open = append(open, i)
	}
	least := func(ids []uint64, prefer uint64) uint64 {
		best := uint64(0)
		for _, id := range ids {
			if best == 0 || load[id] < load[best] || load[id] == load[best] && id == prefer {
				best = id
			}
		}
		return best
	}
	for _, i := range open {
		pg := &p.Groups[i]
		if l := least(candidates(pg), pg.Leader); l != 0 {
			pg.NewLeader = l
			load[l]++
		}
	}
	for range len(p.Groups) * nodes {
		moved := false
		for i := range p.Groups {
			pg := &p.Groups[i]
			if pg.NewLeader == 0 {
				continue
			}
			if to := least(candidates(pg), 0); to != 0 && load[to]+2 <= load[pg.NewLeader] {
				load[pg.NewLeader]--
				load[to]++
				pg.NewLeader = to
				moved = true
			}
		}
		if !moved {
			return
		}
	}
}
