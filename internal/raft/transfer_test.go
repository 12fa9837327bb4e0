package raft

import (
	"errors"
	"testing"
)

// TestTransferLeadership: the leader of each of several groups hands its
// leadership to another voter, which then leads in a later term; the
// group keeps committing through the new leader, and a refused transfer
// (not a voter, not the leader) says why.
func TestTransferLeadership(t *testing.T) {
	n := newSim(t, 7, 3, nil)
	groups := groupIDs(4)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	n.runUntil("a leader in every group", 300, func() bool { return n.allHaveLeaders(groups) })
	for _, g := range groups {
		n.mustPropose(g, putCmd("k", "before"))
	}
	for _, g := range groups {
		from := n.leader(g)
		to := from%3 + 1
		st, _ := n.hosts[from].Status(g)
		if err := n.hosts[to].TransferLeadership(g, from); err == nil {
			t.Fatalf("group %d: a follower accepted a transfer", g)
		} else if nl := (*NotLeaderError)(nil); !errors.As(err, &nl) || nl.Leader != from {
			t.Fatalf("group %d: transfer at a follower: %v, want NotLeaderError naming %d", g, err, from)
		}
		if err := n.hosts[from].TransferLeadership(g, 9); err == nil {
			t.Fatalf("group %d: transfer to a node that is no voter accepted", g)
		}
		if err := n.hosts[from].TransferLeadership(g, to); err != nil {
			t.Fatalf("group %d: transfer %d → %d: %v", g, from, to, err)
		}
		n.runUntil("the transferee to lead", 100, func() bool { return n.leader(g) == to && n.allHaveLeaders([]uint64{g}) })
		after, _ := n.hosts[to].Status(g)
		if after.Term <= st.Term {
			t.Errorf("group %d: new leader in term %d, old term %d", g, after.Term, st.Term)
		}
		if prev := string(n.mustPropose(g, putCmd("k", "after"))); prev != "before" {
			t.Errorf("group %d: previous value %q through the new leader, want %q", g, prev, "before")
		}
	}
	n.runUntil("every replica to apply everything", 100, func() bool { return n.replicasEqual(groups) })
}

// TestTransferLeadershipWaitsForACaughtUpVoter: a voter cut off from the
// leader falls behind; a transfer to it is refused with
// ErrTransfereeBehind until it has caught up.
func TestTransferLeadershipWaitsForACaughtUpVoter(t *testing.T) {
	n := newSim(t, 11, 3, nil)
	const g = 1
	n.createGroup(g, n.ids)
	n.runUntil("a leader", 300, func() bool { return n.allHaveLeaders([]uint64{g}) })
	l := n.leader(g)
	lag := l%3 + 1
	n.partition(lag)
	n.mustPropose(g, putCmd("k", "v"))
	if err := n.hosts[l].TransferLeadership(g, lag); !errors.Is(err, ErrTransfereeBehind) {
		t.Fatalf("transfer to a voter that is behind: %v, want ErrTransfereeBehind", err)
	}
	n.heal()
	n.runUntil("the transfer to be taken", 100, func() bool { return n.hosts[l].TransferLeadership(g, lag) == nil })
	n.runUntil("the caught-up voter to lead", 100, func() bool { return n.leader(g) == lag })
}
