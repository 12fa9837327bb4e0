package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A journal holding thousands of cuts of the same copies, at every depth
// (one batch back, back to the base, below what a clean restart put in
// the file) and interleaved between two segments, replays after a power
// loss to exactly the batches each copy held: no cut batch comes back and
// no batch appended after a cut is dropped. With small journal files the
// cuts also span files and race checkpoints.
func TestReplayManyCuts(t *testing.T) {
	for _, fileBytes := range []int64{0, 16 << 10} {
		t.Run(fmt.Sprintf("journalFile=%d", fileBytes), func(t *testing.T) {
			replayManyCuts(t, fileBytes, 1500)
		})
	}
}

func replayManyCuts(t *testing.T, fileBytes int64, cycles int) {
	ctx := context.Background()
	mem := vfs.NewMem()
	cfg := Config{Dir: "/data", FS: mem, JournalFileBytes: fileBytes, IndexIntervalBytes: 256}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := []SegmentID{1, 2}
	held := map[SegmentID][][]byte{}
	for _, id := range ids {
		mustCreate(t, s, id, 0)
	}
	rng := rand.New(rand.NewPCG(11, 13))
	cuts := 0
	for i := range cycles {
		id := ids[rng.IntN(len(ids))]
		for range 1 + rng.IntN(3) {
			b := tagged(t, endOf(t, 0, held[id]), 1+rng.IntN(2), fmt.Sprintf("c%d", i))
			appendAll(t, s, id, [][]byte{b})
			held[id] = append(held[id], b)
		}
		var keep int
		switch n := len(held[id]); rng.IntN(4) {
		case 0:
			keep = 0 // back to the base
		case 1:
			keep = rng.IntN(n + 1)
		default:
			keep = n - 1 // the last batch only
		}
		if err := s.Truncate(ctx, id, endOf(t, 0, held[id][:keep])); err != nil {
			t.Fatalf("cycle %d: cut %d to %d batches: %v", i, id, keep, err)
		}
		held[id] = held[id][:keep]
		cuts++
		if i == cycles/2 {
			// A clean restart puts everything in the files: later cuts
			// reach below what the journal holds of the copies.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	lost := mem.PowerLoss(rand.New(rand.NewPCG(17, 19)))
	_ = s.Close()
	cfg.FS = lost
	r := openMemCfg(t, cfg)
	for _, id := range ids {
		got := batchesOf(t, r, id)
		if !sameBatches(got, held[id]) {
			t.Fatalf("segment %d after %d cuts and a power loss: %d batches, want the %d it held",
				id, cuts, len(got), len(held[id]))
		}
		in, err := r.Info(id)
		if err != nil || in.Damage != nil || in.End != endOf(t, 0, held[id]) {
			t.Fatalf("segment %d: %+v, %v", id, in, err)
		}
	}
}
