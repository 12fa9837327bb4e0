package vfs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

func mustCreate(t *testing.T, fs FS, name string) File {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return f
}

func mustWrite(t *testing.T, f File, b []byte) {
	t.Helper()
	if _, err := f.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func readAll(t *testing.T, fs FS, name string) []byte {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

func exists(fs FS, name string) bool {
	_, err := fs.Stat(name)
	return err == nil
}

func TestMemDurability(t *testing.T) {
	tests := []struct {
		name     string
		run      func(t *testing.T, m *MemFS)
		wantFile bool
		want     string
	}{
		{"created, dir not synced: gone", func(t *testing.T, m *MemFS) {
			f := mustCreate(t, m, "/d/a")
			mustWrite(t, f, []byte("x"))
			_ = f.Sync()
		}, false, ""},
		{"dir synced, data not synced: empty", func(t *testing.T, m *MemFS) {
			f := mustCreate(t, m, "/d/a")
			_ = m.SyncDir("/d")
			mustWrite(t, f, []byte("x"))
		}, true, ""},
		{"dir and data synced", func(t *testing.T, m *MemFS) {
			f := mustCreate(t, m, "/d/a")
			mustWrite(t, f, []byte("hello"))
			_ = f.Sync()
			_ = m.SyncDir("/d")
			mustWrite(t, f, []byte(" world"))
		}, true, "hello"},
		{"unsynced truncate undone", func(t *testing.T, m *MemFS) {
			f := mustCreate(t, m, "/d/a")
			mustWrite(t, f, []byte("hello"))
			_ = f.Sync()
			_ = m.SyncDir("/d")
			_ = f.Truncate(2)
		}, true, "hello"},
		{"remove without dir sync survives", func(t *testing.T, m *MemFS) {
			f := mustCreate(t, m, "/d/a")
			mustWrite(t, f, []byte("keep"))
			_ = f.Sync()
			_ = m.SyncDir("/d")
			_ = m.Remove("/d/a")
		}, true, "keep"},
		{"remove with dir sync is gone", func(t *testing.T, m *MemFS) {
			f := mustCreate(t, m, "/d/a")
			_ = f.Sync()
			_ = m.SyncDir("/d")
			_ = m.Remove("/d/a")
			_ = m.SyncDir("/d")
		}, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMem()
			if err := m.MkdirAll("/d", 0o755); err != nil {
				t.Fatal(err)
			}
			_ = m.SyncDir("/")
			tc.run(t, m)
			after := m.CrashClone()
			if got := exists(after, "/d/a"); got != tc.wantFile {
				t.Fatalf("file exists = %v, want %v", got, tc.wantFile)
			}
			if tc.wantFile {
				if got := readAll(t, after, "/d/a"); string(got) != tc.want {
					t.Fatalf("content %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func TestMemDirectoryNeedsParentSync(t *testing.T) {
	m := NewMem()
	_ = m.MkdirAll("/a/b", 0o755)
	if exists(m.CrashClone(), "/a") {
		t.Fatal("unsynced directory survived")
	}
	_ = m.SyncDir("/")
	_ = m.SyncDir("/a")
	if !exists(m.CrashClone(), "/a/b") {
		t.Fatal("synced directory lost")
	}
}

func TestMemRename(t *testing.T) {
	m := NewMem()
	_ = m.MkdirAll("/d", 0o755)
	_ = m.SyncDir("/")
	f := mustCreate(t, m, "/d/tmp")
	mustWrite(t, f, []byte("v1"))
	_ = f.Sync()
	_ = m.SyncDir("/d")
	if err := m.Rename("/d/tmp", "/d/final"); err != nil {
		t.Fatal(err)
	}
	before := m.CrashClone()
	if !exists(before, "/d/tmp") || exists(before, "/d/final") {
		t.Fatal("rename durable before SyncDir")
	}
	_ = m.SyncDir("/d")
	after := m.CrashClone()
	if exists(after, "/d/tmp") || string(readAll(t, after, "/d/final")) != "v1" {
		t.Fatal("rename not durable after SyncDir")
	}
	// The open handle follows the inode, as on POSIX.
	mustWrite(t, f, []byte("+"))
	if got := readAll(t, m, "/d/final"); string(got) != "v1+" {
		t.Fatalf("got %q", got)
	}
}

// A torn tail keeps the synced content plus a prefix of the unsynced
// writes, the torn one possibly zero-filled to its full extent, and over
// many seeds both extremes and the zero fill occur.
func TestMemPowerLossTornTail(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/a")
	_ = m.SyncDir("/")
	mustWrite(t, f, []byte("durable|"))
	_ = f.Sync()
	full := []byte("durable|")
	for _, w := range []string{"one,", "two,", "three"} {
		mustWrite(t, f, []byte(w))
		full = append(full, w...)
	}
	sawNone, sawAll, sawZeros := false, false, false
	for seed := uint64(0); seed < 200; seed++ {
		got := readAll(t, m.PowerLoss(rand.New(rand.NewPCG(seed, 1))), "/a")
		real := bytes.TrimRight(got, "\x00")
		if !bytes.HasPrefix(full, real) || len(real) < len("durable|") || len(got) > len(full) {
			t.Fatalf("seed %d: %q is not a durable-extending prefix of %q", seed, got, full)
		}
		sawNone = sawNone || len(got) == len("durable|")
		sawAll = sawAll || bytes.Equal(got, full)
		sawZeros = sawZeros || len(real) < len(got)
	}
	if !sawNone || !sawAll || !sawZeros {
		t.Fatalf("torn tail never reached a case: none=%v all=%v zeros=%v", sawNone, sawAll, sawZeros)
	}
}

func TestMemCloneKeepsUnsyncedButNotDurable(t *testing.T) {
	m := NewMem()
	f := mustCreate(t, m, "/a")
	_ = m.SyncDir("/")
	mustWrite(t, f, []byte("unsynced"))
	c := m.Clone()
	if got := readAll(t, c, "/a"); string(got) != "unsynced" {
		t.Fatalf("clone content %q", got)
	}
	if got := readAll(t, c.CrashClone(), "/a"); len(got) != 0 {
		t.Fatalf("clone made unsynced data durable: %q", got)
	}
	// The clone is independent of the original.
	mustWrite(t, f, []byte("!"))
	if got := readAll(t, c, "/a"); string(got) != "unsynced" {
		t.Fatalf("clone changed with original: %q", got)
	}
}

func TestMemFileSemantics(t *testing.T) {
	m := NewMem()
	if _, err := m.OpenFile("/missing", os.O_RDONLY, 0); !IsNotExist(err) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := m.OpenFile("/nodir/x", os.O_CREATE|os.O_RDWR, 0); !IsNotExist(err) {
		t.Fatalf("create in missing dir: %v", err)
	}
	f := mustCreate(t, m, "/a")
	if _, err := m.OpenFile("/a", os.O_CREATE|os.O_EXCL|os.O_RDWR, 0); !errors.Is(err, ErrExist) {
		t.Fatalf("O_EXCL on existing: %v", err)
	}
	if _, err := f.WriteAt([]byte("xy"), 4); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	n, err := f.ReadAt(buf, 0)
	if n != 6 || err != io.EOF || !bytes.Equal(buf[:6], []byte{0, 0, 0, 0, 'x', 'y'}) {
		t.Fatalf("ReadAt = %d %v %v", n, err, buf[:n])
	}
	ro, _ := m.OpenFile("/a", os.O_RDONLY, 0)
	if _, err := ro.Write([]byte("z")); err == nil {
		t.Fatal("write on read-only handle succeeded")
	}
	app, _ := m.OpenFile("/a", os.O_WRONLY|os.O_APPEND, 0)
	mustWrite(t, app, []byte("z"))
	if got := readAll(t, m, "/a"); string(got[4:]) != "xyz" {
		t.Fatalf("append wrote %q", got)
	}
	_ = f.Close()
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	names, _ := m.ReadDir("/")
	if len(names) != 1 || names[0] != "a" {
		t.Fatalf("ReadDir = %v", names)
	}
}
