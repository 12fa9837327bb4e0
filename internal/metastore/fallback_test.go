package metastore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// damage flips one byte in the middle of a file and makes that durable, as
// bit rot would.
func damage(t *testing.T, fs vfs.FS, name string) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, size/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, size/2); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestFallbackAfterCrashBeforeNewLog: killed between snapshot-3's rename
// and the creation of log-3, the store then goes on past 3 and rotates at
// 7. The fallback for a damaged snapshot-7 is snapshot-3 plus every command
// after 3, so rotation must keep whatever log holds them, whatever index
// that log starts at.
func TestFallbackAfterCrashBeforeNewLog(t *testing.T) {
	cmds := script()
	want := states(t, cmds)
	opts := Options{SnapshotEvery: -1}
	img := killedAt(t, opts, cmds[:3], nth("create", logPrefix, 1), (*Store).Snapshot)
	s := mustOpen(t, img, metaDir, opts)
	mustApply(t, s, cmds[3:7]...)
	snapshot(t, s)
	mustApply(t, s, cmds[7:]...)
	mustClose(t, s)

	damage(t, img, filepath.Join(metaDir, snapName(7)))
	s = mustOpen(t, img, metaDir, opts)
	defer mustClose(t, s)
	wantState(t, s, want[len(cmds)])
}

// TestFallbackSurvivesSecondDamagedSnapshot: a snapshot found damaged is
// not one of the two that rotation keeps. After snapshot-6 fails to load
// and the store rotates at 10, snapshot-3 and its logs are still the
// fallback, so a damaged snapshot-10 too still recovers everything.
func TestFallbackSurvivesSecondDamagedSnapshot(t *testing.T) {
	cmds := script()
	want := states(t, cmds)
	opts := Options{SnapshotEvery: -1}
	mem := vfs.NewMem()
	s := mustOpen(t, mem, metaDir, opts)
	mustApply(t, s, cmds[:3]...)
	snapshot(t, s)
	mustApply(t, s, cmds[3:6]...)
	snapshot(t, s)
	mustApply(t, s, cmds[6:8]...)
	mustClose(t, s)

	damage(t, mem, filepath.Join(metaDir, snapName(6)))
	s = mustOpen(t, mem, metaDir, opts)
	mustApply(t, s, cmds[8:10]...)
	snapshot(t, s)
	mustApply(t, s, cmds[10:]...)
	mustClose(t, s)

	damage(t, mem, filepath.Join(metaDir, snapName(10)))
	s = mustOpen(t, mem, metaDir, opts)
	defer mustClose(t, s)
	wantState(t, s, want[len(cmds)])
}

// TestRotationKeepsLogByItsEnd: a log that starts before a snapshot but
// holds commands after it (what appending to the old log after a crash
// between a snapshot's rename and its new log leaves) is still needed by a
// fallback to that snapshot, so rotation must keep it.
func TestRotationKeepsLogByItsEnd(t *testing.T) {
	cmds := script()
	want := states(t, cmds)
	opts := Options{SnapshotEvery: -1}
	mem := vfs.NewMem()
	s := mustOpen(t, mem, metaDir, opts)
	mustApply(t, s, cmds[:7]...)
	mustClose(t, s)
	st := metadata.New()
	for _, c := range cmds[:3] {
		st.Apply(c)
	}
	if _, err := writeSnapshot(mem, metaDir, 3, st); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, mem, metaDir, opts) // snapshot-3 and log-0 up to 7
	snapshot(t, s)
	mustApply(t, s, cmds[7:]...)
	mustClose(t, s)

	damage(t, mem, filepath.Join(metaDir, snapName(7)))
	s = mustOpen(t, mem, metaDir, opts)
	defer mustClose(t, s)
	wantState(t, s, want[len(cmds)])
}
