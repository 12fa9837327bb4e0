package logstore

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/malachi-log/malachi/internal/vfs"
)

// dir is where the MemFS tests keep the store; its parent is the root,
// which is always there.
const dir = "/raft"

func ent(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: pb.EntryNormal.Enum(), Data: []byte(data)}
}

func ents(from, to, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := from; i <= to; i++ {
		out = append(out, ent(i, term, "x"))
	}
	return out
}

func hardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(vote), Commit: proto.Uint64(commit)}
}

func snapshot(index, term uint64, data string, voters ...uint64) *pb.Snapshot {
	s := &pb.Snapshot{Data: []byte(data), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(term)}}
	if voters != nil {
		s.Metadata.ConfState = &pb.ConfState{Voters: voters}
	}
	return s
}

func mustOpen(t testing.TB, fs vfs.FS, opts Options) *Store {
	t.Helper()
	s, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustSave(t testing.TB, s *Store, ups ...Update) {
	t.Helper()
	if err := s.Save(ups); err != nil {
		t.Fatalf("Save: %v", err)
	}
}

func mustClose(t tb, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// runOps runs ops on the store and the model and checks each outcome.
func runOps(t tb, s *Store, m model, ops []op) []op {
	t.Helper()
	var accepted []op
	for i, o := range ops {
		serr, merr := o.run(s), m.apply(o)
		if !sameRefusal(serr, merr) {
			t.Fatalf("op %d %v: store says %v, model says %v", i, o, serr, merr)
		}
		if serr == nil {
			accepted = append(accepted, o)
		}
	}
	return accepted
}

// killDisk simulates kill -9 over a MemFS through vfs.FaultyFS: the
// process dies at a chosen operation that changes the disk. At that
// moment it keeps a Clone of the live state (unsynced bytes included and
// still not durable in it) and fails that operation and every later one,
// so nothing succeeds after the image is taken and everything
// acknowledged before it is in it.
type killDisk struct {
	mem *vfs.MemFS
	fs  *vfs.FaultyFS

	mu        sync.Mutex
	countdown int // changes left before the kill; negative: never
	image     *vfs.MemFS
}

var errKilled = errors.New("killed")

func newKillDisk(mem *vfs.MemFS, after int) *killDisk {
	k := &killDisk{mem: mem, countdown: after}
	k.fs = vfs.NewFaulty(mem, k.rule)
	return k
}

func (k *killDisk) rule(op vfs.Op, _ string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.image != nil {
		return errKilled
	}
	switch op {
	case vfs.OpRead, vfs.OpReadDir, vfs.OpStat, vfs.OpClose:
		return nil
	}
	if k.countdown == 0 {
		k.image = k.mem.Clone()
		return errKilled
	}
	k.countdown--
	return nil
}

// kill kills the process if it still runs and returns the crash image.
func (k *killDisk) kill() *vfs.MemFS {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.image == nil {
		k.image = k.mem.Clone()
	}
	return k.image
}

func (k *killDisk) killed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.image != nil
}

// tb is what the helpers need of a test: *testing.T and *rapid.T both.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// arm makes the process die at the n-th change from now.
func (k *killDisk) arm(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.countdown = n
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
