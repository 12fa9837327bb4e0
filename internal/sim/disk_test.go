package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/vfs"
)

func testBatch(t *testing.T, base uint64, n int) []byte {
	t.Helper()
	recs := make([]batch.Record, n)
	for i := range recs {
		recs[i] = batch.Record{Key: []byte("k"), Value: encodeValue(recID{1, base + uint64(i)})}
	}
	b, err := batch.EncodeBatch(nil, base, recs, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDiskRecovery checks the store the simulation's checkers rely on:
// after a power loss a copy keeps at least what it fsynced and never a
// torn batch; after kill -9 it keeps every write; a sealed copy comes
// back sealed.
func TestDiskRecovery(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		d := newDisk(vfs.NewMem())
		if _, err := d.create(7, 10); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{2, 3} {
			if err := d.append(7, testBatch(t, d.copies[7].end, n)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := d.syncAll(); err != nil {
			t.Fatal(err)
		}
		if err := d.append(7, testBatch(t, 15, 4)); err != nil {
			t.Fatal(err)
		}
		lost, errs := recoverDisk(d.fs.PowerLoss(rand.New(rand.NewPCG(seed, 0))))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if c := lost.copies[7]; c == nil || (c.end != 15 && c.end != 19) || c.syncedEnd != c.end {
			t.Fatalf("seed %d: after a power loss the copy ends at %+v, want 15 or 19", seed, c)
		}
		killed, _ := recoverDisk(d.fs.Clone())
		if c := killed.copies[7]; c == nil || c.end != 19 {
			t.Fatalf("seed %d: after kill -9 the copy ends at %+v, want 19", seed, c)
		}
	}
	d := newDisk(vfs.NewMem())
	if _, err := d.create(3, 0); err != nil {
		t.Fatal(err)
	}
	for _, base := range []uint64{0, 2} {
		if err := d.append(3, testBatch(t, base, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.seal(3, 3); err == nil {
		t.Fatal("a seal inside a batch was accepted")
	}
	if err := d.seal(3, 2); err != nil {
		t.Fatal(err)
	}
	back, errs := recoverDisk(d.fs.PowerLoss(rand.New(rand.NewPCG(1, 1))))
	if c := back.copies[3]; len(errs) > 0 || c == nil || !c.sealed || c.sealEnd != 2 || c.end != 2 {
		t.Fatalf("a sealed copy after a power loss: %+v %v", c, errs)
	}
}
