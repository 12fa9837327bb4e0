package control

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/raft"
)

// liveness remembers when this node last received a raft frame from each
// node. A group's leader exchanges frames with every replica of the group
// each tick (heartbeats and their answers, coalesced per node pair), and
// every node is a replica of every group, so at a leader a node not heard
// from since some recent moment is down or cut off: what raft's leader
// calls RecentActive. Replica changes that would leave a group's voters
// without a live quorum are held back on that account (changeBlocked,
// removalBlocked). Elsewhere than at a leader the view is partial and is
// not used.
//
// The moment is chosen by the caller, and is never "within a window of
// now": a node stopped a tick ago was heard within any window. A removal
// is checked against frames heard after the check began (removeHere
// waits for them), a reconciler's change against frames heard after its
// round began (liveRound).
type liveness struct {
	clock clock.Clock

	mu   sync.Mutex
	last map[uint64]time.Time // at most MaxNodes entries
}

func newLiveness(c clock.Clock) *liveness {
	return &liveness{clock: c, last: make(map[uint64]time.Time)}
}

// note records a frame from node; it runs on the transport's reader and
// does not block. Beyond MaxNodes ids a new one is not recorded (it counts
// as down, which only holds changes back).
func (l *liveness) note(node uint64) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.last[node]; ok || len(l.last) < MaxNodes {
		l.last[node] = now
	}
}

func (l *liveness) forget(node uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, node)
}

// down returns the voters not heard from after since when they are too
// many for the others (self counting as live) to form a quorum; nil when
// a live quorum remains.
func (l *liveness) down(self uint64, voters []uint64, since time.Time) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for _, v := range voters {
		if t, ok := l.last[v]; v != self && (!ok || !t.After(since)) {
			out = append(out, v)
		}
	}
	if len(voters)-len(out) >= len(voters)/2+1 {
		return nil
	}
	return sortedIDs(out)
}

// changeBlocked says why change c must wait in a group whose voters are
// voters: it would leave them without a quorum of nodes heard from after
// since. "" when it may go.
func (n *Node) changeBlocked(voters []uint64, c raft.ReplicaChange, since time.Time) string {
	var after []uint64
	switch {
	case c.Kind == raft.RemoveVoter && slices.Contains(voters, c.Node):
		after = slices.DeleteFunc(slices.Clone(voters), func(id uint64) bool { return id == c.Node })
	case c.Kind == raft.PromoteLearner:
		after = append(slices.Clone(voters), c.Node)
	default:
		return ""
	}
	down := n.live.down(n.cfg.NodeID, after, since)
	if down == nil {
		return ""
	}
	return fmt.Sprintf("%s %d waits: voters %v would have no live quorum without %s; bring %s back or remove %s",
		c.Kind, c.Node, sortedIDs(after), nodeList(down), nodeList(down), pronoun(down))
}

// removalBlocked says why removing node from the registry now would
// leave a group without a live quorum, once placement has moved the
// group's voters (reg is the registry as this node holds it), counting
// as live the nodes heard from after since. "" when the removal may go,
// or when the registry would refuse it anyway.
func (n *Node) removalBlocked(reg *Registry, node uint64, since time.Time) string {
	after := reg.Clone()
	if after.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: node}}) != nil {
		return ""
	}
	for _, g := range append([]uint64{RootGroup}, vnodeGroups(after.Vnodes)...) {
		if down := n.live.down(n.cfg.NodeID, after.Voters[g], since); down != nil {
			return fmt.Sprintf("control: removing node %d now would leave %s without a live quorum (voters %v): bring %s back or remove %s first",
				node, groupName(g), after.Voters[g], nodeList(down), pronoun(down))
		}
	}
	return ""
}

// nodeList is "node 3" or "nodes 3, 4".
func nodeList(ids []uint64) string {
	if len(ids) == 1 {
		return fmt.Sprintf("node %d", ids[0])
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return "nodes " + strings.Join(s, ", ")
}

func pronoun(ids []uint64) string {
	if len(ids) == 1 {
		return "it"
	}
	return "them"
}
