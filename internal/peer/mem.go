package peer

import (
	"context"
	"fmt"
	"sync"
)

// MemNetwork connects in-memory transports in one process, for tests of
// the packages above this one. It keeps the contract of TCPTransport
// (ordering per destination and channel, bounded queues and
// ErrBackpressure, bounded calls and handlers, the same errors, at most
// once delivery) and the frames themselves, and adds controls: cut two
// nodes apart, hold a link's frames and release them later, drop frames
// by a rule of the test's choosing, and count what happened.
//
// Each transport has one delivery goroutine per destination (and per
// caller it answers), started on first use, which plays the part of the
// connection: it decides each frame's fate when it reaches the front of
// the queue, in order, and runs one-way handlers of the destination
// inline. Decisions are therefore in send order per link; across links
// the interleaving is the scheduler's.
//
// A frame to a node with no started transport at its address is dropped
// (a call fails with ErrUnreachable at once); a frame cut by Partition
// or refused by the filter is dropped silently, so a call waits for its
// context, as it would across a real partition.
type MemNetwork struct {
	mu struct {
		sync.Mutex
		byAddr      map[string]*MemTransport // started and not closed
		byID        map[uint64]*MemTransport // same, by node id
		partitioned map[[2]uint64]bool       // ordered pair, smaller id first
		held        map[[2]uint64]bool       // from, to
		filter      func(MemMessage) bool
		counters    MemCounters
	}
}

// MemMessage is a frame seen by a filter. Payload must not be changed.
type MemMessage struct {
	From, To uint64
	Channel  Channel // 0 for answers
	Request  bool    // a call's request
	Answer   bool    // a call's response or error
	Payload  []byte
}

// MemCounters count the fates of frames on a MemNetwork.
type MemCounters struct {
	Delivered   uint64
	Dropped     uint64 // by Partition or the filter
	Unreachable uint64 // no started transport at the address
	Held        uint64 // held at least once
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	n := &MemNetwork{}
	n.mu.byAddr = make(map[string]*MemTransport)
	n.mu.byID = make(map[uint64]*MemTransport)
	n.mu.partitioned = make(map[[2]uint64]bool)
	n.mu.held = make(map[[2]uint64]bool)
	return n
}

// MemAddr is the address a node's in-memory transport takes when started.
func MemAddr(node uint64) string { return fmt.Sprintf("mem:%d", node) }

// Transport returns a transport for node with the default Config. Its
// address is MemAddr(node); a node restarted in a test is a new
// Transport for the same id, started once the old one is closed.
func (n *MemNetwork) Transport(node uint64) *MemTransport {
	t, err := n.NewTransport(Config{NodeID: node})
	if err != nil {
		panic(err) // only a zero id gets here
	}
	return t
}

// NewTransport returns a transport with cfg's bounds; ListenAddr, TLS and
// the timeouts are not used.
func (n *MemNetwork) NewTransport(cfg Config) (*MemTransport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &MemTransport{net: n, addr: MemAddr(cfg.NodeID)}
	t.init(cfg)
	t.mu.addrs = make(map[uint64]string)
	t.mu.links = make(map[uint64]*memLink)
	t.mu.replies = make(map[*MemTransport]*memLink)
	t.mu.cancels = make(map[uint64]context.CancelFunc)
	return t, nil
}

// Partition cuts a and b apart in both directions, frames in flight
// included, until Heal.
func (n *MemNetwork) Partition(a, b uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.partitioned[pairKey(a, b)] = true
}

// Heal joins a and b again.
func (n *MemNetwork) Heal(a, b uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.mu.partitioned, pairKey(a, b))
}

// HealAll removes every partition.
func (n *MemNetwork) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.mu.partitioned)
}

func pairKey(a, b uint64) [2]uint64 {
	if a > b {
		a, b = b, a
	}
	return [2]uint64{a, b}
}

// Hold keeps the frames from from to to (answers included) at the
// front of their link, in order, until Release.
func (n *MemNetwork) Hold(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.held[[2]uint64{from, to}] = true
}

// Release lets held frames from from to to go, in the order they were
// sent and before any frame sent after them.
func (n *MemNetwork) Release(from, to uint64) {
	n.mu.Lock()
	delete(n.mu.held, [2]uint64{from, to})
	t := n.mu.byID[from]
	n.mu.Unlock()
	if t != nil {
		t.poke(to)
	}
}

// SetFilter makes f decide every frame's fate: false drops it. f runs on
// delivery goroutines, one frame at a time per link, and must not block
// or call the network. nil removes the filter.
func (n *MemNetwork) SetFilter(f func(MemMessage) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.filter = f
}

// Counters returns the fates counted so far.
func (n *MemNetwork) Counters() MemCounters {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.counters
}

type verdict int

const (
	deliverFrame verdict = iota
	dropFrame
	holdFrame
)

// judge decides m's fate; once is false when m was held before.
func (n *MemNetwork) judge(m MemMessage, first bool) verdict {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.mu.partitioned[pairKey(m.From, m.To)], n.mu.filter != nil && !n.mu.filter(m):
		n.mu.counters.Dropped++
		return dropFrame
	case n.mu.held[[2]uint64{m.From, m.To}]:
		if first {
			n.mu.counters.Held++
		}
		return holdFrame
	}
	return deliverFrame
}

func (n *MemNetwork) count(f func(*MemCounters)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(&n.mu.counters)
}

// lookup returns the started transport at addr, or nil.
func (n *MemNetwork) lookup(addr string) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.byAddr[addr]
}

// transports returns the started transports.
func (n *MemNetwork) transports() []*MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*MemTransport, 0, len(n.mu.byAddr))
	for _, t := range n.mu.byAddr {
		out = append(out, t)
	}
	return out
}

func (n *MemNetwork) register(t *MemTransport) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.byAddr[t.addr] != nil {
		return fmt.Errorf("peer: %s is in use", t.addr)
	}
	n.mu.byAddr[t.addr] = t
	n.mu.byID[t.cfg.NodeID] = t
	return nil
}

func (n *MemNetwork) unregister(t *MemTransport) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.byAddr[t.addr] == t {
		delete(n.mu.byAddr, t.addr)
		delete(n.mu.byID, t.cfg.NodeID)
	}
}
