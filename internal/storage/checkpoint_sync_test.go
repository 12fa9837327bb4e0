package storage

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// manySegs is more segments than vfs.SyncfsMinFiles, so that on the OS
// filesystem their checkpoint is one filesystem sync.
const manySegs = 2 * vfs.SyncfsMinFiles

// appendRounds appends one 3-record batch to each of segs segments per
// round until done says stop, returning the records acknowledged per
// segment. It stops at the first refused append.
func appendRounds(t *testing.T, s *Store, segs int, done func() bool) ([]uint64, error) {
	t.Helper()
	ctx := context.Background()
	acked := make([]uint64, segs)
	for round := 0; !done(); round++ {
		if round > 1000 {
			t.Fatalf("still going after %d rounds: %+v", round, s.Stats())
		}
		for i := range segs {
			if err := s.Append(ctx, SegmentID(i), span(t, acked[i], 3)); err != nil {
				return acked, err
			}
			acked[i] += 3
		}
	}
	return acked, nil
}

// checkAcked reopens fs and checks each segment holds at least its
// acknowledged records, in order.
func checkAcked(t *testing.T, fs vfs.FS, acked []uint64) {
	t.Helper()
	r := openMem(t, fs)
	for i, n := range acked {
		got := readOffsets(t, r, SegmentID(i))
		if uint64(len(got)) < n {
			t.Fatalf("segment %d after power loss holds %d records, %d were acknowledged", i, len(got), n)
		}
		for j, off := range got {
			if off != uint64(j) {
				t.Fatalf("segment %d: record %d has offset %d", i, j, off)
			}
		}
	}
}

// A checkpoint makes many segment files durable with one batch of its
// syncer, then retires the journal file that was their only durable
// copy: after a power loss every acknowledged batch is still there.
func TestCheckpointBatchSyncKeepsAcknowledgedBatches(t *testing.T) {
	mem := vfs.NewMem()
	var batches atomic.Int64
	fs := vfs.NewFaulty(mem, func(op vfs.Op, name string) error {
		if op == vfs.OpSyncFiles && name == "/data" {
			batches.Add(1)
		}
		return nil
	})
	s, err := Open(Config{Dir: "/data", FS: fs, JournalFileBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range manySegs {
		if err := s.Create(SegmentID(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	start := s.Stats().Checkpoints
	acked, err := appendRounds(t, s, manySegs, func() bool { return s.Stats().Checkpoints >= start+2 })
	if err != nil {
		t.Fatal(err)
	}
	if batches.Load() == 0 {
		t.Fatalf("%d checkpoints without a batch sync", s.Stats().Checkpoints)
	}
	// The journal files the checkpoints retired are gone: what they held
	// survives only in the segment files the batch made durable.
	checkAcked(t, mem.CrashClone(), acked)
}

// A failed batch sync fails the store as a failed fsync does, and keeps
// the journal file: the next Open replays it, so a power loss loses no
// acknowledged batch.
func TestCheckpointFailedBatchSyncKeepsJournal(t *testing.T) {
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := vfs.NewFaulty(mem, func(op vfs.Op, name string) error {
		if op == vfs.OpSyncFiles && failing.Load() {
			return vfs.ErrInjected
		}
		return nil
	})
	s, err := Open(Config{Dir: "/data", FS: fs, JournalFileBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range manySegs {
		if err := s.Create(SegmentID(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	first := journalFiles(t, mem)
	if len(first) == 0 {
		t.Fatal("no journal file")
	}
	failing.Store(true)
	start := s.Stats().Checkpoints
	acked, err := appendRounds(t, s, manySegs, func() bool { return false })
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed checkpoint: %v, want ErrFailed", err)
	}
	if n := s.Stats().Checkpoints; n != start {
		t.Fatalf("%d checkpoints counted after a failed batch sync", n-start)
	}
	crashed := mem.CrashClone()
	kept := journalFiles(t, crashed)
	if len(kept) == 0 || kept[0] != first[0] {
		t.Fatalf("journal files after the failed checkpoint: %v, want %s kept", kept, first[0])
	}
	checkAcked(t, crashed, acked)
}
