package control

import (
	"bytes"
	"encoding/json"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/raft"
	"github.com/malachi-log/malachi/internal/raft/logstore"
	"github.com/malachi-log/malachi/internal/vfs"
)

func mustEntry(t *testing.T, e entry) []byte {
	t.Helper()
	b, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGroupSMSnapshotRoundTrip: a vnode's state, with its request-id
// table, survives Snapshot and Restore byte for byte; a restored replica
// still answers a duplicate with the first result; a snapshot of another
// group is refused.
func TestGroupSMSnapshotRoundTrip(t *testing.T) {
	sm := newGroupSM(VnodeGroup(3), &notifier{})
	cmd := metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: "t"}
	first := sm.Apply(2, mustEntry(t, entry{Origin: 1, Req: 9, Meta: &cmd}))
	snap, err := sm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back := newGroupSM(VnodeGroup(3), &notifier{})
	if err := back.Restore(snap); err != nil {
		t.Fatal(err)
	}
	again, _ := back.Snapshot()
	if !bytes.Equal(snap, again) {
		t.Fatalf("snapshot changed across a restore")
	}
	if dup := back.Apply(3, mustEntry(t, entry{Origin: 1, Req: 9, Meta: &cmd})); !bytes.Equal(dup, first) {
		t.Fatalf("duplicate after restore answered %s, first %s", dup, first)
	}
	other := newGroupSM(VnodeGroup(4), &notifier{})
	if err := other.Restore(snap); err == nil {
		t.Fatalf("vnode 4 accepted vnode 3's snapshot")
	}
	if err := newGroupSM(RootGroup, &notifier{}).Restore(snap); err == nil {
		t.Fatalf("the root accepted a vnode's snapshot")
	}
}

// TestGroupSMRefusesGarbage: entries that do not decode, or carry neither
// or both commands, are refused alike on every replica, never a panic.
func TestGroupSMRefusesGarbage(t *testing.T) {
	sm := newGroupSM(VnodeGroup(0), &notifier{})
	cmd := metadata.Command{V: metadata.Version, Kind: metadata.KindCreateTopic, Topic: "t"}
	for _, data := range [][]byte{nil, []byte("{"), []byte(`{}`), mustEntry(t, entry{Meta: &cmd, Reg: &regCommand{Kind: regRegister}})} {
		o, err := decodeOutcome(sm.Apply(1, data))
		if err != nil || o.Err != string(metadata.ErrUnknownCommand) {
			t.Errorf("entry %q: %+v %v", data, o, err)
		}
	}
	// A registry command in a vnode is refused too.
	o, _ := decodeOutcome(sm.Apply(2, mustEntry(t, entry{Reg: &regCommand{Kind: regRegister, Node: NodeRecord{ID: 2, Addr: "x"}}})))
	if o.Err == "" {
		t.Errorf("a vnode applied a registry command")
	}
}

// TestRegistryCommands: registration is idempotent, removal keeps at
// least one node, and voters follow placement with the factor clamped.
func TestRegistryCommands(t *testing.T) {
	r := newRegistry(4, 3, NodeRecord{ID: 1, Addr: "a1"})
	for _, g := range []uint64{RootGroup, VnodeGroup(0), VnodeGroup(3)} {
		if vs := r.Voters[g]; len(vs) != 1 || vs[0] != 1 {
			t.Fatalf("one node: %s voters %v", groupName(g), vs)
		}
	}
	for id := uint64(2); id <= 5; id++ {
		if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: id, Addr: "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: 3, Addr: "moved"}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Node(3); n.Addr != "moved" || len(r.Nodes) != 5 {
		t.Fatalf("re-registration: %+v, %d nodes", n, len(r.Nodes))
	}
	if len(r.Voters[RootGroup]) != 5 || len(r.Voters[VnodeGroup(1)]) != 3 {
		t.Fatalf("voters: root %v, vnode-1 %v", r.Voters[RootGroup], r.Voters[VnodeGroup(1)])
	}
	for _, bad := range []NodeRecord{{ID: 0, Addr: "a"}, {ID: 9}} {
		if err := r.apply(&regCommand{Kind: regRegister, Node: bad}); err == nil {
			t.Errorf("registered %+v", bad)
		}
	}
	for id := uint64(1); id <= 4; id++ {
		if err := r.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: id}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: 5}}); err != errLastNode {
		t.Fatalf("removing the last node: %v", err)
	}
	if err := r.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: 1}}); err != errUnknownNode {
		t.Fatalf("removing an unknown node: %v", err)
	}
	b1, _ := json.Marshal(r)
	b2, _ := json.Marshal(r.Clone())
	if !bytes.Equal(b1, b2) {
		t.Fatalf("clone encodes differently")
	}
}

// TestDurableLogAdapter: the adapter keeps the stored hard state when a
// cycle carries an empty one, drops a received snapshot no newer than the
// stored one instead of failing the Save, and takes repeated local
// snapshots and compactions in stride.
func TestDurableLogAdapter(t *testing.T) {
	s, err := logstore.Open(vfs.NewMem(), "/log", logstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := durableLog{s: s}
	cs := &pb.ConfState{Voters: []uint64{1}}
	snap := &pb.Snapshot{Data: []byte("s"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: cs}}
	hs := &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}
	if err := d.Save([]raft.Update{{Group: 5, HardState: hs, Snapshot: snap}}); err != nil {
		t.Fatal(err)
	}
	ents := []*pb.Entry{{Index: new(uint64(2)), Term: new(uint64(1))}, {Index: new(uint64(3)), Term: new(uint64(1))}}
	if err := d.Save([]raft.Update{{Group: 5, HardState: &pb.HardState{}, Snapshot: &pb.Snapshot{}, Entries: ents}}); err != nil {
		t.Fatal(err)
	}
	got, _, _ := d.Storage(5).InitialState()
	if got.GetCommit() != 1 || got.GetTerm() != 1 {
		t.Fatalf("an empty hard state overwrote the stored one: %v", got)
	}
	if err := d.Save([]raft.Update{{Group: 5, Snapshot: snap}}); err != nil {
		t.Fatalf("a stale received snapshot failed the save: %v", err)
	}
	local := &pb.Snapshot{Data: []byte("s3"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(3)), Term: new(uint64(1)), ConfState: cs}}
	for range 2 {
		if err := d.SetSnapshot(5, local); err != nil {
			t.Fatal(err)
		}
		if err := d.Compact(5, 2); err != nil {
			t.Fatal(err)
		}
	}
	if last, _ := d.Storage(5).LastIndex(); last != 3 {
		t.Fatalf("last index %d, want 3", last)
	}
}
