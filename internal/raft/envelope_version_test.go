package raft

import (
	"errors"
	"testing"
)

// TestUnknownEnvelopeVersionStopsGroup commits an entry whose envelope
// version this build does not read, as a leader running a newer build
// would. Skipping it would let replicas that read it diverge from those
// that cannot (C1), so every replica stops the group at that entry and
// says why, before applying it; the node's other groups keep working, and
// a restarted node stops at the same entry again.
func TestUnknownEnvelopeVersionStopsGroup(t *testing.T) {
	n := newSim(t, 51, 3, nil)
	n.groupFailures = true
	n.createGroup(1, n.ids)
	n.createGroup(2, n.ids)
	n.mustPropose(1, putCmd("a", "1"))
	l := n.leader(1)
	h := n.hosts[l]
	future := append([]byte{envelopeVersion + 1}, make([]byte, 16)...)
	h.mu.Lock()
	err := h.groups[1].rn.Propose(future)
	h.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	stopped := func() bool {
		for _, id := range n.ids {
			if st, _ := n.hosts[id].Status(1); st.Failed == nil {
				return false
			}
		}
		return true
	}
	n.runUntil("every replica to stop the group", 50, stopped)
	var applied uint64
	for _, id := range n.ids {
		st, _ := n.hosts[id].Status(1)
		t.Logf("node %d: %v", id, st.Failed)
		if !errors.Is(st.Failed, ErrGroupFailed) {
			t.Fatalf("node %d: Status.Failed = %v, want ErrGroupFailed", id, st.Failed)
		}
		if applied != 0 && st.Applied != applied {
			t.Fatalf("node %d stopped at %d, another at %d", id, st.Applied, applied)
		}
		applied = st.Applied
		if got := n.sms[id][1].data["a"]; got != "1" {
			t.Fatalf("node %d: a = %q", id, got)
		}
	}

	n.mustPropose(2, putCmd("b", "2"))

	n.crash(l)
	n.start(l)
	n.runUntil("the restarted node to stop the group again", 10, func() bool {
		st, err := n.hosts[l].Status(1)
		return err == nil && errors.Is(st.Failed, ErrGroupFailed)
	})
	if st, _ := n.hosts[l].Status(1); st.Applied != applied {
		t.Fatalf("the restarted node stopped at %d, before at %d", st.Applied, applied)
	}
}
