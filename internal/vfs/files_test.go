package vfs

import (
	"errors"
	"testing"
)

func TestWriteFileAtomicReplacesAndSurvivesCrash(t *testing.T) {
	m := NewMem()
	if err := EnsureDir(m, "/d"); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"first", "second"} {
		if err := WriteFileAtomic(m, "/d/f", []byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncDir("/d"); err != nil {
			t.Fatal(err)
		}
		after := m.CrashClone()
		if got := readAll(t, after, "/d/f"); string(got) != content {
			t.Fatalf("after a crash: %q, want %q", got, content)
		}
		if exists(after, "/d/f"+TempSuffix) {
			t.Fatal("temporary file left behind")
		}
	}
}

func TestWriteFileAtomicFailureKeepsOldFile(t *testing.T) {
	for _, op := range []Op{OpWrite, OpSync, OpRename} {
		t.Run(op.String(), func(t *testing.T) {
			m := NewMem()
			if err := EnsureDir(m, "/d"); err != nil {
				t.Fatal(err)
			}
			if err := WriteFileAtomic(m, "/d/f", []byte("old")); err != nil {
				t.Fatal(err)
			}
			fs := NewFaulty(m, FailOn(op, "/d/f", nil))
			if err := WriteFileAtomic(fs, "/d/f", []byte("new")); !errors.Is(err, ErrInjected) {
				t.Fatalf("err = %v, want the injected fault", err)
			}
			if got := readAll(t, m, "/d/f"); string(got) != "old" {
				t.Fatalf("content %q after a failed replace, want %q", got, "old")
			}
			if exists(m, "/d/f"+TempSuffix) {
				t.Fatal("temporary file left behind")
			}
		})
	}
}

func TestEnsureDirIsDurable(t *testing.T) {
	m := NewMem()
	// MkdirAll without the parent's sync: the entry is not durable yet.
	if err := m.MkdirAll("/d", DirMode); err != nil {
		t.Fatal(err)
	}
	if exists(m.CrashClone(), "/d") {
		t.Fatal("a directory survived a crash before its parent was synced")
	}
	// EnsureDir on the existing directory still syncs its parent.
	if err := EnsureDir(m, "/d"); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, m, "/d/x")
	_ = f.Sync()
	_ = m.SyncDir("/d")
	if !exists(m.CrashClone(), "/d/x") {
		t.Fatal("directory made by EnsureDir lost in a crash")
	}
}
