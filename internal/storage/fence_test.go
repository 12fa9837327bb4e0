package storage

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// assertFenced checks that copy id of s refuses appends at its end and
// still answers a fence, a cut and an exact seal: the latch a failover
// set is still there.
func assertFenced(t *testing.T, s *Store, id SegmentID, end uint64) {
	t.Helper()
	ctx := context.Background()
	in, err := s.Info(id)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Fenced || in.Sealed || in.DurableEnd != end {
		t.Fatalf("copy after the restart: fenced %v sealed %v durable end %d, want fenced at %d", in.Fenced, in.Sealed, in.DurableEnd, end)
	}
	if err := s.AppendAt(ctx, id, span(t, end, 2)); !errors.Is(err, ErrSealed) {
		t.Fatalf("an append at %d to a fenced copy after the restart: %v, want ErrSealed", end, err)
	}
	if got, err := s.Fence(ctx, id); err != nil || got != end {
		t.Fatalf("fence again after the restart: %d (%v), want %d", got, err, end)
	}
}

// A fence outlives a clean restart: the copy still refuses appends, and
// only the seal lifts the marker (a sealed copy needs none, and Open
// drops it).
func TestFenceSurvivesReopen(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		mustCreate(t, s, 1, 0)
		mustCreate(t, s, 2, 0)
		appendAll(t, s, 1, chain(t, 0, 3, 2, "a"))
		appendAll(t, s, 2, chain(t, 0, 1, 2, "b"))
		if end, err := s.Fence(ctx, 1); err != nil || end != 6 {
			t.Fatalf("fence: %d (%v), want 6", end, err)
		}
		s = reopenMode(t, s, mem, noJournal)
		assertFenced(t, s, 1, 6)
		// The copy that was not fenced still takes appends.
		if err := s.AppendAt(ctx, 2, span(t, 2, 1)); err != nil {
			t.Fatalf("an unfenced copy after the restart: %v", err)
		}
		// A fenced copy may still be cut and sealed where the control
		// plane says.
		if err := s.Truncate(ctx, 1, 4); err != nil {
			t.Fatal(err)
		}
		sealAt(t, s, 1, 4)
		s = reopenMode(t, s, mem, noJournal)
		if _, err := mem.Stat(s.path(1, fenceExt)); !vfs.IsNotExist(err) {
			t.Fatalf("the fence marker of a sealed copy is still there: %v", err)
		}
		if in, _ := s.Info(1); !in.Sealed || in.DurableEnd != 4 {
			t.Fatalf("sealed copy after the restart: %+v", in)
		}
	})
}

// A power loss right after Fence answered keeps the latch and every
// batch below the answer: what the fence answered was durable, so the
// copy comes back fenced at that end whatever the disk lost of the rest.
func TestFenceSurvivesPowerLoss(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		for seed := range uint64(8) {
			ctx := context.Background()
			mem := vfs.NewMem()
			s := openMode(t, mem, noJournal)
			mustCreate(t, s, 1, 0)
			appendAll(t, s, 1, chain(t, 0, 4, 3, "a"))
			end, err := s.Fence(ctx, 1)
			if err != nil || end != 12 {
				t.Fatalf("fence: %d (%v), want 12", end, err)
			}
			lost := mem.PowerLoss(rand.New(rand.NewPCG(seed, 13)))
			r := openMode(t, lost, noJournal)
			assertFenced(t, r, 1, end)
			if got := batchesOf(t, r, 1); !sameBatches(got, chain(t, 0, 4, 3, "a")) {
				t.Fatalf("seed %d: the fenced copy holds %d batches after a power loss, want the 4 it answered for", seed, len(got))
			}
		}
	})
}

// Deleting a fenced copy removes its marker: a segment created again
// under the same id is not born fenced.
func TestFenceMarkerGoesWithTheCopy(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMode(t, mem, false)
	mustCreate(t, s, 1, 0)
	appendAll(t, s, 1, chain(t, 0, 1, 2, "a"))
	if _, err := s.Fence(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	s = reopenMode(t, s, mem, false)
	mustCreate(t, s, 1, 0)
	if err := s.AppendAt(ctx, 1, span(t, 0, 2)); err != nil {
		t.Fatalf("a copy created again after its fenced predecessor was deleted: %v", err)
	}
}

// Latch does not wait for a queued append's fsync, refuses every later
// append at once, and is durable when it returns: a power loss while the
// queued append's fsync is still held brings the copy back fenced.
func TestLatchIsDurableWithoutWaitingForQueuedAppends(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		fs := vfs.NewFaulty(mem, nil)
		s := openMode(t, fs, noJournal)
		mustCreate(t, s, 1, 0)
		appendAll(t, s, 1, chain(t, 0, 2, 2, "a"))
		suffix := journalExt
		if noJournal {
			suffix = logExt
		}
		entered, release := holdSync(fs, suffix)
		defer release()
		acked := make(chan error, 1)
		if err := s.AppendAtAsync(ctx, 1, span(t, 4, 3), func(err error) { acked <- err }); err != nil {
			t.Fatal(err)
		}
		<-entered
		if err := s.Latch(ctx, 1); err != nil {
			t.Fatalf("latch while an append's fsync is held: %v", err)
		}
		if err := s.AppendAt(ctx, 1, span(t, 7, 1)); !errors.Is(err, ErrSealed) {
			t.Fatalf("an append after the latch: %v, want ErrSealed", err)
		}
		lost := mem.PowerLoss(rand.New(rand.NewPCG(1, 2)))
		release()
		if err := <-acked; err != nil {
			t.Fatalf("the append queued before the latch: %v", err)
		}
		r := openMode(t, lost, noJournal)
		in, err := r.Info(1)
		if err != nil || !in.Fenced || in.Sealed || in.DurableEnd < 4 {
			t.Fatalf("after a power loss: %+v (%v), want fenced, holding at least [0, 4)", in, err)
		}
		if err := r.AppendAt(ctx, 1, span(t, in.End, 1)); !errors.Is(err, ErrSealed) {
			t.Fatalf("an append after the power loss: %v, want ErrSealed", err)
		}
	})
}
