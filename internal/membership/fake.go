package membership

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Network is an in-memory cluster for tests of code that consumes
// membership. Nodes that have joined form a full mesh; every change is
// applied to every member's view before the call that made it returns,
// so tests need not wait for gossip.
type Network struct {
	mu struct {
		sync.Mutex
		started map[string]*Fake // by gossip address
		joined  map[uint64]*Fake // the mesh, by node id
	}
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	n := &Network{}
	n.mu.started = make(map[string]*Fake)
	n.mu.joined = make(map[uint64]*Fake)
	return n
}

// Fake is one node of a Network. It implements Membership.
type Fake struct {
	net   *Network
	addr  string
	table *table
	// Guarded by net.mu.
	info    NodeInfo
	started bool
	closed  bool
}

var _ Membership = (*Fake)(nil)

// Node returns a node of n at address "fake:<id>" that has not started.
// eventBuffer <= 0 means DefaultEventBuf.
func (n *Network) Node(info NodeInfo, eventBuffer int) (*Fake, error) {
	return n.NodeAt("fake:"+strconv.FormatUint(info.ID, 10), info, eventBuffer)
}

// NodeAt is Node at another address, for a second node that claims an id.
func (n *Network) NodeAt(addr string, info NodeInfo, eventBuffer int) (*Fake, error) {
	if err := info.Validate(); err != nil {
		return nil, err
	}
	if eventBuffer <= 0 {
		eventBuffer = DefaultEventBuf
	}
	return &Fake{
		net:   n,
		addr:  addr,
		table: newTable(info.ID, DefaultMaxMembers, min(eventBuffer, MaxEventBuf)),
		info:  info.Clone(),
	}, nil
}

func (f *Fake) member(state State) Member {
	return Member{NodeInfo: f.info.Clone(), GossipAddr: f.addr, State: state}
}

// Start makes the node reachable at its address.
func (f *Fake) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	switch {
	case f.closed:
		return ErrClosed
	case f.started:
		return fmt.Errorf("membership: already started")
	}
	if _, taken := f.net.mu.started[f.addr]; taken {
		return fmt.Errorf("membership: start %s: address in use", f.addr)
	}
	f.started = true
	f.net.mu.started[f.addr] = f
	f.table.set(EventJoin, f.member(StateAlive))
	return nil
}

// Join enters the mesh if any addr names a started node, bringing the
// started nodes it contacted into the mesh too (a seed that never called
// Join, as with Gossip, where the contacted node learns of the caller).
// Joining no address is a no-op that leaves the node a cluster of one. A
// node whose id is already held in the mesh is the newcomer: it is refused
// with ErrDuplicateNodeID and closed without a leave, and the members see
// EventConflict naming it, as with Gossip.
func (f *Fake) Join(ctx context.Context, addrs []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	if err := f.usableLocked(); err != nil {
		return 0, err
	}
	if len(addrs) == 0 {
		return 0, nil
	}
	var contacted []*Fake
	for _, a := range addrs {
		if o, ok := f.net.mu.started[a]; ok {
			contacted = append(contacted, o)
		}
	}
	if len(contacted) == 0 {
		return 0, fmt.Errorf("membership: join: none of %s answered", strings.Join(addrs, ", "))
	}
	for _, o := range contacted {
		if _, held := f.net.mu.joined[o.info.ID]; !held && o != f {
			o.enterLocked()
		}
	}
	if other, ok := f.net.mu.joined[f.info.ID]; ok && other != f {
		claimant := Event{Kind: EventConflict, Member: f.member(StateAlive)}
		for _, o := range f.net.mu.joined {
			o.table.emit(claimant)
		}
		f.table.emit(claimant)
		f.closeLocked()
		return 0, fmt.Errorf("%w: node id %d is held by %s", ErrDuplicateNodeID, f.info.ID, other.addr)
	}
	f.enterLocked()
	return len(contacted), nil
}

// enterLocked adds f to the mesh: every member and f see each other join,
// then exchange the departures the other has not heard of, as Gossip's
// push-pull does (departed.go).
// REQUIRES: f.net.mu held.
func (f *Fake) enterLocked() {
	f.net.mu.joined[f.info.ID] = f
	f.table.set(EventJoin, f.member(StateAlive))
	for id, o := range f.net.mu.joined {
		if id != f.info.ID {
			o.table.set(EventJoin, f.member(StateAlive))
			f.table.set(EventJoin, o.member(StateAlive))
		}
	}
	for id, o := range f.net.mu.joined {
		if id != f.info.ID {
			learnDeparted(f.table, o.table.departedMembers())
			learnDeparted(o.table, f.table.departedMembers())
		}
	}
}

// usableLocked: REQUIRES f.net.mu held.
func (f *Fake) usableLocked() error {
	switch {
	case f.closed:
		return ErrClosed
	case !f.started:
		return ErrNotStarted
	}
	return nil
}

// broadcastLocked sets m in every other member's view with kind.
// REQUIRES: f.net.mu held.
func (f *Fake) broadcastLocked(kind EventKind, m Member) {
	for id, o := range f.net.mu.joined {
		if id != m.ID {
			o.table.set(kind, m)
		}
	}
}

// Leave departs gracefully: every other member sees EventLeave.
func (f *Fake) Leave(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	if err := f.usableLocked(); err != nil {
		return err
	}
	if f.net.mu.joined[f.info.ID] == f {
		f.broadcastLocked(EventLeave, f.member(StateLeft))
		delete(f.net.mu.joined, f.info.ID)
	}
	f.table.set(EventLeave, f.member(StateLeft))
	return nil
}

// SetAttributes replaces the attributes; every other member sees
// EventUpdate.
func (f *Fake) SetAttributes(ctx context.Context, attrs map[string]string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	info := f.info.Clone()
	info.Attributes = cloneAttrs(attrs)
	if _, err := encodeMeta(info, false); err != nil {
		return err
	}
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	f.info = info
	m := f.member(StateAlive)
	f.table.set(EventUpdate, m)
	if f.net.mu.joined[f.info.ID] == f {
		f.broadcastLocked(EventUpdate, m)
	}
	return nil
}

// Members returns the node's view.
func (f *Fake) Members() []Member { return f.table.members() }

// Events returns the node's event channel.
func (f *Fake) Events() <-chan Event { return f.table.events }

// Close stops the node without a leave: every other member sees it dead.
func (f *Fake) Close() error {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	f.closeLocked()
	return nil
}

// closeLocked is Close. REQUIRES: f.net.mu held.
func (f *Fake) closeLocked() {
	if f.closed {
		return
	}
	f.closed = true
	f.failLocked()
	if f.net.mu.started[f.addr] == f {
		delete(f.net.mu.started, f.addr)
	}
	f.table.close()
}

// failLocked removes f from the mesh; the others see it dead.
// REQUIRES: f.net.mu held.
func (f *Fake) failLocked() {
	if f.net.mu.joined[f.info.ID] == f {
		f.broadcastLocked(EventDead, f.member(StateDead))
		delete(f.net.mu.joined, f.info.ID)
	}
}

// Suspect makes every other member suspect node id (EventSuspect), as a
// missed probe would.
func (n *Network) Suspect(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f, ok := n.mu.joined[id]; ok {
		f.broadcastLocked(EventSuspect, f.member(StateSuspect))
	}
}

// Fail cuts node id off: every other member declares it dead, while the
// node itself keeps running with its last view, as after a crash the
// others noticed or a partition.
func (n *Network) Fail(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f, ok := n.mu.joined[id]; ok {
		f.failLocked()
	}
}
