package vfs

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestFaultySyncErrorLeavesDataUnsynced(t *testing.T) {
	m := NewMem()
	fs := NewFaulty(m, FailOn(OpSync, ".log", nil))
	f := mustCreate(t, fs, "/seg.log")
	_ = fs.SyncDir("/")
	mustWrite(t, f, []byte("data"))
	if err := f.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("sync err = %v", err)
	}
	if got := readAll(t, m.CrashClone(), "/seg.log"); len(got) != 0 {
		t.Fatalf("failed sync made %q durable", got)
	}
	fs.SetRule(nil)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, m.CrashClone(), "/seg.log"); string(got) != "data" {
		t.Fatalf("after good sync %q", got)
	}
}

func TestFaultyTornWrite(t *testing.T) {
	m := NewMem()
	fs := NewFaulty(m, nil)
	f := mustCreate(t, fs, "/a")
	fs.SetRule(func(op Op, name string) error {
		if op == OpWrite {
			return Torn(3, nil)
		}
		return nil
	})
	n, err := f.WriteAt([]byte("abcdef"), 0)
	if n != 3 || !errors.Is(err, ErrInjected) {
		t.Fatalf("torn WriteAt = %d, %v", n, err)
	}
	n, err = f.Write([]byte("XYZW"))
	if n != 3 || err == nil {
		t.Fatalf("torn Write = %d, %v", n, err)
	}
	if got := readAll(t, m, "/a"); string(got) != "XYZ" {
		t.Fatalf("content %q", got)
	}
}

func TestFaultyOps(t *testing.T) {
	m := NewMem()
	var seen []string
	fs := NewFaulty(m, func(op Op, name string) error {
		seen = append(seen, op.String())
		if op == OpOpen && strings.HasSuffix(name, "bad") {
			return ErrInjected
		}
		if op == OpRead {
			return ErrInjected
		}
		return nil
	})
	if _, err := fs.OpenFile("/bad", os.O_CREATE|os.O_RDWR, 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("open: %v", err)
	}
	if exists(m, "/bad") {
		t.Fatal("failed open created the file")
	}
	f, err := fs.OpenFile("/good", os.O_CREATE|os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("read: %v", err)
	}
	if err := fs.Rename("/good", "/other"); err != nil {
		t.Fatal(err)
	}
	want := "open open read rename"
	if got := strings.Join(seen, " "); got != want {
		t.Fatalf("ops %q, want %q", got, want)
	}
	if Op(99).String() != "op(99)" {
		t.Fatal(Op(99).String())
	}
}
