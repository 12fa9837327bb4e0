package metastore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// killedAt opens a store on a fresh MemFS, applies cmds, arms kill and
// runs crash, which must die; it returns the crash image.
func killedAt(t *testing.T, opts Options, cmds []metadata.Command, kill func(string, string) bool, crash func(*Store) error) *vfs.MemFS {
	t.Helper()
	fs := newKillFS(vfs.NewMem())
	s := mustOpen(t, fs, metaDir, opts)
	defer killedStore(s)
	mustApply(t, s, cmds...)
	fs.arm(kill)
	if err := crash(s); !errors.Is(err, errKilled) {
		t.Fatalf("the step that should be killed returned %v", err)
	}
	return fs.crashImage()
}

// TestOpenMakesReplayedTailDurable: a command written but not fsynced when
// the process is killed is replayed by the next Open and shown in View. It
// must be durable by the time Open returns: a reader acts on View at once
// (the broker writes and acknowledges records under metadata it sees), so a
// power loss right after Open must not take it back.
func TestOpenMakesReplayedTailDurable(t *testing.T) {
	cmds := script()
	want := states(t, cmds)
	img := killedAt(t, Options{}, cmds[:3], nth("sync", logPrefix, 1), func(s *Store) error {
		_, err := s.Apply(context.Background(), cmds[3])
		return err
	})
	s := mustOpen(t, img, metaDir, Options{})
	wantState(t, s, want[4])
	lost := img.CrashClone()
	mustClose(t, s)
	s = mustOpen(t, lost, metaDir, Options{})
	defer mustClose(t, s)
	wantState(t, s, want[4])
}

// TestOpenMakesReusedLogEntryDurable: killed after a rotation created the
// new log but before the directory fsync, the next Open appends to that
// log. Its directory entry must become durable, or a power loss drops the
// log with every command acknowledged into it.
func TestOpenMakesReusedLogEntryDurable(t *testing.T) {
	cmds := script()
	want := states(t, cmds)
	opts := Options{SnapshotEvery: -1}
	img := killedAt(t, opts, cmds[:3], nth("syncdir", "", 2), (*Store).Snapshot)
	s := mustOpen(t, img, metaDir, opts)
	mustApply(t, s, cmds[3:6]...)
	mustClose(t, s)
	s = mustOpen(t, img.CrashClone(), metaDir, opts)
	defer mustClose(t, s)
	wantState(t, s, want[6])
}

// TestOpenMakesRenamedSnapshotDurable: killed between a snapshot's rename
// and the directory fsync, the next Open recovers from that snapshot, so
// it must be durable before Open returns, like everything Open builds on.
func TestOpenMakesRenamedSnapshotDurable(t *testing.T) {
	cmds := script()
	want := states(t, cmds)
	opts := Options{SnapshotEvery: -1}
	img := killedAt(t, opts, cmds[:3], nth("syncdir", "", 1), (*Store).Snapshot)
	s := mustOpen(t, img, metaDir, opts)
	mustApply(t, s, cmds[3:5]...)
	lost := img.CrashClone()
	mustClose(t, s)
	names, err := lost.ReadDir(metaDir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, snapName(3)) {
		t.Fatalf("after a power loss the directory holds %v, not the snapshot Open used", names)
	}
	s = mustOpen(t, lost, metaDir, opts)
	defer mustClose(t, s)
	wantState(t, s, want[5])
}

// TestOpenSyncsParentEveryTime: killed between creating the store's
// directory and fsyncing its parent, the next Open finds the directory and
// must still make its entry durable, or a power loss drops the whole store.
func TestOpenSyncsParentEveryTime(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	fs := newKillFS(mem)
	fs.arm(nth("syncdir", "", 1))
	if _, err := Open(fs, "/data/meta", Options{}); !errors.Is(err, errKilled) {
		t.Fatalf("Open killed at its first directory fsync: %v", err)
	}
	img := fs.crashImage()
	s := mustOpen(t, img, "/data/meta", Options{})
	mustApply(t, s, script()[:2]...)
	mustClose(t, s)
	s = mustOpen(t, img.CrashClone(), "/data/meta", Options{})
	defer mustClose(t, s)
	wantState(t, s, states(t, script())[2])
}
