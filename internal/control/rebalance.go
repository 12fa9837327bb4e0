package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/raft"
)

// Rebalance stages a rebalance at the root group's leader and returns
// its plan: for every group, the voters placement picks over the live
// registered nodes (live: heard from by the root's leader, which hears
// every node each tick, within an election timeout of the request), the
// moves to get there from the group's present voters, and a leader for
// every group so that the live nodes lead about as many groups each.
// A group whose moves would leave its voters without a live quorum at
// some step stays as it is (PlanGroup.Held says why).
//
// With apply the plan is committed in the root group (a rebalance
// command), unless it changes nothing; the group leaders' reconcilers
// then carry it out: add before remove, one change per group per round,
// each checked again for a live quorum when it is made, and leadership
// handed to the chosen leader once it is a caught-up voter. The chosen
// leaders stay in the registry, so a chosen leader that restarts gets
// its groups back. Rebalance returns once the plan is committed, not
// carried out; Status shows the progress.
func (n *Node) Rebalance(ctx context.Context, apply bool) (Plan, error) {
	res, err := n.atLeader(ctx, RootGroup, func(ctx context.Context, target uint64) ([]byte, error) {
		if target == n.cfg.NodeID {
			return n.rebalanceHere(ctx, apply)
		}
		return n.call(ctx, target, RootGroup, fwdRequest{Op: opRebalance, Group: RootGroup, Apply: apply})
	})
	if err != nil {
		return Plan{}, err
	}
	var p Plan
	if err := json.Unmarshal(res, &p); err != nil {
		return Plan{}, fmt.Errorf("control: bad rebalance plan: %v", err)
	}
	return p, nil
}

// rebalanceHere plans, and with apply commits, a rebalance at the root's
// leader; it answers the encoded Plan.
func (n *Node) rebalanceHere(ctx context.Context, apply bool) ([]byte, error) {
	st, err := n.host.Status(RootGroup)
	if err != nil {
		return nil, err
	}
	if st.State != "StateLeader" {
		return nil, &raft.NotLeaderError{Group: RootGroup, Leader: st.Leader}
	}
	live, err := n.hearNodes(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := n.Registry()
	if err != nil {
		return nil, err
	}
	p, cmd := planRebalance(reg, live, n.groupsNow(reg))
	if apply && cmd != nil {
		out, err := n.proposeEntry(ctx, RootGroup, entry{Reg: &regCommand{Kind: regRebalance, Rebalance: cmd}})
		if err != nil {
			return nil, err
		}
		if out.Err != "" {
			return nil, &refusal{msg: out.Err}
		}
		n.cfg.Logger.Info("control: rebalance committed", "moves", p.Moves())
	}
	p.Applied = apply
	return json.Marshal(p)
}

// hearNodes waits for a frame from every registered node, a tick at a
// time, up to an election timeout, and returns the nodes heard from after
// the call began (this node among them): the live nodes. Only frames
// after the call count: a node stopped a moment ago was heard within any
// window.
func (n *Node) hearNodes(ctx context.Context) (map[uint64]bool, error) {
	since := n.cfg.Clock.Now()
	var live map[uint64]bool
	for range n.cfg.ElectionTicks {
		if !n.waitTick(ctx) {
			return nil, unavailable(ctx, errors.New("control: rebalance: listening for the nodes"))
		}
		reg, err := n.Registry()
		if err != nil {
			return nil, err
		}
		live = n.heardSince(reg, since)
		if len(live) == len(reg.Nodes) {
			break
		}
	}
	return live, nil
}

// heardSince is the registered nodes heard from after since, this node
// among them.
func (n *Node) heardSince(reg *Registry, since time.Time) map[uint64]bool {
	live := map[uint64]bool{}
	for _, id := range reg.NodeIDs() {
		if id == n.cfg.NodeID || n.live.heardAfter(id, since) {
			live[id] = true
		}
	}
	return live
}

func (l *liveness) heardAfter(node uint64, since time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.last[node]
	return ok && t.After(since)
}

// groupsNow is every group's present voters and leader as this node's
// replicas know them; a group not hosted here counts with its committed
// voters and no leader.
func (n *Node) groupsNow(reg *Registry) []groupNow {
	var out []groupNow
	for _, g := range reg.groupIDs() {
		gn := groupNow{group: g, voters: reg.Voters[g]}
		if st, err := n.host.Status(g); err == nil {
			gn.voters = sortedIDs(st.Voters)
			if st.Leader != 0 {
				gn.leader = []uint64{st.Leader}
			}
		}
		out = append(out, gn)
	}
	return out
}

// transferLeaders hands the leadership of the groups this node leads
// and whose voters are settled (settled) to the leader the registry
// chose for them, when that voter was heard from during the round (a tick
// is waited for that); raft completes the transfer in a round trip.
func (n *Node) transferLeaders(ctx context.Context, reg *Registry, settled []uint64, round liveRound) {
	var groups []uint64
	for _, g := range settled {
		if l, ok := reg.Leaders[g]; ok && l != n.cfg.NodeID {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		return
	}
	// Only frames after the round began count: wait one tick for them.
	if !n.waitTick(ctx) {
		return
	}
	for _, g := range groups {
		to := reg.Leaders[g]
		if !n.live.heardAfter(to, round.since) {
			continue
		}
		if err := n.host.TransferLeadership(g, to); err != nil {
			n.cfg.Logger.Debug("control: leadership transfer not started", "group", groupName(g), "to", to, "err", err)
			continue
		}
		n.cfg.Logger.Info("control: leadership transfer", "group", groupName(g), "to", to)
	}
}

// autoState is the automatic rebalancer's memory, kept by the reconciler
// goroutine alone.
type autoState struct {
	key   string    // the registered and live nodes last seen
	since time.Time // when key last changed
}

// autoRebalance, on the root's leader with Config.AutoRebalance, commits
// the rebalance plan once the registered nodes, and which of them are
// live, have stayed the same for Config.RebalanceStable, if the plan
// changes anything. Live here is heard from within an election timeout:
// a node that stops drops out of the set within one, which restarts the
// stable period, so a plan is never made over a node stopped for less
// than RebalanceStable. Each change the plan leads to is checked again,
// strictly, by the group's leader when it is made.
func (n *Node) autoRebalance(ctx context.Context, reg *Registry) {
	a := &n.auto
	st, err := n.host.Status(RootGroup)
	if err != nil || st.State != "StateLeader" {
		a.key = ""
		return
	}
	now := n.cfg.Clock.Now()
	live := n.heardSince(reg, now.Add(-time.Duration(n.cfg.ElectionTicks)*n.cfg.TickInterval))
	key := fmt.Sprint(reg.NodeIDs(), slices.Sorted(maps.Keys(live)))
	if key != a.key {
		a.key, a.since = key, now
		return
	}
	if now.Sub(a.since) < n.cfg.RebalanceStable {
		return
	}
	p, cmd := planRebalance(reg, live, n.groupsNow(reg))
	if cmd == nil {
		return
	}
	pctx, cancel := n.withTicks(ctx, 2*n.cfg.ElectionTicks)
	defer cancel()
	out, err := n.proposeEntry(pctx, RootGroup, entry{Reg: &regCommand{Kind: regRebalance, Rebalance: cmd}})
	switch {
	case err != nil:
		n.cfg.Logger.Warn("control: automatic rebalance not committed", "err", err)
	case out.Err != "":
		n.cfg.Logger.Warn("control: automatic rebalance refused", "reason", out.Err)
	default:
		n.cfg.Logger.Info("control: automatic rebalance committed", "moves", p.Moves(), "stable_for", now.Sub(a.since))
	}
}
