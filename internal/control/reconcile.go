package control

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/raft"
)

// The reconciler moves each group's replicas towards the registry. It
// runs on every node, every Config.ReconcileTicks, and acts only on the
// groups this node leads (a replica change is proposed at the leader), one
// change per group per round, reading the registry from this node's root
// replica. That replica may be behind; acting on an old registry only
// delays convergence, since every change it makes is one the next rounds
// would undo or complete, and the order of plan keeps a group's voters
// from ever dropping below what placement asks for.
func (n *Node) runReconciler(ctx context.Context) {
	defer n.wg.Done()
	every := time.Duration(n.cfg.ReconcileTicks) * n.cfg.TickInterval
	for {
		t := n.cfg.Clock.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		n.reconcile(ctx)
	}
}

// liveRound is how a reconciler round judges liveness: a node is live
// when heard from after the round began, and a change that needs more
// live voters waits for their frames until deadline (an election timeout
// after the start), then waits for the next round.
type liveRound struct {
	since, deadline time.Time
}

func (n *Node) reconcile(ctx context.Context) {
	now := n.cfg.Clock.Now()
	round := liveRound{since: now, deadline: now.Add(time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval)}
	reg, err := n.Registry()
	if err != nil {
		return
	}
	if reg.Has(n.cfg.NodeID) {
		// Host any group not hosted yet (a node restarted before its
		// root replica was filled learns the ring here).
		if err := n.adoptRing(reg); err != nil {
			n.cfg.Logger.Warn("control: host groups", "node", n.cfg.NodeID, "err", err)
		}
	}
	members := reg.NodeIDs()
	var settled []uint64 // led here, voters as committed: leadership may move
	for _, g := range n.groups() {
		st, err := n.host.Status(g)
		if err != nil || st.Leader != n.cfg.NodeID || st.State != "StateLeader" {
			n.setWaiting(g, "")
			continue
		}
		changes := plan(reg.Voters[g], members, st.Voters, st.Learners)
		if len(changes) == 0 {
			settled = append(settled, g)
		}
		n.setWaiting(g, n.reconcileGroup(ctx, g, st.Voters, changes, round))
	}
	n.transferLeaders(ctx, reg, settled, round)
	if n.cfg.AutoRebalance {
		n.autoRebalance(ctx, reg)
	}
	n.forgetRemoved()
}

// reconcileGroup makes the first change of the plan that the group
// accepts; a learner still catching up lets the next candidate go first,
// and so does a change that would leave the voters without a live quorum
// (a removal while another voter is down, a promotion of a node that is
// down while a voter is): raft would take it, and the group would stop
// until the down node came back. It returns why no change was made when
// one was held back for that reason (Status shows it), else "".
func (n *Node) reconcileGroup(ctx context.Context, g uint64, voters []uint64, changes []raft.ReplicaChange, round liveRound) string {
	blocked := ""
	for _, c := range changes {
		why := n.changeBlocked(voters, c, round.since)
		for why != "" && n.cfg.Clock.Now().Before(round.deadline) && n.waitTick(ctx) {
			why = n.changeBlocked(voters, c, round.since)
		}
		if why != "" {
			if blocked == "" {
				blocked = why
			}
			continue
		}
		cctx, cancel := n.withTicks(ctx, 2*n.cfg.ElectionTicks)
		err := n.host.ChangeReplicas(cctx, g, c)
		cancel()
		switch {
		case err == nil:
			n.cfg.Logger.Info("control: replica change", "group", groupName(g), "change", c.Kind.String(), "node", c.Node)
			return ""
		case errors.Is(err, raft.ErrLearnerBehind):
			continue
		default:
			n.cfg.Logger.Debug("control: replica change failed", "group", groupName(g), "change", c.Kind.String(), "node", c.Node, "err", err)
			return ""
		}
	}
	return blocked
}

// setWaiting records why group g holds a replica change back ("" for
// nothing), for Status, and logs a new reason once.
func (n *Node) setWaiting(g uint64, why string) {
	n.mu.Lock()
	old := n.waiting[g]
	if why == "" {
		delete(n.waiting, g)
	} else {
		n.waiting[g] = why
	}
	n.mu.Unlock()
	if why != "" && why != old {
		n.cfg.Logger.Warn("control: replica change held back", "group", groupName(g), "reason", why)
	}
}

// plan lists the replica changes that move a group from (voters, learners)
// towards placement's voters, in the order they may be made:
//  1. every member that is no replica becomes a learner;
//  2. a learner placement picks is promoted (once caught up);
//  3. only when every picked node is a voter, a voter placement no longer
//     picks is removed: a member then comes back as a learner by step 1,
//     a removed node stays out (add before remove, the factor kept); every
//     such voter is a candidate, in id order, since the reconciler skips
//     one whose removal would leave no live quorum;
//  4. a learner that is no member any more is removed.
func plan(placed, members, voters, learners []uint64) []raft.ReplicaChange {
	replica := func(id uint64) bool { return slices.Contains(voters, id) || slices.Contains(learners, id) }
	var out []raft.ReplicaChange
	for _, m := range members {
		if !replica(m) {
			out = append(out, raft.ReplicaChange{Kind: raft.AddLearner, Node: m})
		}
	}
	for _, p := range placed {
		if slices.Contains(learners, p) {
			out = append(out, raft.ReplicaChange{Kind: raft.PromoteLearner, Node: p})
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, p := range placed {
		if !slices.Contains(voters, p) {
			return nil // a picked node is not a replica yet: nothing leaves first
		}
	}
	for _, v := range sortedIDs(voters) {
		if !slices.Contains(placed, v) {
			out = append(out, raft.ReplicaChange{Kind: raft.RemoveVoter, Node: v})
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, l := range sortedIDs(learners) {
		if !slices.Contains(members, l) {
			return []raft.ReplicaChange{{Kind: raft.RemoveVoter, Node: l}}
		}
	}
	return nil
}

// forgetRemoved drops from the transport the nodes that left the registry
// once they are in no group this node hosts. The final check and the drop
// happen under n.mu, which onRegistry holds too, so a node registered
// again in between keeps its address.
func (n *Node) forgetRemoved() {
	n.mu.Lock()
	var gone []uint64
	for id := range n.leaving {
		gone = append(gone, id)
	}
	n.mu.Unlock()
	for _, id := range gone {
		if len(n.groupsWith(id)) > 0 {
			continue
		}
		n.mu.Lock()
		if n.leaving[id] {
			delete(n.leaving, id)
			delete(n.addrs, id)
			n.tr.RemoveNode(id)
			n.live.forget(id)
		}
		n.mu.Unlock()
	}
}
