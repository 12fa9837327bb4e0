package storage

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// With the journal off, a round of two batches whose write finds the disk
// full after a block boundary: the first batch was written whole, the
// second in part. Both are refused with ErrNoSpace, so neither may come
// back: the cut of the torn bytes is durable before the refusal, whatever
// a kill -9 or a power loss keeps of the unsynced rest.
func TestRefusedBatchesStayRefusedAfterPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	q := newQuotaFS(mem)
	fs := vfs.NewFaulty(q, nil)
	s, err := Open(Config{Dir: "/data", FS: fs, NoJournal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []SegmentID{1, 9} {
		if err := s.Create(id, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append(ctx, 1, span(t, 0, 3)); err != nil {
		t.Fatal(err)
	}
	// Hold the commit goroutine in segment 9's fsync so that both
	// batches go in one round, written by one call.
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, "00000009.log") {
			once.Do(func() { close(entered); <-gate })
		}
		return nil
	})
	if err := s.AppendAsync(ctx, 9, span(t, 0, 1), nil); err != nil {
		t.Fatal(err)
	}
	<-entered
	q.fill(2) // room for the first batch (two blocks with the file's first), not the second
	b1, b2 := span(t, 3, 700), span(t, 703, 700)
	res := make(chan error, 2)
	for _, b := range [][]byte{b1, b2} {
		if err := s.AppendAsync(ctx, 1, b, func(err error) { res <- err }); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	for range 2 {
		if err := <-res; !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) {
			t.Fatalf("append on a full disk: %v", err)
		}
	}
	acked := []uint64{0, 1, 2}
	if got := readOffsets(t, s, 1); !slices.Equal(got, acked) {
		t.Fatalf("segment 1 serves %v, acknowledged %v", got, acked)
	}
	check := func(name string, fs *vfs.MemFS) {
		t.Helper()
		r, err := Open(Config{Dir: "/data", FS: fs, NoJournal: true})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if got := readOffsets(t, r, 1); !slices.Equal(got, acked) {
			t.Fatalf("%s: segment 1 holds %d records, acknowledged %v", name, len(got), acked)
		}
	}
	check("kill -9", mem.Clone())
	check("power loss", mem.CrashClone())
	for seed := range uint64(100) {
		check("torn power loss", mem.PowerLoss(rand.New(rand.NewPCG(seed, 1))))
	}

	q.fill(-1)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("state once space returned: %v", st)
	}
	for _, b := range [][]byte{b1, b2} {
		if err := s.Append(ctx, 1, b); err != nil {
			t.Fatalf("the refused batch sent again: %v", err)
		}
	}
	want := ackLog{1: 1403}.want(1)
	if got := readOffsets(t, s, 1); !slices.Equal(got, want) {
		t.Fatalf("segment 1 after the batches were sent again: %d records, want %d", len(got), len(want))
	}
	check2 := mem.CrashClone()
	r, err := Open(Config{Dir: "/data", FS: check2, NoJournal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := readOffsets(t, r, 1); !slices.Equal(got, want) {
		t.Fatalf("after a power loss: %d records, want %d", len(got), len(want))
	}
}

// A torn write whose cut cannot be made durable leaves the file's tail
// unknown: the segment, and the store, fail instead of taking writes.
func TestTornWriteWhoseCutFailsFails(t *testing.T) {
	ctx := context.Background()
	var full bool
	var mu sync.Mutex
	fs := vfs.NewFaulty(vfs.NewMem(), func(op vfs.Op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !full || !strings.HasSuffix(name, logExt):
		case op == vfs.OpWrite:
			return vfs.Torn(40, syscall.ENOSPC)
		case op == vfs.OpSync:
			return syscall.EIO
		}
		return nil
	})
	s, err := Open(Config{Dir: "/data", FS: fs, NoJournal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	full = true
	mu.Unlock()
	err = s.Append(ctx, 1, span(t, 0, 3))
	if !errors.Is(err, ErrFailed) || errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("append whose torn bytes could not be cut durably: %v", err)
	}
	if !errors.Is(s.Err(), ErrFailed) {
		t.Fatalf("store after a failed cut: %v", s.Err())
	}
	mu.Lock()
	full = false
	mu.Unlock()
	s.CheckSpace()
	if err := s.Append(ctx, 1, span(t, 0, 3)); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed cut: %v", err)
	}
}
