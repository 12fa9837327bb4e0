package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// removeUnsynced seals segment 7 (base 0) and deletes it with the
// directory fsync failing, so its removal is not durable.
func removeUnsynced(t *testing.T, s *Store, faulty *vfs.FaultyFS) {
	t.Helper()
	mustCreate(t, s, 7, 0)
	appendAll(t, s, 7, chain(t, 0, 2, 2, "old"))
	if _, err := s.Seal(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	faulty.SetRule(vfs.FailOn(vfs.OpSyncDir, "/data", vfs.ErrInjected))
	if err := s.Delete(7); err == nil {
		t.Fatal("the delete succeeded with a failing directory fsync")
	}
}

// While the directory cannot be fsynced, a create after a removal that
// is not durable is refused, and creates nothing; once the fsync works
// again the create goes on and its copy outlives a power loss.
func TestCreateRefusedWhileRemovalIsNotDurable(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		mem := vfs.NewMem()
		faulty := vfs.NewFaulty(mem, nil)
		s := openMode(t, faulty, noJournal)
		removeUnsynced(t, s, faulty)
		err := s.Create(7, 100)
		if err == nil || errors.Is(err, ErrExists) || !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("create with the removal not durable and the fsync failing: %v; want the fsync's error", err)
		}
		if _, err := s.Info(7); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a refused create left segment 7: %v", err)
		}
		if _, err := mem.Stat(s.path(7, logExt)); !vfs.IsNotExist(err) {
			t.Fatalf("a refused create left a .log: %v", err)
		}
		faulty.SetRule(nil)
		mustCreate(t, s, 7, 100)
		appendAll(t, s, 7, chain(t, 100, 2, 2, "new"))
		lost := openMode(t, mem.CrashClone(), noJournal)
		if in, err := lost.Info(7); err != nil || in.Sealed || in.Base != 100 || in.End != 104 {
			t.Fatalf("after a power loss segment 7 is %+v, %v; want the new active copy at base 100 ending at 104", in, err)
		}
	})
}

// Any later successful fsync of the directory (here a seal's) makes the
// removal durable: a create with the journal on then needs no fsync of
// the directory of its own, and still outlives a power loss.
func TestLaterDirectorySyncSettlesRemoval(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	s := openMode(t, faulty, false)
	removeUnsynced(t, s, faulty)
	faulty.SetRule(nil)
	mustCreate(t, s, 8, 0)
	if _, err := s.Seal(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	faulty.SetRule(vfs.FailOn(vfs.OpSyncDir, "/data", vfs.ErrInjected))
	mustCreate(t, s, 7, 100)
	appendAll(t, s, 7, chain(t, 100, 2, 2, "new"))
	faulty.SetRule(nil)
	lost := openMode(t, mem.CrashClone(), false)
	if in, err := lost.Info(7); err != nil || in.Sealed || in.Base != 100 || in.End != 104 {
		t.Fatalf("after a power loss segment 7 is %+v, %v; want the new active copy at base 100 ending at 104", in, err)
	}
}

// oldCopy returns the .log and .seal of segment 7, sealed at base base
// with two batches tagged "old", from a store of its own.
func oldCopy(t *testing.T, base uint64) map[string][]byte {
	t.Helper()
	mem := vfs.NewMem()
	s := openMode(t, mem, false)
	mustCreate(t, s, 7, base)
	appendAll(t, s, 7, chain(t, base, 2, 2, "old"))
	if _, err := s.Seal(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, ext := range []string{logExt, sealExt} {
		b, err := vfs.ReadFile(mem, s.path(7, ext))
		if err != nil {
			t.Fatal(err)
		}
		out[ext] = b
	}
	return out
}

func putFile(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A replay that finds a sealed copy beside a journaled create of the same
// id whose bytes are not that copy's (a removal a power loss undid, by
// whatever path) takes neither for the other: the copy is reported
// damaged, served to no one, and the journal's batches are kept in the
// quarantine folder. Both ways the old copy can differ are covered: its
// base, and, at the same base, its bytes.
func TestReplayRefusesStaleSealedCopyBesideJournaledCreate(t *testing.T) {
	for _, oldBase := range []uint64{0, 100} {
		t.Run(map[uint64]string{0: "other-base", 100: "same-base"}[oldBase], func(t *testing.T) {
			old := oldCopy(t, oldBase)
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 7, 100)
			appendAll(t, s, 7, chain(t, 100, 2, 2, "new"))
			crashed := mem.CrashClone()
			for ext, b := range old {
				putFile(t, crashed, s.path(7, ext), b)
			}
			r := openMode(t, crashed, false)
			in, err := r.Info(7)
			if err != nil || in.Damage == nil || !IsCorrupt(in.Damage) {
				t.Fatalf("segment 7 with a stale sealed copy beside its journaled create: %+v, %v; want it reported damaged", in, err)
			}
			if _, _, err := r.Read(7, oldBase, 1<<20, ^uint64(0)); err == nil {
				t.Fatal("the stale sealed copy was served")
			}
			names, err := crashed.ReadDir(filepath.Join("/data", QuarantineDir))
			if err != nil || len(names) == 0 {
				t.Fatalf("the journal holding the new copy's batches was not kept in quarantine: %v %v", names, err)
			}
			if _, err := crashed.Stat(s.path(7, sealExt)); err != nil {
				t.Fatalf("the stale copy's .seal was not kept: %v", err)
			}
		})
	}
}

// The copy a journaled create made and then sealed is no stale copy: a
// replay beside it serves it as sealed.
func TestReplayKeepsSealedCopyOfJournaledCreate(t *testing.T) {
	mem := vfs.NewMem()
	s := openMode(t, mem, false)
	mustCreate(t, s, 7, 100)
	appendAll(t, s, 7, chain(t, 100, 3, 2, "new"))
	if _, err := s.Seal(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	r := openMode(t, mem.CrashClone(), false)
	in, err := r.Info(7)
	if err != nil || in.Damage != nil || !in.Sealed || in.Base != 100 || in.End != 106 {
		t.Fatalf("the sealed copy of a journaled create after a power loss: %+v, %v", in, err)
	}
	if err := r.Verify(7); err != nil {
		t.Fatal(err)
	}
}

// Rounds of create, append, maybe seal, and Delete or Quarantine of one
// id, the removals' directory fsyncs failing by a pattern drawn from the
// seed; after the last round's create and appends a power loss must bring
// back that copy, whichever removals before it were not durable.
func TestRemovalsThenCreateSurvivePowerLoss(t *testing.T) {
	checked := 0
seeds:
	for seed := range int64(64) {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		mem := vfs.NewMem()
		faulty := vfs.NewFaulty(mem, nil)
		s := openMode(t, faulty, false)
		rounds := 2 + rng.IntN(4)
		for i := range rounds {
			base := uint64(100 * i)
			mustCreate(t, s, 7, base)
			appendAll(t, s, 7, chain(t, base, 2, 2, fmt.Sprintf("r%d", i)))
			if i == rounds-1 {
				break
			}
			if rng.IntN(2) == 0 {
				if _, err := s.Seal(context.Background(), 7); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
			}
			mask := rng.Uint32() // bit n set: the n-th directory fsync fails
			var n atomic.Int32
			faulty.SetRule(func(op vfs.Op, name string) error {
				if op == vfs.OpSyncDir && name == "/data" && mask&(1<<(n.Add(1)-1)) != 0 {
					return vfs.ErrInjected
				}
				return nil
			})
			var err error
			if rng.IntN(2) == 0 {
				err = s.Delete(7)
			} else {
				_, err = s.Quarantine(7)
			}
			faulty.SetRule(nil)
			if err != nil {
				if _, serr := mem.Stat(s.path(7, logExt)); !vfs.IsNotExist(serr) {
					continue seeds // the .log stayed: a create of the id is refused
				}
			}
		}
		lost := openMode(t, mem.CrashClone(), false)
		want := uint64(100 * (rounds - 1))
		if in, err := lost.Info(7); err != nil || in.Sealed || in.Damage != nil || in.Base != want || in.End != want+4 {
			t.Fatalf("seed %d: after a power loss segment 7 is %+v, %v; want the last copy, active at base %d ending at %d", seed, in, err, want, want+4)
		}
		checked++
	}
	if checked < 16 {
		t.Fatalf("only %d of 64 seeds reached a power loss", checked)
	}
}
