package membership

import (
	"context"
	"errors"
)

// Membership is a node's view of the cluster. The broker drives it; the
// simulator and tests substitute the in-memory Fake.
type Membership interface {
	// Start opens the gossip listener and announces the local node. It
	// does not contact anyone: call Join for that.
	Start(ctx context.Context) error
	// Join contacts the given gossip addresses (host:port) and merges their
	// view; it returns how many answered. It fails with ErrDuplicateNodeID
	// when a live member already uses the local node id, and the node is
	// then closed.
	Join(ctx context.Context, addrs []string) (int, error)
	// Leave announces a graceful departure: members see EventLeave rather
	// than EventDead. Close must still be called.
	Leave(ctx context.Context) error
	// Members returns a snapshot of every known member, the local node
	// included, ordered by id.
	Members() []Member
	// Events delivers changes in order. The channel is bounded: see
	// EventResync for what happens when the consumer falls behind. It is
	// closed by Close.
	Events() <-chan Event
	// SetAttributes replaces the local node's attributes and announces
	// them; members see EventUpdate.
	SetAttributes(ctx context.Context, attrs map[string]string) error
	// Close stops gossip without announcing a leave, so members will
	// declare this node dead. It is idempotent.
	Close() error
}

// State is a member's liveness as seen by the local node.
type State uint8

const (
	StateAlive State = iota + 1
	// StateSuspect: the member missed probes and may be declared dead.
	// The memberlist-backed implementation never reports it (see the
	// package documentation); the Fake does.
	StateSuspect
	// StateLeaving: the member announced a graceful leave and is still
	// reachable.
	StateLeaving
	// StateLeft: the member left gracefully.
	StateLeft
	// StateDead: the member stopped answering and was declared failed.
	StateDead
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateLeaving:
		return "leaving"
	case StateLeft:
		return "left"
	case StateDead:
		return "dead"
	}
	return "unknown"
}

// Live reports whether the member still takes part in the cluster.
func (s State) Live() bool { return s == StateAlive || s == StateSuspect || s == StateLeaving }

// Member is one node as seen by the local node.
type Member struct {
	NodeInfo
	// GossipAddr is the member's gossip host:port.
	GossipAddr string
	State      State
	// Reported: the member's departure was reported by a peer (the
	// push-pull exchange, departed.go) and this node never observed the
	// member itself. A peer's view may be stale (the member came back and
	// the news has not reached it), so a reported departure is enough to
	// count the member's copies down for healing, after the usual grace,
	// but not to fence a live primary or roll segments off it: those act
	// only on what this node's own failure detector declared.
	Reported bool
}

// EventKind says what happened to a member.
type EventKind uint8

const (
	// EventJoin: a member appeared, or came back after leaving or dying.
	EventJoin EventKind = iota + 1
	// EventUpdate: a member changed its metadata (attributes, addresses,
	// or began to leave).
	EventUpdate
	// EventSuspect: a member is suspected of failure (Fake only).
	EventSuspect
	// EventLeave: a member left gracefully.
	EventLeave
	// EventDead: a member was declared failed.
	EventDead
	// EventConflict: two nodes claim one id. Member is the claimant that
	// was refused. The broker should log it loudly; the memberlist layer
	// keeps the first claimant.
	EventConflict
	// EventResync: events were coalesced because the consumer fell behind.
	// Member is empty; the consumer must call Members() and reconcile with
	// the snapshot, which reflects every change up to this event.
	EventResync
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventLeave:
		return "leave"
	case EventDead:
		return "dead"
	case EventConflict:
		return "conflict"
	case EventResync:
		return "resync"
	}
	return "unknown"
}

// Event is one change to the membership.
type Event struct {
	Kind   EventKind
	Member Member
}

var (
	// ErrDuplicateNodeID is returned by Join when another live node already
	// uses the local node id.
	ErrDuplicateNodeID = errors.New("membership: node id already in use")
	// ErrNotStarted is returned by operations that need Start first.
	ErrNotStarted = errors.New("membership: not started")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("membership: closed")
	// ErrTableFull is how a member beyond Config.MaxMembers is refused.
	ErrTableFull = errors.New("membership: member table full")
)
