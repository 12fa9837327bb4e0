package raft

import (
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestReplicaWithLostLogRejoinsUnderSameID restarts a voter whose log store
// is gone (a replaced disk) and lets it host the group again with AddGroup.
// Replica ids are node ids, so the leader still tracks the old replica's
// match index and sends it a heartbeat committing past its (empty) log:
// raft panics ("tocommit is out of range"). The same reuse would let the
// node vote a second time in a term it already voted in. Reusing the id is
// the operator's or the control plane's error (AddGroup's documentation:
// remove and re-add under a new id); the host contains it: no vote is cast
// by the empty replica, the group stops on that node and says why, and the
// node's other groups and the group's other replicas keep working.
func TestReplicaWithLostLogRejoinsUnderSameID(t *testing.T) {
	n := newSim(t, 31, 3, nil)
	n.groupFailures = true
	n.createGroup(1, n.ids)
	for i := 0; i < 5; i++ {
		n.mustPropose(1, putCmd("k", fmt.Sprint(i)))
	}
	victim := n.ids[0]
	if n.leader(1) == victim {
		victim = n.ids[1]
	}
	var candidate uint64
	for _, id := range n.ids {
		if id != victim && id != n.leader(1) {
			candidate = id
		}
	}
	term := func() uint64 { st, _ := n.hosts[n.leader(1)].Status(1); return st.Term }()
	n.crash(victim)
	n.stores[victim] = NewMemLogStore() // the disk is replaced
	n.start(victim)
	sm := newKV()
	n.sms[victim][1] = sm
	if err := n.hosts[victim].AddGroup(1, sm); err != nil {
		t.Fatal(err)
	}

	// A vote request for the current term, which the lost replica may
	// already have voted in, must not be granted.
	var b frameBuilder
	vote := &pb.Message{Type: pb.MsgVote.Enum(), From: new(candidate), To: new(victim), Term: new(term + 1),
		Index: new(uint64(1)), LogTerm: new(uint64(1))}
	if _, err := b.add(1, vote); err != nil {
		t.Fatal(err)
	}
	if err := n.hosts[victim].Receive(candidate, b.encode(candidate)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.hosts[victim].Process(); err != nil {
		t.Fatal(err)
	}
	if hs, _, _ := n.stores[victim].Storage(1).InitialState(); hs.GetVote() != 0 {
		t.Fatalf("the replica with no state voted for node %d in term %d", hs.GetVote(), hs.GetTerm())
	}

	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("a replica that lost its log and was re-added under node id %d crashed its host: %v", victim, p)
			}
		}()
		n.runUntil("the rejoined replica to stop", 30, func() bool {
			st, err := n.hosts[victim].Status(1)
			return err == nil && st.Failed != nil
		})
	}()
	st, _ := n.hosts[victim].Status(1)
	t.Logf("node %d reports group 1: %v", victim, st.Failed)
	if !errors.Is(st.Failed, ErrGroupFailed) {
		t.Fatalf("Status.Failed = %v, want ErrGroupFailed", st.Failed)
	}
	if _, err := n.hosts[victim].ProposeAsync(1, putCmd("x", "y")); !errors.Is(err, ErrGroupFailed) {
		t.Fatalf("a proposal to the stopped group: %v, want ErrGroupFailed", err)
	}
	if n.hosts[victim].Stats().GroupFailures != 1 {
		t.Fatalf("GroupFailures = %d, want 1", n.hosts[victim].Stats().GroupFailures)
	}

	// The group's other replicas keep serving it, and the node its other
	// groups.
	n.mustPropose(1, putCmd("after", "1"))
	n.createGroup(2, []uint64{victim})
	if got := string(n.mustPropose(2, putCmd("other", "1"))); got != "" {
		t.Fatalf("group 2 answered %q", got)
	}

	// Removing the group clears it; the operator re-adds the replica under
	// a new id.
	if err := n.hosts[victim].RemoveGroup(1); err != nil {
		t.Fatal(err)
	}
	if _, err := n.hosts[victim].Status(1); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("Status after RemoveGroup: %v", err)
	}
}
