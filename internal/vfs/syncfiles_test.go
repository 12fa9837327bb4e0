package vfs

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// writeFiles creates n files in dir of fs, each holding its own name.
func writeFiles(t *testing.T, fs FS, dir string, n int) []File {
	t.Helper()
	files := make([]File, n)
	for i := range files {
		name := filepath.Join(dir, fmt.Sprintf("f%d", i))
		files[i] = mustCreate(t, fs, name)
		mustWrite(t, files[i], []byte(name))
		t.Cleanup(func() { _ = files[i].Close() })
	}
	return files
}

// On MemFS a batch syncs each of its files: after a power loss they hold
// their data, and a file outside the batch is as unsynced as before.
func TestFilesSyncerMemSyncsEachFile(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d", DirMode); err != nil {
		t.Fatal(err)
	}
	files := writeFiles(t, m, "/d", 3)
	for _, dir := range []string{"/", "/d"} {
		if err := m.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	syncer, err := NewFilesSyncer(m, "/d", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	n, err := syncer.SyncFiles(files[:2])
	if err != nil || n != 2 {
		t.Fatalf("SyncFiles: %d syncs, %v", n, err)
	}
	crashed := m.CrashClone()
	for i, want := range []string{"/d/f0", "/d/f1", ""} {
		if got := readAll(t, crashed, fmt.Sprintf("/d/f%d", i)); string(got) != want {
			t.Errorf("f%d after power loss: %q, want %q", i, got, want)
		}
	}
}

// FaultyFS fails a batch by its directory (OpSyncFiles) or by any of its
// files (OpSync), and passes a clean batch to the filesystem it wraps.
func TestFilesSyncerFaulty(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule Rule
	}{
		{"batch", FailOn(OpSyncFiles, "/d", nil)},
		{"one file", FailOn(OpSync, "/d/f1", nil)},
		{"none", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMem()
			fs := NewFaulty(m, nil)
			if err := fs.MkdirAll("/d", DirMode); err != nil {
				t.Fatal(err)
			}
			files := writeFiles(t, fs, "/d", 3)
			syncer, err := NewFilesSyncer(fs, "/d", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer syncer.Close()
			fs.SetRule(tc.rule)
			_, err = syncer.SyncFiles(files)
			if tc.rule != nil {
				if !errors.Is(err, ErrInjected) {
					t.Fatalf("SyncFiles: %v, want the injected fault", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, dir := range []string{"/", "/d"} {
				if err := m.SyncDir(dir); err != nil {
					t.Fatal(err)
				}
			}
			if got := readAll(t, m.CrashClone(), "/d/f2"); string(got) != "/d/f2" {
				t.Fatalf("f2 after power loss: %q", got)
			}
		})
	}
}
