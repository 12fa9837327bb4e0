package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// journalFiles lists the journal's files in fs that a replay reads (not
// the spare).
func journalFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.ReadDir("/data/journal")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, ok := parseJournalName(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// One round over many segments costs one journal fdatasync and no segment
// fsync; the segment files are fsynced by the checkpoint, which then
// deletes the journal file.
func TestJournalOneSyncPerRound(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s, err := Open(Config{Dir: "/data", FS: mem, JournalFileBytes: 4000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const segs = 8
	for i := range segs {
		if err := s.Create(SegmentID(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats() // creates are journaled too: one round each here
	var wg sync.WaitGroup
	for i := range segs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Append(ctx, SegmentID(i), span(t, 0, 3)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	if rounds := st.JournalSyncs - before.JournalSyncs; st.Syncs != 0 || rounds == 0 || rounds > segs {
		t.Fatalf("after one append per segment: %+v (before: %+v)", st, before)
	}
	// Everything acknowledged is durable through the journal alone.
	r := openMem(t, mem.CrashClone())
	for i := range segs {
		if got := readOffsets(t, r, SegmentID(i)); len(got) != 3 {
			t.Fatalf("segment %d after power loss: %v", i, got)
		}
	}
	if r.Stats().ReplayedBatches != segs {
		t.Fatalf("replayed %d batches, want %d", r.Stats().ReplayedBatches, segs)
	}
	// Fill past the journal file size: a checkpoint syncs the segments and
	// retires the file.
	for j := uint64(1); s.Stats().Checkpoints == 0; j++ {
		for i := range segs {
			if err := s.Append(ctx, SegmentID(i), span(t, 3*j, 3)); err != nil {
				t.Fatal(err)
			}
		}
		if j > 1000 {
			t.Fatalf("no checkpoint after %d rounds: %+v", j, s.Stats())
		}
	}
	if st := s.Stats(); st.Syncs == 0 {
		t.Fatalf("a checkpoint without segment fsyncs: %+v", st)
	}
}

// A clean Close checkpoints everything: no journal is left to replay.
func TestJournalCloseLeavesNothingToReplay(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(1, 0)
	if err := s.Append(context.Background(), 1, span(t, 0, 4)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if names := journalFiles(t, mem.CrashClone()); len(names) != 0 {
		t.Fatalf("journal after a clean close: %v", names)
	}
	r := openMem(t, mem.CrashClone())
	if got := readOffsets(t, r, 1); len(got) != 4 || r.Stats().ReplayedBatches != 0 {
		t.Fatalf("after reopen: %v, %+v", got, r.Stats())
	}
}

// A segment write that tears after the journal took the round: the batch
// is durable in the journal, so the restart replays it whole, after a kill
// -9 and after a power loss alike; acknowledged batches are all there.
func TestJournalSegmentWriteTorn(t *testing.T) {
	ctx := context.Background()
	mem := tornSegmentWrite(t, false)
	for name, fs := range map[string]*vfs.MemFS{"kill": mem.Clone(), "power loss": mem.CrashClone()} {
		r := openMem(t, fs)
		if got := readOffsets(t, r, 1); len(got) != 18 || got[17] != 17 {
			t.Fatalf("%s: recovered %v", name, got)
		}
		if err := r.Append(ctx, 1, span(t, 18, 3)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// Pages of a segment's unsynced appends can reach the disk out of order:
// garbage followed by a valid batch. Without the journal that is damage;
// with it, the part after the last checkpoint is cut and replayed.
func TestJournalRepairsUnsyncedSegmentPages(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	appendSpans(t, s, 1, 4)
	crashed := mem.Clone()
	// Zero the second batch, as if its page never reached the disk.
	f, err := crashed.OpenFile("/data/00000000000000000001.log", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(span(t, 0, 3)))
	if _, err := f.WriteAt(make([]byte, n), 32+n); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	r := openMem(t, crashed)
	in, _ := r.Info(1)
	if got := readOffsets(t, r, 1); len(got) != 12 || in.Damage != nil {
		t.Fatalf("recovered %v, damage %v", got, in.Damage)
	}
}

// Damage inside the journal (an invalid round followed by a valid one)
// fails Open with ErrCorrupt instead of dropping the rounds after it; a
// torn last round is cut.
func TestJournalDamageRefusedTornTailCut(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	appendSpans(t, s, 1, 3)
	crashed := mem.Clone()
	names := journalFiles(t, crashed)
	path := filepath.Join("/data/journal", names[len(names)-1])
	b, err := vfs.ReadFile(crashed, path)
	if err != nil {
		t.Fatal(err)
	}
	round := (len(b) - journalHeaderLen) / 3
	// Tear the last round: cut.
	torn := crashed.Clone()
	truncate(t, torn, path, int64(len(b)-5))
	r := openMem(t, torn)
	if got := readOffsets(t, r, 1); len(got) != 6 {
		t.Fatalf("after a torn last round: %v", got)
	}
	// Flip a byte of the first round: two valid rounds follow it.
	f, _ := crashed.OpenFile(path, os.O_RDWR, 0)
	_, _ = f.WriteAt([]byte{b[journalHeaderLen+roundHeaderLen+40] ^ 1}, int64(journalHeaderLen+roundHeaderLen+40))
	_ = f.Close()
	if _, err := Open(Config{Dir: "/data", FS: crashed}); !IsCorrupt(err) {
		t.Fatalf("open over a damaged journal (rounds of %d bytes): %v", round, err)
	}
}

func truncate(t *testing.T, fs vfs.FS, path string, size int64) {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// Deleting a segment journals a tombstone: a replay does not look for its
// file. A file lost without one leaves the segment reported damaged and
// the journal kept in quarantine, never silently dropped.
func TestJournalTombstoneAndOrphan(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	for id := SegmentID(1); id <= 3; id++ {
		_ = s.Create(id, 0)
	}
	s = reopenClean(t, s, mem) // the creates are checkpointed
	for id := SegmentID(1); id <= 3; id++ {
		if err := s.Append(ctx, id, span(t, 0, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Seal(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []SegmentID{1, 2} {
		if err := s.Delete(id); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone()
	r := openMem(t, crashed.Clone())
	if l := r.List(); len(l) != 1 || l[0].ID != 3 || l[0].Damage != nil {
		t.Fatalf("after deletes and a power loss: %+v", l)
	}
	// Now lose segment 3's file by hand.
	if err := crashed.Remove("/data/00000000000000000003.log"); err != nil {
		t.Fatal(err)
	}
	r = openMem(t, crashed)
	in, err := r.Info(3)
	if err != nil || !IsCorrupt(in.Damage) || in.EndPastDamage != 2 {
		t.Fatalf("orphaned segment: %+v, %v", in, err)
	}
	q, _ := crashed.ReadDir("/data/" + QuarantineDir)
	if len(q) == 0 || !strings.HasPrefix(q[0], "journal-") {
		t.Fatalf("quarantine holds %v", q)
	}
}

// A crash during replay (here: the journal cannot be retired) leaves the
// journal to be replayed again, to the same records, none twice.
func TestJournalReplayInterrupted(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(1, 0)
	for i := uint64(0); i < 3; i++ {
		if err := s.Append(ctx, 1, span(t, 3*i, 3)); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.Clone()
	fs := vfs.NewFaulty(crashed, func(op vfs.Op, name string) error {
		if (op == vfs.OpRemove || op == vfs.OpRename) && strings.HasSuffix(name, ".jnl") {
			return vfs.ErrInjected
		}
		return nil
	})
	if _, err := Open(Config{Dir: "/data", FS: fs}); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("open with the journal undeletable: %v", err)
	}
	for name, fs := range map[string]*vfs.MemFS{"kill": crashed.Clone(), "power loss": crashed.CrashClone()} {
		r := openMem(t, fs)
		got := readOffsets(t, r, 1)
		if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8]" {
			t.Fatalf("%s: after an interrupted replay: %v", name, got)
		}
	}
}

// A create is journaled instead of fsyncing the file and its directory:
// after a power loss the replay recreates the file from the record, with
// the batches journaled after it, an empty segment included.
func TestJournalCreateRecreatedAfterPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	if err := s.CreateFor(1, 10, 77); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(2, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, 1, span(t, 10, 3)); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone()
	if names, _ := crashed.ReadDir("/data"); fmt.Sprint(names) != "[journal]" {
		t.Fatalf("the test needs the files' names not yet durable: %v", names)
	}
	r := openMem(t, crashed)
	in, err := r.Info(1)
	if err != nil || in.Owner != 77 || in.Base != 10 {
		t.Fatalf("segment 1 after replay: %+v, %v", in, err)
	}
	if got := readOffsets(t, r, 1); fmt.Sprint(got) != "[10 11 12]" {
		t.Fatalf("segment 1 holds %v", got)
	}
	if in, err := r.Info(2); err != nil || in.End != 0 || in.Damage != nil {
		t.Fatalf("empty segment 2 after replay: %+v, %v", in, err)
	}
	if err := r.Append(ctx, 2, span(t, 0, 1)); err != nil {
		t.Fatal(err)
	}
}

// appendSpans creates segment id and appends n batches of three records,
// offsets 0 to 3n-1, each acknowledged.
func appendSpans(t *testing.T, s *Store, id SegmentID, n int) {
	t.Helper()
	if err := s.Create(id, 0); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(n) {
		if err := s.Append(context.Background(), id, span(t, 3*i, 3)); err != nil {
			t.Fatal(err)
		}
	}
}

// An interrupted preallocation leaves a temporary file, and a crash during
// recycling can leave more than one spare: Open removes the temporary
// file and every spare but one, and the store works on.
func TestJournalLeftoversRemovedAtOpen(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	appendSpans(t, s, 1, 2)
	_ = s.Close() // leaves one spare
	for _, name := range []string{"spare-prealloc.jnl.tmp", "spare-00000000000000000042.jnl"} {
		f, err := mem.OpenFile("/data/journal/"+name, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteAt(make([]byte, 100), 0)
		_ = f.Sync()
		_ = f.Close()
	}
	_ = mem.SyncDir("/data/journal")
	r := openMem(t, mem)
	if err := r.Append(context.Background(), 1, span(t, 6, 3)); err != nil {
		t.Fatal(err)
	}
	names, _ := mem.ReadDir("/data/journal")
	spares, tmps := 0, 0
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".tmp"):
			tmps++
		case strings.HasPrefix(n, spareName):
			spares++
		}
	}
	if tmps != 0 || spares > 1 {
		t.Fatalf("journal directory after open: %v", names)
	}
	if got := readOffsets(t, openMem(t, mem.CrashClone()), 1); len(got) != 9 {
		t.Fatalf("after a power loss: %v", got)
	}
}
