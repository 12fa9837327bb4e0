package logstore

import (
	"fmt"
	"io"
	"log"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/malachi-log/malachi/internal/vfs"
)

var quiet = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

// node runs single-voter raft groups on one store the way a host does: all
// groups' Readies in one Save, then Advance.
type node struct {
	s       *Store
	rns     map[uint64]*raft.RawNode
	applied map[uint64][]string
}

func newNode(t *testing.T, s *Store, groups int, applied map[uint64]uint64) *node {
	t.Helper()
	n := &node{s: s, rns: map[uint64]*raft.RawNode{}, applied: map[uint64][]string{}}
	for g := uint64(1); g <= uint64(groups); g++ {
		rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1,
			Storage: s.Storage(g), Applied: applied[g], MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 64,
			Logger: quiet})
		if err != nil {
			t.Fatalf("group %d: %v", g, err)
		}
		n.rns[g] = rn
	}
	return n
}

// cycle persists every group's Ready with one Save and applies what is
// committed. It reports whether anything was ready.
func (n *node) cycle(t *testing.T) bool {
	t.Helper()
	var ups []Update
	readies := map[uint64]raft.Ready{}
	for g, rn := range n.rns {
		if !rn.HasReady() {
			continue
		}
		rd := rn.Ready()
		readies[g] = rd
		ups = append(ups, Update{Group: g, HardState: rd.HardState, Entries: rd.Entries, Snapshot: rd.Snapshot})
	}
	if len(readies) == 0 {
		return false
	}
	if err := n.s.Save(ups); err != nil {
		t.Fatalf("Save: %v", err)
	}
	for g, rd := range readies {
		for _, e := range rd.CommittedEntries {
			if e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
				n.applied[g] = append(n.applied[g], string(e.GetData()))
			}
		}
		n.rns[g].Advance(rd)
	}
	return true
}

func (n *node) settle(t *testing.T) {
	t.Helper()
	for range 100 {
		if !n.cycle(t) {
			return
		}
	}
	t.Fatal("the groups never settled")
}

func TestRawNodesRestartFromTheStore(t *testing.T) {
	const groups = 8
	mem := vfs.NewMem()
	s := mustOpen(t, mem, Options{})
	var boot []Update
	for g := uint64(1); g <= groups; g++ {
		boot = append(boot, Update{Group: g, Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			ConfState: &pb.ConfState{Voters: []uint64{1}}}}})
	}
	mustSave(t, s, boot...)
	n := newNode(t, s, groups, nil)
	for _, rn := range n.rns {
		if err := rn.Campaign(); err != nil {
			t.Fatal(err)
		}
	}
	n.settle(t)
	for i := range 5 {
		for g, rn := range n.rns {
			if err := rn.Propose(fmt.Appendf(nil, "g%d-%d", g, i)); err != nil {
				t.Fatal(err)
			}
		}
		n.settle(t)
	}
	// Snapshot and compact half the groups, as the state machine would.
	for g := uint64(1); g <= groups/2; g++ {
		st := n.rns[g].Status()
		term, _ := s.Storage(g).Term(st.Applied)
		snap := snapshot(st.Applied, term, "state", 1)
		if err := s.SetSnapshot(g, snap); err != nil {
			t.Fatal(err)
		}
		if err := s.Compact(g, st.Applied); err != nil {
			t.Fatal(err)
		}
	}
	want := map[uint64]*pb.HardState{}
	for g, rn := range n.rns {
		if got := len(n.applied[g]); got != 5 {
			t.Fatalf("group %d applied %d proposals, want 5", g, got)
		}
		want[g] = rn.Status().HardState
	}

	// Power loss, restart: every group comes back with its hard state and
	// log, and takes new proposals.
	s2 := mustOpen(t, mem.CrashClone(), Options{})
	defer mustClose(t, s2)
	applied := map[uint64]uint64{}
	for g := range want {
		applied[g] = want[g].GetCommit()
	}
	n2 := newNode(t, s2, groups, applied)
	for g, rn := range n2.rns {
		hs := rn.Status().HardState
		if hs.GetTerm() != want[g].GetTerm() || hs.GetCommit() != want[g].GetCommit() || hs.GetVote() != want[g].GetVote() {
			t.Fatalf("group %d restarted with %v, want %v", g, hs, want[g])
		}
		if err := rn.Campaign(); err != nil {
			t.Fatal(err)
		}
	}
	n2.settle(t)
	for _, rn := range n2.rns {
		if err := rn.Propose([]byte("after restart")); err != nil {
			t.Fatal(err)
		}
	}
	n2.settle(t)
	for g := range n2.rns {
		if got := n2.applied[g]; len(got) != 1 || got[0] != "after restart" {
			t.Fatalf("group %d applied %q after the restart, want only the new proposal", g, got)
		}
	}
	mustClose(t, s)
}
