package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// crashState is what a first crash (a kill -9 or a power loss) leaves of
// mem.
func crashState(mem *vfs.MemFS, kill bool, seed uint64) *vfs.MemFS {
	if kill {
		return mem.Clone()
	}
	return mem.PowerLoss(rand.New(rand.NewPCG(seed, 17)))
}

// assertFencedWithMarker is assertFenced that also wants the marker on
// disk and every acknowledged batch: the latch must outlive one more
// restart, not only this one.
func assertFencedWithMarker(t *testing.T, s *Store, fs vfs.FS, id SegmentID, end uint64, acked [][]byte, at string) {
	t.Helper()
	in, err := s.Info(id)
	if err != nil || !in.Fenced || in.Sealed || in.DurableEnd != end {
		t.Fatalf("%s: %+v (%v), want fenced at %d", at, in, err, end)
	}
	if _, err := fs.Stat(s.path(id, fenceExt)); err != nil {
		t.Fatalf("%s: the fence marker is not on disk: %v", at, err)
	}
	if got := batchesOf(t, s, id); !sameBatches(got, acked) {
		t.Fatalf("%s: %d batches, want the %d acknowledged", at, len(got), len(acked))
	}
	if err := s.AppendAt(context.Background(), id, span(t, end, 1)); !errors.Is(err, ErrSealed) {
		t.Fatalf("%s: an append to the fenced copy: %v, want ErrSealed", at, err)
	}
}

// runReplayCrash fences a copy, crashes before the journal is
// checkpointed (first), and then crashes again (p) at a mutating
// operation of the restart that replays the journal and rebuilds the
// copy from its create record, of a fence asked again, or of the close
// after it. Whatever the second crash leaves opens fenced, with its
// marker, and so does the restart after that. It returns how many
// mutating operations the second run made.
func runReplayCrash(t *testing.T, firstKill bool, p *crashPoint) int {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMode(t, mem, false)
	mustCreate(t, s, 1, 0)
	acked := chain(t, 0, 4, 3, "a")
	appendAll(t, s, 1, acked)
	if end, err := s.Fence(ctx, 1); err != nil || end != 12 {
		t.Fatalf("fence: %d (%v), want 12", end, err)
	}
	first := crashState(mem, firstKill, uint64(p.at))
	_ = s.Close()

	p.mem = first
	r := openMemCfg(t, Config{Dir: "/data", FS: vfs.NewFaulty(first, p.rule)})
	if r.Stats().ReplayedBatches == 0 {
		t.Fatal("the restart replayed nothing: the copy was not rebuilt from the journal")
	}
	if end, err := r.Fence(ctx, 1); err != nil || end != 12 {
		t.Fatalf("fence after the replay: %d (%v), want 12", end, err)
	}
	_ = r.Close()
	crashed, _, ops := p.result()

	at := fmt.Sprintf("crash at %d", p.at)
	r2 := openMode(t, crashed, false)
	assertFencedWithMarker(t, r2, crashed, 1, 12, acked, at)
	r3 := reopenMode(t, r2, crashed, false)
	assertFencedWithMarker(t, r3, crashed, 1, 12, acked, at+", then a clean restart")
	return ops
}

// W4, W6: a fenced copy rebuilt by a journal replay keeps its latch on
// disk through every crash of that restart, of a fence asked again after
// it, and of its close: no crash point brings the copy back unfenced.
func TestFenceKeptAtEveryCrashAfterAReplay(t *testing.T) {
	for _, firstKill := range []bool{true, false} {
		for _, kill := range []bool{true, false} {
			t.Run(fmt.Sprintf("first-kill=%v/second-kill=%v", firstKill, kill), func(t *testing.T) {
				total := runReplayCrash(t, firstKill, &crashPoint{at: 1 << 30, kill: kill, rng: rand.New(rand.NewPCG(3, 3))})
				if total == 0 {
					t.Fatal("the replaying restart made no file operation")
				}
				t.Logf("%d crash points", total+1)
				for at := range total + 1 {
					runReplayCrash(t, firstKill, &crashPoint{at: at, kill: kill, rng: rand.New(rand.NewPCG(uint64(at), 7))})
				}
			})
		}
	}
}

// A Delete of a fenced copy that fails before it removed the marker
// leaves it behind; a copy created again under the same id clears it
// durably before its creation can be replayed, so a power loss does not
// bring the old fence back onto the new copy (a replay keeps the markers
// it finds).
func TestCreateAfterAFailedDeleteIsNotBornFenced(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		fs := vfs.NewFaulty(mem, nil)
		s := openMode(t, fs, noJournal)
		mustCreate(t, s, 1, 0)
		appendAll(t, s, 1, chain(t, 0, 2, 2, "a"))
		if _, err := s.Fence(ctx, 1); err != nil {
			t.Fatal(err)
		}
		fs.SetRule(vfs.FailOn(vfs.OpRemove, fenceExt, nil))
		if err := s.Delete(1); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("delete with the marker's removal failing: %v, want the injected fault", err)
		}
		fs.SetRule(nil)
		mustCreate(t, s, 1, 100)
		fresh := chain(t, 100, 2, 2, "b")
		appendAll(t, s, 1, fresh)
		for seed := range uint64(4) {
			lost := mem.PowerLoss(rand.New(rand.NewPCG(seed, 11)))
			r := openMode(t, lost, noJournal)
			in, err := r.Info(1)
			if err != nil || in.Fenced || in.Base != 100 {
				t.Fatalf("seed %d: the copy created again, after a power loss: %+v (%v), want base 100, unfenced", seed, in, err)
			}
			if got := batchesOf(t, r, 1); !sameBatches(got, fresh) {
				t.Fatalf("seed %d: %d batches, want the 2 acknowledged", seed, len(got))
			}
			if err := r.AppendAt(ctx, 1, span(t, in.End, 1)); err != nil {
				t.Fatalf("seed %d: an append to the copy created again: %v", seed, err)
			}
			_ = r.Close()
		}
	})
}

// A replay never drops a seal or a damage mark that was durable before
// the crash, even when the journal still holds the segment's create
// record: a sealed copy comes back sealed at its end, and a marked one
// damaged with its file as it was, restart after restart.
func TestReplayKeepsSealAndDamageMarkers(t *testing.T) {
	for _, kill := range []bool{true, false} {
		t.Run(fmt.Sprintf("kill=%v", kill), func(t *testing.T) {
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 1, 0)
			mustCreate(t, s, 2, 0)
			sealed := chain(t, 0, 3, 2, "a")
			appendAll(t, s, 1, sealed)
			appendAll(t, s, 2, chain(t, 0, 3, 2, "b"))
			sealAt(t, s, 1, 6)
			crashed := crashState(mem, kill, 1)
			_ = s.Close()
			// A crash between a replay's damage marker and the journal's
			// move to quarantine leaves both: the marker beside a
			// journaled create.
			if err := writeDamageMarker(crashed, s.path(2, damageExt), 6, "found by an earlier replay"); err != nil {
				t.Fatal(err)
			}
			if err := crashed.SyncDir("/data"); err != nil {
				t.Fatal(err)
			}
			for restart := range 3 {
				r := openMode(t, crashed, false)
				if in, err := r.Info(1); err != nil || !in.Sealed || in.DurableEnd != 6 {
					t.Fatalf("restart %d: sealed copy: %+v (%v), want sealed at 6", restart, in, err)
				}
				if got := batchesOf(t, r, 1); !sameBatches(got, sealed) {
					t.Fatalf("restart %d: the sealed copy holds %d batches, want 3", restart, len(got))
				}
				if in, err := r.Info(2); err != nil || in.Damage == nil || !in.Fenced {
					t.Fatalf("restart %d: marked copy: %+v (%v), want damaged and fenced", restart, in, err)
				}
				if _, err := crashed.Stat(r.path(2, damageExt)); err != nil {
					t.Fatalf("restart %d: the damage marker is gone: %v", restart, err)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The latch Open restores and the marker on disk agree: a fence marker
// whose .log is missing while the journal rebuilds the copy (a crash
// inside the rebuild leaves that) stays with the rebuilt copy, and a
// marker that is gone when the latch is restored is written again.
// Either way the copy comes back fenced, and again after a power loss.
func TestRestoredFenceAgreesWithTheDisk(t *testing.T) {
	for _, tc := range []string{"log-missing", "marker-gone"} {
		t.Run(tc, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 1, 0)
			acked := chain(t, 0, 4, 3, "a")
			appendAll(t, s, 1, acked)
			if _, err := s.Fence(ctx, 1); err != nil {
				t.Fatal(err)
			}
			killed := mem.Clone()
			_ = s.Close()
			marker := s.path(1, fenceExt)
			var fs vfs.FS = killed
			switch tc {
			case "log-missing":
				if err := killed.Remove(s.path(1, logExt)); err != nil {
					t.Fatal(err)
				}
			default:
				// The marker vanishes between the listing and the
				// latch's restore.
				fs = vfs.NewFaulty(killed, func(op vfs.Op, name string) error {
					if op == vfs.OpStat && name == marker {
						if err := killed.Remove(marker); err != nil && !vfs.IsNotExist(err) {
							return err
						}
					}
					return nil
				})
			}
			r := openMode(t, fs, false)
			assertFencedWithMarker(t, r, killed, 1, 12, acked, "after the restart")
			lost := killed.PowerLoss(rand.New(rand.NewPCG(6, 6)))
			_ = r.Close()
			r2 := openMode(t, lost, false)
			assertFencedWithMarker(t, r2, lost, 1, 12, acked, "after a power loss")
		})
	}
}
