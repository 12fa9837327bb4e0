package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/malachi-log/malachi/internal/raft"
)

// Join makes this node a member of the cluster its Config.Seeds belong
// to. It asks the seeds in turn (each forwards the request to the root
// group's leader) to register the node, then hosts an empty replica of
// the root and of every vnode group. The groups' leaders add it as a
// learner everywhere, it catches up from snapshots, and it is promoted to
// voter where placement picks it (the reconciler).
//
// Join is idempotent, and a restarted node calls it too: its own root
// replica may be stale (the node may have been removed, or other nodes
// may know another address for it), so Join trusts it only when it
// names this node with this Config's address, attributes and incarnation
// and a Barrier on the root confirms it is current; otherwise it
// registers again, which records a new address or new attributes. A
// removed node id is refused for good (a removed node must come back
// with a wiped data directory and a new node id: raft never reuses a
// replica id), and so is a registered id with another incarnation.
// Join returns ErrUnavailable when no seed could register the node
// within ctx; a restarted node that gets it still recovers its groups
// from its log, but cannot tell whether the cluster still has it.
func (n *Node) Join(ctx context.Context) error {
	if reg := n.confirmedMember(ctx); reg != nil {
		return n.adoptRing(reg)
	}
	self := n.cfg.self()
	req := fwdRequest{Op: opJoin, Node: &self}
	seeds := slices.Sorted(maps.Keys(n.cfg.Seeds))
	seeds = slices.DeleteFunc(seeds, func(id uint64) bool { return id == n.cfg.NodeID })
	if len(seeds) == 0 {
		if n.sm(RootGroup) == nil {
			return errors.New("control: Join needs Config.Seeds")
		}
		// A member with no other seed registers through its own root
		// replica, which knows the leader.
		out, err := n.proposeEntry(ctx, RootGroup, entry{Reg: &regCommand{Kind: regRegister, Node: self}})
		if err != nil {
			return err
		}
		return n.joined(out)
	}
	var last error
	for {
		for _, id := range seeds {
			if err := n.usable(); err != nil {
				return err
			}
			n.tr.SetAddr(id, n.cfg.Seeds[id])
			b, err := n.call(ctx, id, RootGroup, req)
			if err != nil {
				last = err
				if !retriable(err) {
					return err
				}
				continue
			}
			out, err := decodeOutcome(b)
			if err != nil {
				return err
			}
			return n.joined(out)
		}
		if ctx.Err() != nil || !n.waitTick(ctx) {
			return unavailable(ctx, last)
		}
	}
}

// joined takes the answer to a registration.
func (n *Node) joined(out outcome) error {
	switch {
	case out.Err != "":
		return fmt.Errorf("control: join refused: %s", out.Err)
	case out.Registry == nil || out.Registry.validate() != nil:
		return errors.New("control: join answered without a valid registry")
	}
	n.onRegistry(out.Registry)
	return n.adoptRing(out.Registry)
}

// confirmedMember returns the registry when this node's root replica
// names it exactly as its Config does and a Barrier confirms the replica
// is current (a removed node's replica, which no longer hears from the
// root, cannot confirm); nil otherwise. The Barrier is bounded to a few
// election timeouts: Join then registers through the seeds instead.
func (n *Node) confirmedMember(ctx context.Context) *Registry {
	root := n.sm(RootGroup)
	if root == nil || !n.namesSelf(root.registry()) {
		return nil
	}
	bctx, cancel := n.withTicks(ctx, 4*n.cfg.ElectionTicks)
	defer cancel()
	if n.Barrier(bctx, RootGroup) != nil {
		return nil
	}
	if reg := root.registry(); n.namesSelf(reg) {
		return reg
	}
	return nil
}

// namesSelf reports whether reg records this node as its Config does.
func (n *Node) namesSelf(reg *Registry) bool {
	if reg == nil {
		return false
	}
	rec, ok := reg.Node(n.cfg.NodeID)
	self := n.cfg.self()
	return ok && rec.Addr == self.Addr && rec.Incarnation == self.Incarnation && maps.Equal(rec.Attrs, self.Attrs)
}

// Remove takes node out of the cluster: it is deleted from the registry,
// so placement moves its voter slots to other nodes; the group leaders
// promote the replacements first and only then remove the node from each
// group (add before remove, the factor kept). The removed id is never
// registered again (see Join).
//
// The root's leader refuses the removal when, once placement has moved
// the voters, some group's voters would not include a live quorum (a
// voter not heard from within two election timeouts counts as down):
// removing a live node while another voter is down would stop such a
// group. The refusal names the node to bring back or to remove first.
// Removing a down node is allowed whenever the remaining live voters
// form a quorum: that is how a cluster recovers from a dead node. Group
// leaders check the same before every replica change they make, and
// hold back (Status shows why) a change that would leave no live quorum.
//
// An id that is not registered is refused (a mistyped id), unless it was
// removed before: a repeated removal succeeds.
//
// Remove returns once this node's replicas show the node in no group, or
// ErrUnavailable when ctx ends first (the removal then carries on in the
// background). A node cannot remove itself: its replicas stop hearing of
// the groups once it is out, so it could not tell when it is done; ask
// another node.
func (n *Node) Remove(ctx context.Context, node uint64) error {
	if node == n.cfg.NodeID {
		return errors.New("control: a node cannot remove itself; call Remove on another node")
	}
	data, err := n.stamp(entry{Reg: &regCommand{Kind: regRemove, Node: NodeRecord{ID: node}}})
	if err != nil {
		return err
	}
	res, err := n.atLeader(ctx, RootGroup, func(ctx context.Context, target uint64) ([]byte, error) {
		if target == n.cfg.NodeID {
			return n.removeHere(ctx, data)
		}
		return n.call(ctx, target, RootGroup, fwdRequest{Op: opRemove, Group: RootGroup, Data: data})
	})
	if err != nil {
		return err
	}
	out, err := decodeOutcome(res)
	if err != nil {
		return err
	}
	if out.Err != "" && out.Err != errUnknownNode.Error() {
		return fmt.Errorf("control: remove node %d: %s", node, out.Err)
	}
	for len(n.groupsWith(node)) > 0 {
		if !n.waitTick(ctx) {
			return fmt.Errorf("%w: node %d still in %v", unavailable(ctx, nil), node, n.groupsWith(node))
		}
	}
	return nil
}

// removeHere proposes a remove_node entry at the root's leader, once
// removalBlocked has nothing against it. A leader just elected may not
// have heard from every node yet, so it waits up to two election
// timeouts for the removal to become safe before refusing it.
func (n *Node) removeHere(ctx context.Context, data []byte) ([]byte, error) {
	var e entry
	if err := json.Unmarshal(data, &e); err != nil || e.Reg == nil || e.Reg.Kind != regRemove {
		return nil, errors.New("control: remove request without a remove_node entry")
	}
	st, err := n.host.Status(RootGroup)
	if err != nil {
		return nil, err
	}
	if st.State != "StateLeader" {
		return nil, &raft.NotLeaderError{Group: RootGroup, Leader: st.Leader}
	}
	if res, err := n.unregistered(e.Reg.Node.ID); res != nil || err != nil {
		return res, err
	}
	since := n.cfg.Clock.Now()
	wctx, cancel := n.withTicks(ctx, 2*n.cfg.ElectionTicks)
	defer cancel()
	why := fmt.Sprintf("control: removing node %d: no tick passed to hear from the nodes", e.Reg.Node.ID)
	for {
		// Wait a tick first: only frames heard after since count.
		if !n.waitTick(wctx) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &refusal{msg: why}
		}
		reg, err := n.Registry()
		if err != nil {
			return nil, err
		}
		if why = n.removalBlocked(reg, e.Reg.Node.ID, since); why == "" {
			break
		}
	}
	return n.host.Propose(ctx, RootGroup, data)
}

// unregistered answers the removal of a node id the leader's registry
// does not hold: done already when the id was removed before (a repeated
// removal), refused otherwise (a mistyped id must not be reported
// removed while the node meant stays in every group). It returns nil,
// nil for a registered node.
func (n *Node) unregistered(node uint64) ([]byte, error) {
	reg, err := n.Registry()
	if err != nil {
		return nil, err
	}
	switch {
	case reg.Has(node):
		return nil, nil
	case slices.Contains(reg.Removed, node):
		return encodeOutcome(outcome{}), nil
	}
	return nil, &refusal{msg: fmt.Sprintf("control: remove node %d: node %d is not registered", node, node)}
}

// groupsWith lists the hosted groups whose configuration, as this node's
// replica knows it, names node as a voter or learner.
func (n *Node) groupsWith(node uint64) []uint64 {
	var out []uint64
	for _, g := range n.groups() {
		st, err := n.host.Status(g)
		if err == nil && (slices.Contains(st.Voters, node) || slices.Contains(st.Learners, node)) {
			out = append(out, g)
		}
	}
	return out
}

// Registry returns a copy of the registry as this node's root replica
// holds it.
func (n *Node) Registry() (*Registry, error) {
	root := n.sm(RootGroup)
	if root == nil {
		return nil, ErrNotJoined
	}
	reg := root.registry()
	if reg == nil {
		return nil, ErrNotJoined
	}
	return reg, nil
}

// sortedIDs is ids sorted, without duplicates.
func sortedIDs(ids []uint64) []uint64 {
	out := slices.Clone(ids)
	slices.SortFunc(out, cmp.Compare)
	return slices.Compact(out)
}
