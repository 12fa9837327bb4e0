package metastore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

func TestReopenReplays(t *testing.T) {
	dir := t.TempDir()
	cmds := script()
	want := states(t, cmds)
	s := mustOpen(t, vfs.OS(), dir, Options{})
	wantState(t, s, want[0])
	mustApply(t, s, cmds[:6]...)
	// A refused command answers in Result.Err and is not logged.
	res, err := s.Apply(context.Background(), metadata.Command{V: 1, Kind: metadata.KindSplitRange, Range: 99})
	if err != nil || !errors.Is(res.Err, metadata.ErrNoSuchRange) {
		t.Fatalf("refused command: %v / %v", err, res.Err)
	}
	mustClose(t, s)

	s = mustOpen(t, vfs.OS(), dir, Options{})
	wantState(t, s, want[6])
	mustApply(t, s, cmds[6:]...)
	mustClose(t, s)

	s = mustOpen(t, vfs.OS(), dir, Options{})
	defer mustClose(t, s)
	wantState(t, s, want[len(cmds)])
	if got := files(t, dir); !slices.Equal(got, []string{logName(0)}) {
		t.Fatalf("files %v", got)
	}
}

func TestApplyResult(t *testing.T) {
	s := mustOpen(t, vfs.OS(), t.TempDir(), Options{})
	defer mustClose(t, s)
	res, err := s.Apply(context.Background(), script()[0])
	if err != nil || res.Err != nil || res.TopicID != 1 || !slices.Equal(res.RangeIDs, []uint64{1, 2}) {
		t.Fatalf("create_topic: %+v, %v", res, err)
	}
	// Read your writes: once Apply returns, View shows the command.
	s.View(func(st *metadata.State) {
		if _, ok := st.Topic("orders"); !ok {
			t.Fatal("View does not show an acknowledged command")
		}
	})
}

func TestApplyContextAndLimits(t *testing.T) {
	s := mustOpen(t, vfs.OS(), t.TempDir(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Apply(ctx, script()[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	huge := metadata.Command{V: 1, Kind: metadata.KindCreateUser, User: "u",
		PasswordHash: strings.Repeat("h", maxRecord), Perms: []string{"admin"}}
	if _, err := s.Apply(context.Background(), huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge command: %v", err)
	}
	wantState(t, s, states(t, nil)[0])
	mustClose(t, s)
	if _, err := s.Apply(context.Background(), script()[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
	if err := s.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Snapshot after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSnapshotThenMoreCommands(t *testing.T) {
	dir := t.TempDir()
	cmds := script()
	want := states(t, cmds)
	s := mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: -1})
	mustApply(t, s, cmds[:5]...)
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(); err != nil { // nothing new: no-op
		t.Fatal(err)
	}
	mustApply(t, s, cmds[5:9]...)
	mustClose(t, s)
	wantFiles(t, dir, logName(0), logName(5), snapName(5))

	s = mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: -1})
	wantState(t, s, want[9])
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, cmds[9:]...)
	mustClose(t, s)
	// Two snapshots kept, and the logs from the older one on.
	wantFiles(t, dir, logName(5), logName(9), snapName(5), snapName(9))

	s = mustOpen(t, vfs.OS(), dir, Options{})
	defer mustClose(t, s)
	wantState(t, s, want[len(cmds)])
}

func wantFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	slices.Sort(names)
	if got := files(t, dir); !slices.Equal(got, names) {
		t.Fatalf("files %v, want %v", got, names)
	}
}

func TestAutomaticSnapshots(t *testing.T) {
	dir := t.TempDir()
	var cmds []metadata.Command
	for i := range 25 {
		cmds = append(cmds, topicCmd(i))
	}
	want := states(t, cmds)
	s := mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: 4})
	mustApply(t, s, cmds...) // one at a time: one command per batch
	mustClose(t, s)
	wantFiles(t, dir, logName(20), logName(24), snapName(20), snapName(24))
	s = mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: 4})
	defer mustClose(t, s)
	wantState(t, s, want[25])
}

// TestSnapshotFallback: a damaged newest snapshot falls back to the
// previous one and its logs; without those logs Open refuses.
func TestSnapshotFallback(t *testing.T) {
	dir := t.TempDir()
	cmds := script()
	want := states(t, cmds)
	s := mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: -1})
	mustApply(t, s, cmds[:3]...)
	snapshot(t, s)
	mustApply(t, s, cmds[3:6]...)
	snapshot(t, s)
	mustApply(t, s, cmds[6:]...)
	mustClose(t, s)

	b := readAll(t, snapPath(dir, 6))
	b[len(b)/2] ^= 0x40
	writeAll(t, snapPath(dir, 6), b)
	s = mustOpen(t, vfs.OS(), dir, Options{})
	wantState(t, s, want[len(cmds)])
	mustClose(t, s)

	if err := vfs.OS().Remove(logPath(dir, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(vfs.OS(), dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open without the fallback's log: %v", err)
	}
}

func snapshot(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
}

// TestCrashAfterSnapshotRename: a crash between the snapshot's rename and
// the new log leaves the old log, which covers the snapshot; Open skips
// what the snapshot holds and starts the new log itself, so every log
// starts where a snapshot does.
func TestCrashAfterSnapshotRename(t *testing.T) {
	dir := t.TempDir()
	cmds := script()
	want := states(t, cmds)
	s := mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: -1})
	mustApply(t, s, cmds[:5]...)
	snapshot(t, s)
	mustClose(t, s)
	if err := vfs.OS().Remove(logPath(dir, 5)); err != nil {
		t.Fatal(err)
	}
	writeAll(t, snapPath(dir, 7)+tmpSuffix, []byte("half a snapshot"))

	s = mustOpen(t, vfs.OS(), dir, Options{SnapshotEvery: -1})
	wantState(t, s, want[5])
	mustApply(t, s, cmds[5:]...)
	mustClose(t, s)
	wantFiles(t, dir, logName(0), logName(5), snapName(5))

	s = mustOpen(t, vfs.OS(), dir, Options{})
	defer mustClose(t, s)
	wantState(t, s, want[len(cmds)])
}

func TestLogGapIsCorruption(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, vfs.OS(), dir, Options{})
	mustApply(t, s, script()[:3]...)
	mustClose(t, s)
	if err := vfs.OS().Rename(logPath(dir, 0), logPath(dir, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(vfs.OS(), dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a log gap: %v", err)
	}
}

// TestReplayRefusalIsCorruption: a well-formed record the state machine
// refuses means log and code disagree; Open must not skip it.
func TestReplayRefusalIsCorruption(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, vfs.OS(), dir, Options{})
	mustApply(t, s, script()[0])
	mustClose(t, s)
	rec, err := encodeCommand(script()[0]) // the same topic again: already_exists
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, logPath(dir, 0), append(readAll(t, logPath(dir, 0)), rec...))
	if _, err := Open(vfs.OS(), dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v", err)
	}
}
