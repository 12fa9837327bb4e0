package storage

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// A failed fdatasync fails every batch of its round, acknowledges none of
// them, and leaves the whole store refusing writes (fail-stop); durable
// data stays readable and survives a power loss, the failed round does not.
func TestSyncErrorFailsRoundAndStopsStore(t *testing.T) {
	// With the journal, the round's one fsync is the journal's; without
	// it, segment 1's.
	t.Run("journal", func(t *testing.T) { testSyncErrorFailsRound(t, false, ".jnl") })
	t.Run("no-journal", func(t *testing.T) { testSyncErrorFailsRound(t, true, "1.log") })
}

func testSyncErrorFailsRound(t *testing.T, noJournal bool, syncSuffix string) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s, err := Open(Config{Dir: "/data", FS: fs, NoJournal: noJournal})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Create(1, 0)
	_ = s.Create(2, 0)
	if err := s.Append(ctx, 1, mkBatch(t, 0)); err != nil {
		t.Fatal(err)
	}

	// Park the commit goroutine in an fsync so that the next round is
	// assembled while it waits, then fail every later fsync of segment 1.
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.SetRule(func(op vfs.Op, name string) error {
		if op != vfs.OpSync || !strings.HasSuffix(name, syncSuffix) {
			return nil
		}
		parked := false
		once.Do(func() { parked = true })
		if parked {
			close(entered)
			<-gate
			return nil
		}
		return vfs.ErrInjected
	})
	if err := s.AppendAsync(ctx, 1, mkBatch(t, 1), func(error) {}); err != nil {
		t.Fatal(err)
	}
	<-entered
	const n = 10
	results := make(chan error, n)
	for i := uint64(2); i < 2+n; i++ {
		if err := s.AppendAsync(ctx, 1, mkBatch(t, i), func(err error) { results <- err }); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	for i := 0; i < n; i++ {
		if err := <-results; !errors.Is(err, ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("callback %d: %v", i, err)
		}
	}
	for _, id := range []SegmentID{1, 2} {
		if err := s.AppendAsync(ctx, id, mkBatch(t, 100), func(error) { t.Error("done called") }); !errors.Is(err, ErrFailed) {
			t.Fatalf("append to segment %d after failure: %v", id, err)
		}
	}
	if err := s.Create(3, 0); !errors.Is(err, ErrFailed) {
		t.Fatalf("create after failure: %v", err)
	}
	if _, err := s.Seal(ctx, 2); !errors.Is(err, ErrFailed) {
		t.Fatalf("seal after failure: %v", err)
	}
	if got := readOffsets(t, s, 1); len(got) != 2 {
		t.Fatalf("read after failure returned %v", got)
	}
	r := openMem(t, mem.CrashClone())
	if got := readOffsets(t, r, 1); len(got) != 2 {
		t.Fatalf("after power loss %v", got)
	}
	if err := r.Append(ctx, 1, mkBatch(t, 2)); err != nil {
		t.Fatalf("reopened store refuses appends: %v", err)
	}
}

// A write torn part-way fails the append; the torn bytes are cut at the
// next Open and acknowledged batches are intact.
// (Without the journal: with it, the batch whose segment write tore is
// durable in the journal and replayed; TestJournalSegmentWriteTorn.)
func TestTornWriteRecovered(t *testing.T) {
	ctx := context.Background()
	mem := tornSegmentWrite(t, true)
	// A process crash keeps the torn bytes in the page cache.
	r := openMem(t, mem.Clone())
	if st := r.Stats(); st.TruncatedBytes != 20 {
		t.Fatalf("truncated %d bytes, want 20", st.TruncatedBytes)
	}
	if got := readOffsets(t, r, 1); len(got) != 15 || got[14] != 14 {
		t.Fatalf("recovered %v", got)
	}
	if err := r.Append(ctx, 1, span(t, 15, 3)); err != nil {
		t.Fatal(err)
	}
}

// tornSegmentWrite stores five batches of three records in segment 1,
// then tears the next segment-file write after 20 bytes and checks the
// append fails; it returns the filesystem as the failed store left it.
func tornSegmentWrite(t *testing.T, noJournal bool) *vfs.MemFS {
	t.Helper()
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	s, _ := Open(Config{Dir: "/data", FS: fs, NoJournal: noJournal})
	t.Cleanup(func() { s.Close() })
	_ = s.Create(1, 0)
	for i := uint64(0); i < 5; i++ {
		if err := s.Append(ctx, 1, span(t, 3*i, 3)); err != nil {
			t.Fatal(err)
		}
	}
	fs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && strings.HasSuffix(name, ".log") {
			return vfs.Torn(20, nil)
		}
		return nil
	})
	if err := s.Append(ctx, 1, span(t, 15, 3)); !errors.Is(err, ErrFailed) {
		t.Fatalf("torn append: %v", err)
	}
	return mem
}

func flipFileByte(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// One flipped byte in a sealed segment is reported by Read and Verify as
// corruption; reopening does not truncate or otherwise touch the file.
func TestSealedCorruptionReportedNotTruncated(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Create(1, 0)
	first := span(t, 0, 10)
	_ = s.Append(ctx, 1, first)
	_ = s.Append(ctx, 1, span(t, 10, 10))
	if _, err := s.Seal(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	path := filepath.Join(dir, "00000000000000000001.log")
	size := fileSize(t, path)
	flipFileByte(t, path, segment.FileHeaderSize+int64(len(first))+segment.HeaderSize+7)

	r, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Read(1, 0, math.MaxInt, math.MaxUint64); !IsCorrupt(err) {
		t.Fatalf("read: %v", err)
	}
	if err := r.Verify(1); !IsCorrupt(err) {
		t.Fatalf("verify: %v", err)
	}
	if buf, _, err := r.Read(1, 0, 0, math.MaxUint64); err != nil || len(decodeOffsets(t, buf)) != 10 {
		t.Fatalf("undamaged batch: %v", err)
	}
	if in, _ := r.Info(1); !in.Sealed || in.Footer == nil {
		t.Fatalf("info %+v", in)
	}
	_ = r.Close()

	// Reopen again, after cutting the file short: the mismatch with the
	// footer is reported and the file is left exactly as found.
	if err := os.Truncate(path, size-5); err != nil {
		t.Fatal(err)
	}
	r2, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if in, _ := r2.Info(1); !IsCorrupt(in.Damage) {
		t.Fatalf("info damage %v", in.Damage)
	}
	if _, _, err := r2.Read(1, 0, math.MaxInt, math.MaxUint64); !IsCorrupt(err) {
		t.Fatalf("read short sealed: %v", err)
	}
	if err := r2.Verify(1); !IsCorrupt(err) {
		t.Fatalf("verify short sealed: %v", err)
	}
	if got := fileSize(t, path); got != size-5 {
		t.Fatalf("sealed file changed size to %d", got)
	}
}

// Damage in the middle of an active segment (an invalid batch followed by
// valid ones) is not a torn tail: it is reported and kept.
func TestActiveMidFileDamageKept(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, _ := Open(Config{Dir: dir})
	_ = s.Create(1, 0)
	first := span(t, 0, 4)
	for i := uint64(0); i < 4; i++ {
		_ = s.Append(ctx, 1, span(t, 4*i, 4))
	}
	_ = s.Close()
	path := filepath.Join(dir, "00000000000000000001.log")
	size := fileSize(t, path)
	flipFileByte(t, path, segment.FileHeaderSize+int64(len(first))+segment.HeaderSize+3)
	r, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in, _ := r.Info(1)
	if !IsCorrupt(in.Damage) || in.DurableEnd != 4 {
		t.Fatalf("info %+v", in)
	}
	if err := r.Append(ctx, 1, span(t, 16, 1)); !IsCorrupt(err) {
		t.Fatalf("append to damaged: %v", err)
	}
	if got := fileSize(t, path); got != size {
		t.Fatalf("damaged active file changed size %d -> %d", size, got)
	}
}

// TestQuarantineCutShortLeavesNothingInService: a quarantine that stops
// after moving the .log (a crash, here a failing rename of the sidecars)
// must not leave a sealed segment that the next Open takes for an active
// one: the segment is out of service, its bytes in the quarantine folder.
func TestQuarantineCutShortLeavesNothingInService(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	s, err := Open(Config{Dir: "/segs", FS: faulty})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(context.Background(), 1, mkBatch(t, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	faulty.SetRule(vfs.FailOn(vfs.OpRename, ".seal", nil))
	if _, err := s.Quarantine(1); err == nil {
		t.Fatal("quarantine succeeded with a failing rename")
	}
	crashed := mem.Clone()
	s.Close()
	r, err := Open(Config{Dir: "/segs", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if in, err := r.Info(1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("segment 1 back in service after a cut-short quarantine: %+v, %v", in, err)
	}
	if names, _ := crashed.ReadDir("/segs/" + QuarantineDir); len(names) == 0 {
		t.Fatal("the quarantined .log is gone")
	}
}
