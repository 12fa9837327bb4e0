package storage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A create skips looking for a predecessor's sidecars only for an id no
// file was ever named after in this run. A quarantine cut short leaves a
// sealed segment's .seal and .idx behind; creating the same id again in
// the same run must clear them, so the new copy is active, takes appends
// and comes back active after a restart.
func TestCreateAfterCutShortQuarantineClearsSidecars(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		mem := vfs.NewMem()
		faulty := vfs.NewFaulty(mem, nil)
		s := openMode(t, faulty, noJournal)
		quarantineCutShort(t, s, faulty, mem)
		createAgainClean(t, s, mem, noJournal)
	})
}

// quarantineCutShort leaves behind, in s, the .seal and .idx of a sealed
// segment 5 whose quarantine failed part-way.
func quarantineCutShort(t *testing.T, s *Store, faulty *vfs.FaultyFS, mem vfs.FS) {
	t.Helper()
	mustCreate(t, s, 5, 0)
	appendAll(t, s, 5, chain(t, 0, 2, 2, "a"))
	if _, err := s.Seal(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	faulty.SetRule(vfs.FailOn(vfs.OpRename, ".seal", nil))
	if _, err := s.Quarantine(5); err == nil {
		t.Fatal("quarantine succeeded with a failing rename")
	}
	faulty.SetRule(nil)
	if _, err := mem.Stat(fmt.Sprintf("/data/%020d%s", 5, sealExt)); err != nil {
		t.Fatalf("the cut-short quarantine left no .seal to clear (%v): the test sets nothing up", err)
	}
}

// createAgainClean creates segment 5 again in s and checks the new copy
// is active and takes appends, there and after a restart.
func createAgainClean(t *testing.T, s *Store, mem vfs.FS, noJournal bool) {
	t.Helper()
	mustCreate(t, s, 5, 100)
	appendAll(t, s, 5, chain(t, 100, 2, 2, "b"))
	if in, err := s.Info(5); err != nil || in.Sealed || in.Base != 100 || in.End != 104 {
		t.Fatalf("the new copy: %+v, %v", in, err)
	}
	s.Close()
	r := openMode(t, mem, noJournal)
	if in, err := r.Info(5); err != nil || in.Sealed || in.Base != 100 || in.End != 104 {
		t.Fatalf("after a restart the new copy is %+v, %v", in, err)
	}
}

// Ids never known since Open are fresh: many creates of them, and
// of ids the directory held at Open, all make clean copies.
func TestCreateFreshAndKnownIDs(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		for id := SegmentID(1); id <= 8; id++ {
			mustCreate(t, s, id, uint64(id)*10)
		}
		for id := SegmentID(1); id <= 4; id++ {
			if err := s.Delete(id); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		r := openMode(t, mem, noJournal)
		for id := SegmentID(5); id <= 8; id++ {
			if !r.known.known(id) {
				t.Fatalf("segment %d is on disk but not known after Open", id)
			}
		}
		for id := SegmentID(2); id <= 12; id += 2 {
			if id <= 8 && id > 4 {
				continue // still there
			}
			mustCreate(t, r, id, 500)
			appendAll(t, r, id, chain(t, 500, 1, 1, "c"))
			if in, err := r.Info(id); err != nil || in.Sealed || in.Fenced || in.End != 501 {
				t.Fatalf("segment %d: %+v, %v", id, in, err)
			}
		}
	})
}

// Creates of ids no file was ever named after look for no predecessor's
// sidecars, in whatever order they reach the store: ids handed out in
// order arrive out of order from concurrent opens, and each look costs
// four unlinks.
func TestCreatesOfFreshIDsRemoveNothing(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		var removes atomic.Int64
		fs := vfs.NewFaulty(vfs.NewMem(), func(op vfs.Op, name string) error {
			if op == vfs.OpRemove && strings.Contains(name, "/data/") {
				removes.Add(1)
			}
			return nil
		})
		s := openMode(t, fs, noJournal)
		for id := SegmentID(64); id >= 33; id-- {
			mustCreate(t, s, id, 0)
		}
		var wg sync.WaitGroup
		for id := SegmentID(1); id <= 32; id++ {
			wg.Go(func() {
				if err := s.Create(id, 0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := removes.Load(); n != 0 {
			t.Fatalf("creates of 64 fresh ids, in falling order and at once, removed %d files", n)
		}
		for id := SegmentID(1); id <= 64; id++ {
			if !s.known.known(id) {
				t.Fatalf("segment %d was created but is not known", id)
			}
		}
	})
}

// Past the bound of ids held one by one, every id up to the highest
// counts as known: a create of an id noted before still clears the
// sidecars a cut-short quarantine left.
func TestKnownIDsPastTheirBoundStillClearSidecars(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		mem := vfs.NewMem()
		faulty := vfs.NewFaulty(mem, nil)
		s := openMode(t, faulty, noJournal)
		s.known.mu.Lock()
		s.known.max = 4
		s.known.mu.Unlock()
		quarantineCutShort(t, s, faulty, mem)
		for id := SegmentID(20); id > 10; id-- {
			mustCreate(t, s, id, 0)
		}
		s.known.mu.Lock()
		floor, held := s.known.floor, len(s.known.above)
		s.known.mu.Unlock()
		if floor < 5 || held > 4 {
			t.Fatalf("after 11 ids with a bound of 4: floor %d, %d held; the bound was not applied", floor, held)
		}
		createAgainClean(t, s, mem, noJournal)
	})
}
