package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// On the OS filesystem a batch of SyncfsMinFiles files or more is one
// filesystem sync (on a kernel whose syncfs reports write-back errors), a
// smaller one an fdatasync per file, and a syncer asked for no
// filesystem syncs never makes one.
func TestFilesSyncerOS(t *testing.T) {
	dir := t.TempDir()
	files := writeFiles(t, OS(), dir, SyncfsMinFiles)
	batch := 1
	if !syncfsReportsErrors() {
		batch = SyncfsMinFiles
	}
	for _, tc := range []struct {
		minFiles, files, want int
	}{
		{0, SyncfsMinFiles, batch},
		{0, SyncfsMinFiles - 1, SyncfsMinFiles - 1},
		{-1, SyncfsMinFiles, SyncfsMinFiles},
	} {
		syncer, err := NewFilesSyncer(OS(), dir, tc.minFiles)
		if err != nil {
			t.Fatal(err)
		}
		n, err := syncer.SyncFiles(files[:tc.files])
		if err != nil || n != tc.want {
			t.Errorf("minFiles %d, %d files: %d syncs, %v; want %d", tc.minFiles, tc.files, n, err, tc.want)
		}
		if err := syncer.Close(); err != nil {
			t.Fatal(err)
		}
		if n, err := syncer.SyncFiles(files[:tc.files]); tc.want == 1 && err == nil {
			t.Errorf("a closed syncer synced the filesystem (%d syncs)", n)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dir, "f3")); err != nil || !bytes.Equal(got, []byte(filepath.Join(dir, "f3"))) {
		t.Fatalf("f3: %q, %v", got, err)
	}
}

// A file on another filesystem than the syncer's directory is not covered
// by its filesystem sync: it gets an fdatasync of its own.
func TestFilesSyncerOSOtherFilesystem(t *testing.T) {
	if !syncfsReportsErrors() {
		t.Skip("this kernel's syncfs reports no write-back errors: batches sync each file")
	}
	dir := t.TempDir()
	other, err := os.MkdirTemp("/dev/shm", "vfs-syncfiles")
	if err != nil {
		t.Skipf("no second filesystem at /dev/shm: %v", err)
	}
	defer os.RemoveAll(other)
	var a, b unix.Stat_t
	if unix.Stat(dir, &a) != nil || unix.Stat(other, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same filesystem as the test's directory")
	}
	files := append(writeFiles(t, OS(), dir, SyncfsMinFiles), writeFiles(t, OS(), other, 1)...)
	syncer, err := NewFilesSyncer(OS(), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	if n, err := syncer.SyncFiles(files); err != nil || n != 2 {
		t.Fatalf("%d syncs, %v; want one filesystem sync and one fdatasync", n, err)
	}
}

func TestKernelVersion(t *testing.T) {
	for release, want := range map[string][3]int{
		"6.1.0-18-amd64": {6, 1, 1}, "5.8.0": {5, 8, 1}, "4.19-rc1": {4, 19, 1},
		"5.10.0+": {5, 10, 1}, "x": {0, 0, 0}, "6": {0, 0, 0},
	} {
		major, minor, ok := kernelVersion(release)
		if got := [3]int{major, minor, map[bool]int{true: 1}[ok]}; got != want {
			t.Errorf("kernelVersion(%q) = %v, want %v", release, got, want)
		}
	}
}
