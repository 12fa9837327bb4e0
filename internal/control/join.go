package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Join makes this node a member of the cluster its Config.Seeds belong
// to. It asks the seeds in turn (each forwards the request to the root
// group's leader) to register the node, then hosts an empty replica of
// the root and of every vnode group. The groups' leaders add it as a
// learner everywhere, it catches up from snapshots, and it is promoted to
// voter where placement picks it (the reconciler). Join is idempotent: a
// node already registered (a bootstrapped or restarted one) returns nil.
// It returns ErrUnavailable when no seed could register it within ctx.
func (n *Node) Join(ctx context.Context) error {
	if root := n.sm(RootGroup); root != nil {
		if reg := root.registry(); reg != nil && reg.Has(n.cfg.NodeID) {
			return n.adoptRing(reg)
		}
	}
	seeds := slices.Sorted(maps.Keys(n.cfg.Seeds))
	seeds = slices.DeleteFunc(seeds, func(id uint64) bool { return id == n.cfg.NodeID })
	if len(seeds) == 0 {
		return errors.New("control: Join needs Config.Seeds")
	}
	self := NodeRecord{ID: n.cfg.NodeID, Addr: n.cfg.Addr, Attrs: n.cfg.Attrs}
	var last error
	for {
		for _, id := range seeds {
			if err := n.usable(); err != nil {
				return err
			}
			n.tr.SetAddr(id, n.cfg.Seeds[id])
			b, err := n.call(ctx, id, RootGroup, fwdRequest{Op: opJoin, Node: &self})
			if err != nil {
				last = err
				if !retriable(err) {
					return err
				}
				continue
			}
			out, err := decodeOutcome(b)
			switch {
			case err != nil:
				return err
			case out.Err != "":
				return fmt.Errorf("control: join refused: %s", out.Err)
			case out.Registry == nil || out.Registry.validate() != nil:
				return errors.New("control: join answered without a valid registry")
			}
			n.onRegistry(out.Registry)
			return n.adoptRing(out.Registry)
		}
		if ctx.Err() != nil || !n.waitTick(ctx) {
			return unavailable(ctx, last)
		}
	}
}

// Remove takes node out of the cluster: it is deleted from the registry,
// so placement moves its voter slots to other nodes; the group leaders
// promote the replacements first and only then remove the node from each
// group (add before remove, the factor kept). Remove returns once this
// node's replicas show the node in no group, or ErrUnavailable when ctx
// ends first (the removal then carries on in the background). A node
// cannot remove itself: its replicas stop hearing of the groups once it
// is out, so it could not tell when it is done; ask another node.
func (n *Node) Remove(ctx context.Context, node uint64) error {
	if node == n.cfg.NodeID {
		return errors.New("control: a node cannot remove itself; call Remove on another node")
	}
	out, err := n.proposeEntry(ctx, RootGroup, entry{Reg: &regCommand{Kind: regRemove, Node: NodeRecord{ID: node}}})
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
