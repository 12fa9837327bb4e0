package raft

// Behaviour of the multi-raft host on the deterministic network of
// sim_test.go: elections across many groups, replication, coalesced
// heartbeats, leader partitions, snapshot catch-up, replica changes and
// restarts. Each test checks replicas' state machines against each other
// and against what the proposers were told.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"
)

func TestElectionsManyGroups(t *testing.T) {
	n := newSim(t, 1, 3, nil)
	groups := groupIDs(64)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	n.runUntil("a leader in every group", 300, func() bool { return n.allHaveLeaders(groups) })
	leaders := map[uint64]int{}
	for _, g := range groups {
		leaders[n.leader(g)]++
	}
	t.Logf("leaders per node after %d ticks: %v", n.ticks, leaders)
}

func TestProposalsApplyOnAllReplicas(t *testing.T) {
	n := newSim(t, 2, 3, nil)
	groups := groupIDs(8)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	for i := 0; i < 10; i++ {
		for _, g := range groups {
			key := fmt.Sprintf("k%d", i%3)
			prev := string(n.mustPropose(g, putCmd(key, fmt.Sprintf("g%d-v%d", g, i))))
			want := ""
			if i >= 3 {
				want = fmt.Sprintf("g%d-v%d", g, i-3)
			}
			if prev != want {
				t.Fatalf("group %d put %d: previous value %q, want %q", g, i, prev, want)
			}
		}
	}
	n.runUntil("every replica to apply everything", 100, func() bool { return n.replicasEqual(groups) })
}

// replicasEqual reports whether every live replica of every group holds
// the same data.
func (n *simNet) replicasEqual(groups []uint64) bool {
	for _, g := range groups {
		var ref map[string]string
		for _, id := range n.ids {
			sm, ok := n.sms[id][g]
			if !ok || n.down[id] {
				continue
			}
			if ref == nil {
				ref = sm.data
			} else if !maps.Equal(ref, sm.data) {
				return false
			}
		}
	}
	return true
}

// TestHeartbeatsCoalesced measures idle traffic between 3 hosts as the
// group count grows: frames per node pair per tick must stay flat (one
// frame per destination per Process cycle), while the messages inside grow.
func TestHeartbeatsCoalesced(t *testing.T) {
	const idleTicks = 100
	var framesPerPairTick []float64
	for _, count := range []int{8, 64, 256} {
		n := newSim(t, 3, 3, nil)
		groups := groupIDs(count)
		for _, g := range groups {
			n.createGroup(g, n.ids)
		}
		n.runUntil("a leader in every group", 400, func() bool { return n.allHaveLeaders(groups) })
		for range 20 { // let the elections' traffic settle
			n.tick()
		}
		before := n.totalStats()
		frames0, bytes0 := n.totals()
		for range idleTicks {
			n.tick()
		}
		after := n.totalStats()
		frames, bytes := n.totals()
		frames -= frames0
		bytes -= bytes0
		pairs := float64(len(n.ids) * (len(n.ids) - 1))
		perPairTick := float64(frames) / pairs / idleTicks
		framesPerPairTick = append(framesPerPairTick, perPairTick)
		seconds := float64(idleTicks) * 0.1 // 100 ms ticks
		msgs := after.MessagesSent - before.MessagesSent
		t.Logf("%3d groups × 3 hosts, idle: %.0f frames/s, %.0f bytes/s, %.0f raft messages/s (all hosts); %.2f frames per node pair per tick",
			count, float64(frames)/seconds, float64(bytes)/seconds, float64(msgs)/seconds, perPairTick)
		if msgs <= uint64(count*idleTicks) {
			t.Errorf("%d groups: only %d messages in %d ticks; heartbeats are not flowing", count, msgs, idleTicks)
		}
	}
	// Idle, a directed pair carries at most the frame of a tick's
	// heartbeats and the frame of the responses to the other side's, in
	// whatever number of groups.
	for i, v := range framesPerPairTick {
		if v > 2 {
			t.Errorf("case %d: %.2f frames per node pair per tick, want at most 2 whatever the group count (%v)", i, v, framesPerPairTick)
		}
	}
}

func (n *simNet) totals() (frames, bytes int) {
	for k, v := range n.pairCount {
		frames += v
		bytes += n.pairBytes[k]
	}
	return frames, bytes
}

func (n *simNet) totalStats() Stats {
	var s Stats
	for _, h := range n.hosts {
		st := h.Stats()
		s.MessagesSent += st.MessagesSent
		s.FramesSent += st.FramesSent
		s.Saves += st.Saves
		s.SnapshotsRestored += st.SnapshotsRestored
	}
	return s
}

// TestPartitionedLeader cuts a group's leader off: the others elect a new
// leader, the old leader's waiting proposal fails instead of hanging, and
// every acknowledged write survives on every replica after healing.
func TestPartitionedLeader(t *testing.T) {
	n := newSim(t, 4, 3, nil)
	n.createGroup(1, n.ids)
	acked := map[string]string{}
	for i := 0; i < 5; i++ {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
		n.mustPropose(1, putCmd(k, v))
		acked[k] = v
	}
	old := n.leader(1)
	n.partition(old)
	stranded, err := n.hosts[old].ProposeAsync(1, putCmd("lost", "maybe"))
	if err != nil {
		t.Fatalf("old leader refused before noticing the partition: %v", err)
	}
	var next uint64
	n.runUntil("a new leader on the majority side", 300, func() bool {
		next = n.leader(1)
		return next != 0 && next != old
	})
	n.runUntil("the stranded proposal to fail", 300, func() bool {
		select {
		case <-stranded.Done():
			return true
		default:
			return false
		}
	})
	if _, err := stranded.Result(); !errors.Is(err, ErrLeadershipLost) && !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("stranded proposal: %v, want ErrLeadershipLost or ErrRequestTimeout", err)
	}
	if _, err := n.hosts[old].ProposeAsync(1, putCmd("x", "y")); err == nil {
		t.Fatal("the deposed leader still takes proposals")
	} else if nl := (*NotLeaderError)(nil); !errors.As(err, &nl) {
		t.Fatalf("deposed leader: %v, want NotLeaderError", err)
	}
	for i := 5; i < 10; i++ {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
		n.mustPropose(1, putCmd(k, v))
		acked[k] = v
	}
	n.heal()
	n.runUntil("replicas to converge", 300, func() bool { return n.replicasEqual([]uint64{1}) && n.allHaveLeaders([]uint64{1}) })
	for _, id := range n.ids {
		for k, v := range acked {
			if got := n.sms[id][1].data[k]; got != v {
				t.Errorf("node %d lost acknowledged %s=%s (has %q)", id, k, v, got)
			}
		}
	}
}

// TestSnapshotCatchUp partitions a follower while the leader's log is
// compacted past it; after healing the follower is filled by a snapshot.
func TestSnapshotCatchUp(t *testing.T) {
	n := newSim(t, 5, 3, func(o *Options) { o.SnapshotEvery, o.CompactMargin = 20, 5 })
	n.createGroup(1, n.ids)
	n.mustPropose(1, putCmd("a", "0"))
	l := n.leader(1)
	lagger := n.ids[0]
	if lagger == l {
		lagger = n.ids[1]
	}
	n.partition(lagger)
	for i := 0; i < 100; i++ {
		n.mustPropose(1, putCmd(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
	}
	first, _ := n.stores[n.leader(1)].Storage(1).FirstIndex()
	if st, _ := n.hosts[lagger].Status(1); st.Applied >= first {
		t.Fatalf("lagger applied %d but the leader's log starts at %d; no snapshot needed", st.Applied, first)
	}
	n.heal()
	n.runUntil("the lagging follower to catch up", 300, func() bool { return n.replicasEqual([]uint64{1}) })
	if got := n.hosts[lagger].Stats().SnapshotsRestored; got == 0 {
		t.Fatal("the follower caught up without restoring a snapshot")
	}
	// It keeps following after the snapshot.
	n.mustPropose(1, putCmd("after", "snap"))
	n.runUntil("the entry after the snapshot to apply", 100, func() bool {
		return n.sms[lagger][1].data["after"] == "snap"
	})
}

// TestReplicaChanges grows a group by a learner, promotes it, and removes
// a voter, checking the configuration and replication at each step.
func TestReplicaChanges(t *testing.T) {
	n := newSim(t, 6, 4, func(o *Options) { o.SnapshotEvery, o.CompactMargin = 10, 2 })
	voters := []uint64{1, 2, 3}
	n.createGroup(1, voters)
	for i := 0; i < 30; i++ {
		n.mustPropose(1, putCmd("k", fmt.Sprint(i)))
	}
	sm4 := newKV()
	n.sms[4][1] = sm4
	if err := n.hosts[4].AddGroup(1, sm4); err != nil {
		t.Fatal(err)
	}
	n.partition(4)
	n.change(1, ReplicaChange{Kind: AddLearner, Node: 4})
	if err := n.changeErr(1, ReplicaChange{Kind: PromoteLearner, Node: 4}); !errors.Is(err, ErrLearnerBehind) {
		t.Fatalf("promoting a learner that has nothing: %v, want ErrLearnerBehind", err)
	}
	n.heal()
	n.runUntil("the learner to catch up", 200, func() bool { return sm4.data["k"] == "29" })
	if err := n.changeErr(1, ReplicaChange{Kind: AddLearner, Node: 4}); err == nil {
		t.Fatal("adding the learner twice was accepted")
	}
	n.change(1, ReplicaChange{Kind: PromoteLearner, Node: 4})
	remove := uint64(3)
	if n.leader(1) == remove {
		remove = 2
	}
	n.change(1, ReplicaChange{Kind: RemoveVoter, Node: remove})
	n.mustPropose(1, putCmd("k", "after"))
	n.runUntil("node 4 to apply as a voter", 100, func() bool { return sm4.data["k"] == "after" })
	st, _ := n.hosts[n.leader(1)].Status(1)
	want := map[uint64]bool{1: true, 2: true, 3: true, 4: true}
	delete(want, remove)
	if len(st.Voters) != 3 || len(st.Learners) != 0 {
		t.Fatalf("voters %v learners %v, want voters %v", st.Voters, st.Learners, want)
	}
	for _, v := range st.Voters {
		if !want[v] {
			t.Fatalf("voters %v, want %v", st.Voters, want)
		}
	}
	// The removed node is out: the group commits without it.
	n.partition(remove)
	n.mustPropose(1, putCmd("k", "without"))
}

func (n *simNet) changeErr(group uint64, c ReplicaChange) error {
	n.t.Helper()
	var l uint64
	n.runUntil("a leader", 200, func() bool { l = n.leader(group); return l != 0 })
	f, err := n.hosts[l].ChangeReplicasAsync(group, c)
	if err != nil {
		return err
	}
	n.runUntil(fmt.Sprintf("%s %d", c.Kind, c.Node), 200, func() bool {
		select {
		case <-f.Done():
			return true
		default:
			return false
		}
	})
	_, err = f.Result()
	return err
}

func (n *simNet) change(group uint64, c ReplicaChange) {
	n.t.Helper()
	for attempt := 0; attempt < 10; attempt++ {
		err := n.changeErr(group, c)
		if err == nil {
			return
		}
		if !Retriable(err) {
			n.t.Fatalf("%s %d: %v", c.Kind, c.Node, err)
		}
	}
	n.t.Fatalf("%s %d kept failing", c.Kind, c.Node)
}

// TestRestartWithLogIntact crashes a follower, keeps its log store, writes
// more, and reopens it: it recovers its groups from snapshot and log, then
// catches up.
func TestRestartWithLogIntact(t *testing.T) {
	n := newSim(t, 7, 3, func(o *Options) { o.SnapshotEvery, o.CompactMargin = 10, 3 })
	groups := groupIDs(4)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	for i := 0; i < 25; i++ {
		for _, g := range groups {
			n.mustPropose(g, putCmd(fmt.Sprintf("k%d", i%5), fmt.Sprint(i)))
		}
	}
	n.runUntil("replicas equal", 100, func() bool { return n.replicasEqual(groups) })
	victim := n.ids[0]
	if n.leader(1) == victim {
		victim = n.ids[1]
	}
	before := map[uint64]map[string]string{}
	for _, g := range groups {
		before[g] = maps.Clone(n.sms[victim][g].data)
	}
	n.crash(victim)
	for i := 25; i < 40; i++ {
		for _, g := range groups {
			n.mustPropose(g, putCmd(fmt.Sprintf("k%d", i%5), fmt.Sprint(i)))
		}
	}
	n.start(victim)
	if got := n.hosts[victim].Groups(); len(got) != len(groups) {
		t.Fatalf("restarted host recovered groups %v, want %v", got, groups)
	}
	// Recovery alone (snapshot + stored log, before any message) rebuilds
	// the state it had acknowledged to its leaders.
	if _, err := n.hosts[victim].Process(); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if got := n.sms[victim][g].data; !maps.Equal(got, before[g]) {
			t.Errorf("group %d after recovery: %v, want %v", g, got, before[g])
		}
	}
	n.runUntil("the restarted node to catch up", 300, func() bool { return n.replicasEqual(groups) })
	for _, g := range groups {
		if got := n.sms[victim][g].data["k4"]; got != "39" {
			t.Errorf("group %d: k4=%q after catch-up, want 39", g, got)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	n := newSim(t, 8, 3, func(o *Options) { o.MaxInflight, o.MaxProposalBytes = 4, 64 })
	n.createGroup(1, n.ids)
	n.mustPropose(1, putCmd("a", "b"))
	l := n.leader(1)
	var follower uint64
	for _, id := range n.ids {
		if id != l {
			follower = id
		}
	}
	ctx := context.Background()
	if _, err := n.hosts[l].Propose(ctx, 99, putCmd("a", "b")); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("unknown group: %v", err)
	}
	var nl *NotLeaderError
	if _, err := n.hosts[follower].Propose(ctx, 1, putCmd("a", "b")); !errors.As(err, &nl) || nl.Leader != l {
		t.Errorf("propose at a follower: %v, want NotLeaderError naming %d", err, l)
	}
	if _, err := n.hosts[l].Propose(ctx, 1, make([]byte, 65)); !errors.Is(err, ErrProposalTooLarge) {
		t.Errorf("large proposal: %v", err)
	}
	for i := 0; i < 4; i++ {
		if _, err := n.hosts[l].ProposeAsync(1, putCmd("a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.hosts[l].ProposeAsync(1, putCmd("a", "b")); !errors.Is(err, ErrTooManyProposals) {
		t.Errorf("fifth proposal in flight: %v, want ErrTooManyProposals", err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := n.hosts[l].Propose(dctx, 1, nil); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTooManyProposals) {
		t.Errorf("deadline: %v", err)
	}
	if err := n.hosts[l].CreateGroup(1, n.ids, newKV()); !errors.Is(err, ErrGroupExists) {
		t.Errorf("create twice: %v", err)
	}
	if err := n.hosts[l].ReadBarrier(ctx, 7); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("read barrier, unknown group: %v", err)
	}
	if !Retriable(nl) || Retriable(ErrUnknownGroup) {
		t.Error("Retriable misclassifies")
	}
}

// TestSaveOncePerCycle checks the one-fsync promise: however many groups
// have something to persist in a cycle, the log store is saved once.
func TestSaveOncePerCycle(t *testing.T) {
	n := newSim(t, 9, 3, nil)
	groups := groupIDs(32)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	n.runUntil("leaders", 300, func() bool { return n.allHaveLeaders(groups) })
	l := n.leader(1)
	var futures []*Future
	for _, g := range groups {
		if n.leader(g) == l {
			f, err := n.hosts[l].ProposeAsync(g, putCmd("k", "v"))
			if err != nil {
				t.Fatal(err)
			}
			futures = append(futures, f)
		}
	}
	if len(futures) < 2 {
		t.Fatalf("node %d leads %d groups; the test needs several", l, len(futures))
	}
	saves := n.stores[l].Saves()
	if _, err := n.hosts[l].Process(); err != nil {
		t.Fatal(err)
	}
	if got := n.stores[l].Saves() - saves; got != 1 {
		t.Fatalf("%d proposals in %d groups took %d saves, want 1", len(futures), len(futures), got)
	}
}
