package storage

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// memRead reads a whole file of a MemFS.
func memRead(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitFor checks cond every millisecond until it holds, failing the test
// after five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Quarantine takes a segment out of service "without destroying a byte".
// With the journal on, an active segment's acknowledged tail may be
// durable only in the journal, and the tombstone Quarantine journals voids
// those records for replay: the file must be fsynced before it, or a power
// loss leaves the quarantined file without acknowledged bytes.
func TestJournalQuarantineKeepsAcknowledgedBytes(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	b := span(t, 0, 3)
	if err := s.Append(ctx, 1, b); err != nil {
		t.Fatal(err)
	}
	path, err := s.Quarantine(1)
	if err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone()
	got := memRead(t, crashed, path)
	if want := segment.FileHeaderSize + len(b); len(got) != want || !bytes.Equal(got[segment.FileHeaderSize:], b) {
		t.Fatalf("quarantined file after a power loss is %d bytes, want %d holding the acknowledged batch", len(got), want)
	}
}

// A checkpoint must not skip a segment that Delete is removing before its
// tombstone is durable: it would recycle the journal file holding the only
// copy of acknowledged batches, and a power loss before the tombstone's
// fsync would bring the segment back (Delete never returned, its .log is
// still there) without them, reported healthy.
func TestJournalCheckpointDropsDeletedSegmentBeforeTombstoneDurable(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	releasePrealloc := make(chan struct{})
	releaseJournalSync := make(chan struct{})
	var holdJournalSync atomic.Bool
	var file1Named atomic.Bool
	fs := vfs.NewFaulty(mem, func(op vfs.Op, name string) error {
		switch {
		case op == vfs.OpWrite && strings.Contains(name, "prealloc-1"):
			<-releasePrealloc // keeps the checkpoint goroutine busy
		case op == vfs.OpSync && strings.HasSuffix(name, journalExt) && holdJournalSync.Load():
			<-releaseJournalSync // the tombstone's round is not durable yet
		case op == vfs.OpSyncDir && name == "/data/journal":
			// Counted once journal file 1 is named: the spare's
			// preallocation syncs this directory too, at a time that
			// depends on scheduling.
			if _, err := mem.Stat("/data/journal/" + journalName(1)); err == nil {
				file1Named.Store(true)
			}
		}
		return nil
	})
	// Segment 5 is created first, without the journal: a journaled create
	// would itself retire the journal file and wait for the checkpoint
	// goroutine this test holds.
	pre := openMemCfg(t, Config{Dir: "/data", FS: mem, NoJournal: true})
	if err := pre.Create(5, 0); err != nil {
		t.Fatal(err)
	}
	_ = pre.Close()
	s, err := Open(Config{Dir: "/data", FS: fs, JournalFileBytes: 1, JournalPrealloc: true})
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	if err := s.AppendAsync(ctx, 5, span(t, 0, 3), func(err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	// The checkpoint goroutine is held writing the next spare
	// (spare-prealloc-1). The append's round is synced, then retires
	// journal file 0: file 1 is named and the journal directory synced,
	// then the hand-over to the checkpoint goroutine waits for the
	// preallocation; only later rounds' syncs are held below.
	waitFor(t, "journal file 1", file1Named.Load)
	deleted := make(chan error, 1)
	go func() { deleted <- s.Delete(5) }()
	waitFor(t, "Delete to mark the segment gone", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.segs[5] == nil
	})
	holdJournalSync.Store(true)
	close(releasePrealloc)
	if err := <-acked; err != nil {
		t.Fatalf("append: %v", err)
	}
	waitFor(t, "the checkpoint of journal file 0", func() bool { return s.Stats().Checkpoints >= 1 })

	crashed := mem.CrashClone() // power loss: the tombstone was never fsynced
	close(releaseJournalSync)
	<-deleted
	_ = s.Close()

	r := openMem(t, crashed)
	in, err := r.Info(5)
	if err != nil {
		return // gone entirely: acceptable, Delete was under way
	}
	if in.Damage != nil {
		return // reported: acceptable
	}
	if got := readOffsets(t, r, 5); len(got) != 3 {
		t.Fatalf("segment 5 came back healthy after a power loss during Delete, without its acknowledged batch: offsets %v, info %+v", got, in)
	}
}

// Quarantined journal files are named after their sequence number, and
// sequence numbers start again at 0 whenever a run leaves no journal file
// behind (a clean Close): a second quarantine must not rename over the
// first, destroying the batches it was kept for.
func TestJournalQuarantinedJournalNotOverwritten(t *testing.T) {
	ctx := context.Background()
	b5 := span(t, 0, 3)
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(5, 0)
	s = reopenClean(t, s, mem) // the create is checkpointed: only the file says it exists
	if err := s.Append(ctx, 5, b5); err != nil {
		t.Fatal(err)
	}
	crashed := mem.Clone() // kill -9
	_ = s.Close()
	if err := crashed.Remove("/data/00000000000000000005.log"); err != nil {
		t.Fatal(err)
	}
	r, err := Open(Config{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	if in, err := r.Info(5); err != nil || in.Damage == nil {
		t.Fatalf("orphan not reported: %+v %v", in, err)
	}
	_ = r.Close()

	// A later run, after a clean restart, loses another file.
	r, err = Open(Config{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Create(6, 100)
	_ = r.Close()
	r, err = Open(Config{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Append(ctx, 6, span(t, 100, 3)); err != nil {
		t.Fatal(err)
	}
	crashed2 := crashed.Clone()
	_ = r.Close()
	if err := crashed2.Remove("/data/00000000000000000006.log"); err != nil {
		t.Fatal(err)
	}
	r, err = Open(Config{Dir: "/data", FS: crashed2})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()

	qdir := "/data/" + QuarantineDir
	names, _ := crashed2.ReadDir(qdir)
	for _, n := range names {
		if bytes.Contains(memRead(t, crashed2, filepath.Join(qdir, n)), b5) {
			return
		}
	}
	t.Fatalf("segment 5's batch, kept only in the quarantined journal, is gone; quarantine holds %v", names)
}

// Damage that the journal reveals (the synced part of a segment does not
// verify) is reported, and the journal moved to quarantine. The next Open
// no longer has the journal's cut position: without a durable marker it
// would recover the file as if it had no journal, take the damage for a
// torn tail and truncate acknowledged, fsynced bytes.
func TestJournalJournalDamageStillReportedOnSecondOpen(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_ = s.Create(5, 0)
	b1 := span(t, 0, 3)
	if err := s.Append(ctx, 5, b1); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // checkpoint: b1 is fsynced in the segment file
	s = openMem(t, mem)
	if err := s.Append(ctx, 5, span(t, 3, 3)); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone() // the second batch is in the journal only
	_ = s.Close()

	// Damage inside the synced part: one byte of b1's records.
	path := "/data/00000000000000000005.log"
	f, err := crashed.OpenFile(path, 2 /* O_RDWR */, 0)
	if err != nil {
		t.Fatal(err)
	}
	pos := int64(segment.FileHeaderSize + len(b1) - 2)
	one := []byte{0}
	_, _ = f.ReadAt(one, pos)
	one[0] ^= 0x10
	_, _ = f.WriteAt(one, pos)
	_ = f.Sync()
	_ = f.Close()
	size := int64(segment.FileHeaderSize + len(b1))

	r, err := Open(Config{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := r.Info(5); in.Damage == nil {
		t.Fatalf("first open: damage not reported: %+v", in)
	}
	_ = r.Close()

	r, err = Open(Config{Dir: "/data", FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in, _ := r.Info(5)
	st, _ := crashed.Stat(path)
	if in.Damage == nil || st.Size != size {
		t.Fatalf("second open: damage %v, file %d bytes (was %d), truncated %d bytes; info %+v",
			in.Damage, st.Size, size, r.Stats().TruncatedBytes, in)
	}
}

// JournalPrealloc writes a zero-filled spare only when the store has no
// checkpointed file to recycle (a new node), not on every restart.
func TestJournalPreallocOnlyWithoutSpare(t *testing.T) {
	mem := vfs.NewMem()
	cfg := Config{Dir: "/data", FS: mem, JournalFileBytes: 1 << 20, JournalPrealloc: true}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // leaves a spare (the checkpointed file or the preallocated one)
	names, _ := mem.ReadDir("/data/journal")
	if len(names) != 1 || !strings.HasPrefix(names[0], spareName) {
		t.Fatalf("after a clean close the journal holds %v", names)
	}
	var preallocWrites atomic.Int32
	fs := vfs.NewFaulty(mem, func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && strings.HasSuffix(name, ".tmp") {
			preallocWrites.Add(1)
		}
		return nil
	})
	cfg.FS = fs
	s, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if n := preallocWrites.Load(); n != 0 {
		t.Fatalf("a node with a spare preallocated again (%d writes)", n)
	}
}

// openMemCfg opens a store with cfg, closed at the end of the test.
func openMemCfg(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// reopenClean closes s (a checkpoint of everything) and opens the store
// again on mem.
func reopenClean(t *testing.T, s *Store, mem *vfs.MemFS) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openMem(t, mem)
}
