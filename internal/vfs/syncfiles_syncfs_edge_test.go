//go:build linux

package vfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/testenv"
	"golang.org/x/sys/unix"
)

// Same st_dev is not enough to stand for an fdatasync per file: on a FUSE
// filesystem (other than virtiofs) syncfs(2) writes dirty pages back to
// the server and returns 0 without ever sending it FSYNC
// (fuse_sync_fs does nothing unless the server negotiated FUSE_SYNCFS),
// so the server may still hold the bytes only in its own page cache. A
// batch that a checkpoint counts as durable there is not, and the journal
// file that held the same batches is recycled: a power loss of the FUSE
// server's machine loses acknowledged data. The fix is to use syncfs only
// on filesystem types known to flush on it (statfs f_type), and per-file
// syncs elsewhere.
func TestFilesSyncerOnFUSESendsFsyncForEveryFile(t *testing.T) {
	if !syncfsReportsErrors() {
		t.Skip("this kernel's syncfs reports no write-back errors: batches sync each file")
	}
	log := testenv.MountFUSEMirror(t)
	mnt := log.Dir

	for _, tc := range []struct {
		name     string
		minFiles int
	}{
		// The control: file by file, the server sees one FSYNC a file.
		{"per-file", -1},
		{"default", 0},
	} {
		dir := filepath.Join(mnt, tc.name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		files := writeFiles(t, OS(), dir, SyncfsMinFiles)
		before := strings.Count(log.Log(), "opcode: FSYNC ")
		syncer, err := NewFilesSyncer(OS(), dir, tc.minFiles)
		if err != nil {
			t.Fatal(err)
		}
		n, err := syncer.SyncFiles(files)
		_ = syncer.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// The server logs each request before it answers it, so once
		// it has logged a lookup made after SyncFiles returned, every
		// FSYNC the batch sent is in the log.
		marker := "marker-" + tc.name
		_, _ = os.Stat(filepath.Join(mnt, marker))
		log.WaitFor(t, "LOOKUP /"+marker)
		if got := strings.Count(log.Log(), "opcode: FSYNC ") - before; got < SyncfsMinFiles {
			t.Errorf("%s: the FUSE server got %d FSYNC requests for a batch of %d files (%d sync calls): "+
				"the batch was reported durable while the server was never asked to make it so",
				tc.name, got, SyncfsMinFiles, n)
		}
	}
}

// syncfs(2) on Linux 5.8 to 5.16 returns the per-filesystem write-back
// error sequence but drops the error of the filesystem's own ->sync_fs
// (the journal commit of ext4, the log force of XFS): sync_filesystem
// ignored it until "vfs: make sync_filesystem return errors from
// ->sync_fs" in 5.17. A failed journal commit there leaves newly
// allocated segment blocks undurable while syncfs returns 0, and the
// checkpoint recycles the journal file; an fdatasync per file reports
// that failure. syncfsReportsErrors accepts 5.8, so on those kernels a
// batch must not be one filesystem sync. This machine's kernel decides
// whether the test can run: it skips on any other.
func TestFilesSyncerNoSyncfsBeforeItReportsSyncFsErrors(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	major, minor, ok := kernelVersion(release)
	if !ok || major != 5 || minor < 8 || minor >= 17 {
		t.Skipf("kernel %s: the test needs one from 5.8 to 5.16", release)
	}
	dir := t.TempDir()
	files := writeFiles(t, OS(), dir, SyncfsMinFiles)
	syncer, err := NewFilesSyncer(OS(), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	if n, err := syncer.SyncFiles(files); err != nil || n != SyncfsMinFiles {
		t.Fatalf("kernel %s: %d syncs, %v; want an fdatasync per file (%d)", release, n, err, SyncfsMinFiles)
	}
}
