package raft

import (
	"errors"
	"slices"
	"testing"
)

// TestReplicaChangeRightAfterElection proposes a replica change at a node
// the moment it wins an election, while it still holds an entry of the
// previous term that it has not applied. raft v3 refuses a conf change
// while pendingConfIndex (the new leader's last index at election) is above
// the applied index, and it refuses it silently: the ConfChangeV2 is
// replaced by an empty normal entry, and a future waiting on it would
// only fail at the request timeout ("outcome unknown") while blocking
// every other change of the group. The host refuses the change itself,
// retriable, until the new leader has applied those entries; retried, the
// change applies within a few ticks.
func TestReplicaChangeRightAfterElection(t *testing.T) {
	const timeoutTicks = 40
	n := newSim(t, 21, 4, func(o *Options) { o.RequestTimeoutTicks = timeoutTicks })
	n.createGroup(1, []uint64{1, 2, 3})
	sm4 := newKV()
	n.sms[4][1] = sm4
	if err := n.hosts[4].AddGroup(1, sm4); err != nil {
		t.Fatal(err)
	}
	n.mustPropose(1, putCmd("a", "1"))
	old := n.leader(1)
	var followers []uint64
	for _, id := range []uint64{1, 2, 3} {
		if id != old {
			followers = append(followers, id)
		}
	}
	// The followers receive the next entry but the leader never hears
	// their acknowledgements: the entry stays uncommitted in their logs.
	for _, f := range followers {
		n.cut[[2]uint64{f, old}] = true
	}
	before := make(map[uint64]uint64)
	for _, f := range followers {
		before[f], _ = n.stores[f].Storage(1).LastIndex()
	}
	if _, err := n.hosts[old].ProposeAsync(1, putCmd("b", "2")); err != nil {
		t.Fatal(err)
	}
	n.runUntil("the followers to append the entry", 20, func() bool {
		for _, f := range followers {
			if li, _ := n.stores[f].Storage(1).LastIndex(); li <= before[f] {
				return false
			}
		}
		return true
	})
	n.partition(old)

	// Step round by round and propose the change in the first round a
	// follower leads, then every round until the leader takes it.
	var newLeader uint64
	var fut *Future
	refusals := 0
	for i := 0; i < 200 && fut == nil; i++ {
		n.ticks++
		for _, id := range n.ids {
			if h := n.hosts[id]; h != nil {
				h.Tick()
			}
		}
		for r := 0; r < roundsPerTick && fut == nil; r++ {
			n.roundStep()
			for _, f := range followers {
				if st, _ := n.hosts[f].Status(1); st.State == "StateLeader" && (newLeader == 0 || newLeader == f) {
					newLeader = f
					var err error
					fut, err = n.hosts[f].ChangeReplicasAsync(1, ReplicaChange{Kind: AddLearner, Node: 4})
					if err != nil {
						if !errors.Is(err, ErrConfChangeInProgress) || !Retriable(err) {
							t.Fatalf("change at the new leader %d: %v", f, err)
						}
						refusals++
						if refusals > timeoutTicks/2*roundsPerTick {
							t.Fatalf("the new leader %d still refuses the change after %d rounds: %v", f, refusals, err)
						}
					}
					break
				}
			}
		}
	}
	if fut == nil {
		t.Fatal("no follower won the election")
	}
	if refusals == 0 {
		t.Fatal("the new leader took the change at once; the test did not reach the window it is about")
	}
	t.Logf("the new leader %d refused the change %d times before taking it", newLeader, refusals)
	done := func() bool {
		select {
		case <-fut.Done():
			return true
		default:
			return false
		}
	}
	// The group is healthy (two of three voters, one leader); the change
	// should apply within a few ticks, certainly before half the timeout.
	for i := 0; i < timeoutTicks/2 && !done(); i++ {
		n.tick()
	}
	st, _ := n.hosts[newLeader].Status(1)
	if !done() {
		for !done() {
			n.tick()
		}
		_, err := fut.Result()
		st, _ = n.hosts[newLeader].Status(1)
		t.Fatalf("AddLearner proposed by the new leader %d did not complete in %d ticks; after the timeout it answered %v "+
			"while learners are %v (raft replaced the conf change with an empty entry: it never applies)",
			newLeader, timeoutTicks/2, err, st.Learners)
	}
	if _, err := fut.Result(); err != nil {
		t.Fatalf("the change failed: %v", err)
	}
	if !slices.Contains(st.Learners, 4) {
		t.Fatalf("the change completed but learners are %v", st.Learners)
	}
}

// TestReplicaChangeAfterTimeoutStaysPending lets a replica change time out
// in the host while its entry is still unapplied (the leader hears no
// acknowledgement). raft still holds the change as pending, and would
// silently replace a second one with an empty entry, so the host keeps
// refusing changes until the first one applies; then the next one goes
// through.
func TestReplicaChangeAfterTimeoutStaysPending(t *testing.T) {
	const timeoutTicks = 4 // below ElectionTicks: the leader keeps its term
	n := newSim(t, 22, 5, func(o *Options) { o.RequestTimeoutTicks = timeoutTicks })
	n.createGroup(1, []uint64{1, 2, 3})
	for _, id := range []uint64{4, 5} {
		sm := newKV()
		n.sms[id][1] = sm
		if err := n.hosts[id].AddGroup(1, sm); err != nil {
			t.Fatal(err)
		}
	}
	n.mustPropose(1, putCmd("a", "1"))
	l := n.leader(1)
	var fut *Future
	n.runUntil("the leader to take a change", 50, func() bool {
		var err error
		fut, err = n.hosts[l].ChangeReplicasAsync(1, ReplicaChange{Kind: AddLearner, Node: 4})
		if err != nil && !Retriable(err) {
			t.Fatal(err)
		}
		return err == nil
	})
	for _, id := range []uint64{1, 2, 3} {
		if id != l {
			n.cut[[2]uint64{id, l}] = true
		}
	}
	n.runUntil("the change to time out", 3*timeoutTicks, func() bool {
		select {
		case <-fut.Done():
			return true
		default:
			return false
		}
	})
	if _, err := fut.Result(); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("the change ended with %v, want a timeout", err)
	}
	if _, err := n.hosts[l].ChangeReplicasAsync(1, ReplicaChange{Kind: AddLearner, Node: 5}); !errors.Is(err, ErrConfChangeInProgress) {
		t.Fatalf("a second change while the first is unapplied: %v, want ErrConfChangeInProgress", err)
	}
	if st, _ := n.hosts[l].Status(1); st.State != "StateLeader" {
		t.Fatalf("node %d lost leadership (%s); the test needs it to keep its term", l, st.State)
	}
	n.heal()
	n.runUntil("the timed-out change to apply", 50, func() bool {
		st, _ := n.hosts[l].Status(1)
		return slices.Contains(st.Learners, 4)
	})
	var second *Future
	n.runUntil("the leader to take the next change", 50, func() bool {
		var err error
		second, err = n.hosts[n.leader(1)].ChangeReplicasAsync(1, ReplicaChange{Kind: AddLearner, Node: 5})
		if err != nil && !Retriable(err) {
			t.Fatal(err)
		}
		return err == nil
	})
	n.runUntil("the next change to complete", 2*timeoutTicks, func() bool {
		select {
		case <-second.Done():
			return true
		default:
			return false
		}
	})
	if _, err := second.Result(); err != nil {
		t.Fatalf("the next change: %v", err)
	}
	if st, _ := n.hosts[n.leader(1)].Status(1); !slices.Contains(st.Learners, 5) {
		t.Fatalf("learners %v, want 5 among them", st.Learners)
	}
}
