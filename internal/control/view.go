package control

import (
	"context"

	"github.com/malachi-log/malachi/internal/metadata"
)

// Reads. Every node holds a replica of every group, so reads are served
// from local state: fn runs under the group's read lock, which the raft
// cycle needs to apply the next entry, so fn must be short and must not
// call the Node. The local replica may be behind the group's leader
// (never ahead of what is committed); callers that must see the latest
// state call Barrier first (C2). A state read here is never changed
// through fn: it is metadata.State's own accessors, which return copies.

// View runs fn on group's local state.
func (n *Node) View(group uint64, fn func(*metadata.State)) error {
	sm := n.sm(group)
	if sm == nil {
		return ErrUnknownGroup
	}
	sm.view(fn)
	return nil
}

// ViewRoot runs fn on the root group's state: users, ACLs, cluster id and
// secret.
func (n *Node) ViewRoot(fn func(*metadata.State)) error { return n.View(RootGroup, fn) }

// ViewID runs fn on the state of the vnode that holds a topic, range or
// segment id, with the group's id.
func (n *Node) ViewID(id uint64, fn func(*metadata.State)) error {
	g := GroupOfID(id)
	if !isVnodeGroup(g, n.Vnodes()) {
		return ErrUnknownGroup
	}
	return n.View(g, fn)
}

// ViewTopic is ViewID for a topic id.
func (n *Node) ViewTopic(id uint64, fn func(*metadata.State)) error { return n.ViewID(id, fn) }

// ViewTopicName runs fn on the state of the vnode the topic name maps to
// on the ring (where it is, or would be created).
func (n *Node) ViewTopicName(name string, fn func(*metadata.State)) error {
	g, err := n.GroupOfTopic(name)
	if err != nil {
		return err
	}
	return n.View(g, fn)
}

// ViewEach runs fn on every vnode's state in group order (for listings).
func (n *Node) ViewEach(fn func(group uint64, st *metadata.State)) error {
	v := n.Vnodes()
	if v == 0 {
		return ErrNotJoined
	}
	for _, g := range vnodeGroups(v) {
		if sm := n.sm(g); sm != nil {
			sm.view(func(st *metadata.State) { fn(g, st) })
		}
	}
	return nil
}

// GroupOfTopic is the vnode group a topic name maps to.
func (n *Node) GroupOfTopic(name string) (uint64, error) {
	ring, err := n.ring()
	if err != nil {
		return 0, err
	}
	return VnodeGroup(ring.VnodeOf(name)), nil
}

// BarrierTopic is Barrier for the group of a topic name.
func (n *Node) BarrierTopic(ctx context.Context, name string) error {
	g, err := n.GroupOfTopic(name)
	if err != nil {
		return err
	}
	return n.Barrier(ctx, g)
}
