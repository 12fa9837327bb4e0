package broker

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDataFilesPrivate: on the real filesystem, after produces, rolls, a
// split and a metadata snapshot, every directory the node made is 0700 and
// every file 0600: the metadata log holds the cursor key and password
// hashes. The umask is cleared so the modes seen are the modes asked for.
func TestDataFilesPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()
	b, err := Open(ctx, Config{DataDir: dir, SegmentMaxBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic(ctx, "p", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // past SegmentMaxBytes several times: rolls
		rec := Record{Key: []byte(fmt.Sprint("k", i)), Value: make([]byte, 200)}
		if _, err := b.Produce(ctx, "p", []Record{rec}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.SplitRange(ctx, "p", 0); err != nil {
		t.Fatal(err)
	}
	if err := b.meta.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 6 { // LOCK, a log, a snapshot, segments with seals and indexes
		t.Fatalf("only %d files under %s: the test did not exercise the node", files, dir)
	}
}
