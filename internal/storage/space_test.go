package storage

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// noSpaceOnJournal fails every journal write with ENOSPC, torn after keep
// bytes, while full is set.
func noSpaceOnJournal(full *atomic.Bool, keep int) vfs.Rule {
	return func(op vfs.Op, name string) error {
		if full.Load() && op == vfs.OpWrite && (strings.HasSuffix(name, ".jnl") || strings.Contains(name, "probe")) {
			return vfs.Torn(keep, syscall.ENOSPC)
		}
		return nil
	}
}

// ENOSPC on a round's journal write: the round and everything queued
// behind it are refused (never acknowledged), nothing acknowledged is
// lost, the store says full, and once space returns appends go on from
// the last acknowledged offset and survive a power loss.
func TestNoSpaceRefusesRoundAndResumes(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []SegmentID{1, 2} {
		if err := s.Create(id, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, id, span(t, 0, 3)); err != nil {
			t.Fatal(err)
		}
	}

	// Park the commit goroutine in the journal's fsync so that the next
	// round gathers appends to both segments; then fill the disk.
	var full atomic.Bool
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, ".jnl") {
			once.Do(func() { close(entered); <-gate })
			return nil
		}
		return noSpaceOnJournal(&full, 45)(op, name)
	})
	parked := make(chan error, 1)
	if err := s.AppendAsync(ctx, 1, span(t, 3, 3), func(err error) { parked <- err }); err != nil {
		t.Fatal(err)
	}
	<-entered
	full.Store(true)
	results := make(chan error, 4)
	for _, id := range []SegmentID{1, 2} {
		for i := uint64(0); i < 2; i++ {
			base := 6 + 3*i
			if id == 2 {
				base = 3 + 3*i
			}
			if err := s.AppendAsync(ctx, id, span(t, base, 3), func(err error) { results <- err }); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(gate)
	if err := <-parked; err != nil {
		t.Fatalf("append written before the disk filled: %v", err)
	}
	for i := 0; i < 4; i++ {
		if err := <-results; !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrFailed) {
			t.Fatalf("append on a full disk: %v", err)
		}
	}
	if st := s.DiskState(); st != DiskFull {
		t.Fatalf("disk state %v, want full", st)
	}
	if err := s.Append(ctx, 1, span(t, 6, 3)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append while full: %v", err)
	}
	if err := s.Create(3, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("create while full: %v", err)
	}
	if got := readOffsets(t, s, 1); len(got) != 6 {
		t.Fatalf("segment 1 reads %v while full", got)
	}

	// Still full: the probe write fails too.
	if st := s.CheckSpace(); st != DiskFull {
		t.Fatalf("state after a check on a disk still full: %v", st)
	}

	full.Store(false)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state after space returned: %v", st)
	}
	if err := s.Append(ctx, 1, span(t, 6, 3)); err != nil {
		t.Fatalf("append after space returned: %v", err)
	}
	if err := s.Append(ctx, 2, span(t, 3, 3)); err != nil {
		t.Fatalf("append after space returned: %v", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("store failed: %v", err)
	}
	want := map[SegmentID]int{1: 9, 2: 6}
	r := openMem(t, mem.CrashClone())
	for id, n := range want {
		got := readOffsets(t, r, id)
		if len(got) != n || got[n-1] != uint64(n-1) {
			t.Fatalf("segment %d after power loss: %v", id, got)
		}
	}
}

// A journal write that runs out of space in a round that creates a
// segment is written again once space returns: the create waits, the
// store says full but has not failed, and the created segment survives a
// power loss.
func TestNoSpaceOnCreateRecordWaitsForSpace(t *testing.T) {
	ctx := context.Background()
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs.SetRule(noSpaceOnJournal(&full, 10))
	full.Store(true)
	created := make(chan error, 1)
	go func() { created <- s.Create(1, 0) }()
	waitDisk(t, s, DiskFull)
	if err := s.Err(); err != nil {
		t.Fatalf("store failed on a full disk: %v", err)
	}
	if st := s.CheckSpace(); st != DiskFull {
		t.Fatalf("state after a check on a disk still full: %v", st)
	}
	full.Store(false)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state after space returned: %v", st)
	}
	if err := <-created; err != nil {
		t.Fatalf("create once space returned: %v", err)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
	r := openMem(t, mem.CrashClone())
	if got := readOffsets(t, r, 1); len(got) != 3 {
		t.Fatalf("created segment after power loss: %v", got)
	}
}

// A Close while a create's journal record waits for space ends the
// create with an error, and the store closes: Close retires the segment
// being created, which the create's own cleanup must not retire again.
func TestCloseWhileCreateWaitsForSpace(t *testing.T) {
	var full atomic.Bool
	fs := vfs.NewFaulty(vfs.NewMem(), nil)
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	fs.SetRule(noSpaceOnJournal(&full, 10))
	full.Store(true)
	created := make(chan error, 1)
	go func() { created <- s.Create(1, 0) }()
	waitDisk(t, s, DiskFull)
	_ = s.Close()
	if err := <-created; err == nil {
		t.Fatal("a create that never became durable succeeded")
	}
}

// A failed fsync stays fatal, full disk or not: the store fails for good
// and says its disk is failing.
func TestSyncErrorReportsFailing(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewFaulty(vfs.NewMem(), nil)
	s, err := Open(Config{Dir: "/data", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	fs.SetRule(vfs.FailOn(vfs.OpSync, ".jnl", vfs.ErrInjected))
	if err := s.Append(ctx, 1, span(t, 0, 3)); !errors.Is(err, ErrFailed) {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	fs.SetRule(nil)
	if st := s.CheckSpace(); st != DiskFailing {
		t.Fatalf("disk state %v, want failing", st)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed fsync: %v", err)
	}
}

// Free space under the reserve refuses appends and creates without
// writing anything; above it they are taken again.
func TestFreeSpaceReserve(t *testing.T) {
	ctx := context.Background()
	var free atomic.Int64
	free.Store(1 << 30)
	s, err := Open(Config{Dir: "/data", FS: vfs.NewMem(), MinFreeBytes: 1 << 20,
		FreeBytes: func() (int64, error) { return free.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state with room: %v", st)
	}
	free.Store(1 << 19)
	if st := s.CheckSpace(); st != DiskFull {
		t.Fatalf("state under the reserve: %v", st)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append under the reserve: %v", err)
	}
	if err := s.Create(2, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("create under the reserve: %v", err)
	}
	free.Store(2 << 20)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state once space returned: %v", st)
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
}

// The default reserve reads the real filesystem.
func TestFreeSpaceOfRealDisk(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), MinFreeBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if free, ok := s.freeBytes(); !ok || free <= 0 {
		t.Fatalf("free space of a temporary directory: %d %v", free, ok)
	}
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state of a temporary directory: %v", st)
	}
}
