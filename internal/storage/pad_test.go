package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// zeroBatch is one record of n zero bytes at offset off.
func zeroBatch(t *testing.T, off uint64, n int) []byte {
	t.Helper()
	b, err := segment.EncodeBatchAt(nil, []segment.Record{{Offset: off, Value: make([]byte, n)}}, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func logSize(t *testing.T, fs vfs.FS, s *Store, id SegmentID) int64 {
	t.Helper()
	st, err := fs.Stat(s.path(id, logExt))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size
}

// padStore opens a store on fs with cfg, creates segment 1 and appends n
// batches of one record of size zero bytes to it; it returns the store
// and the segment's data end (header and batches).
func padStore(t *testing.T, fs vfs.FS, cfg Config, n, size int) (*Store, int64) {
	t.Helper()
	cfg.Dir, cfg.FS = "/data", fs
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	data := int64(segment.FileHeaderSize)
	for off := range uint64(n) {
		b := zeroBatch(t, off, size)
		if err := s.Append(context.Background(), 1, b); err != nil {
			t.Fatal(err)
		}
		data += int64(len(b))
	}
	return s, data
}

// With the journal on, a segment file is padded to the end of the 64 KiB
// region its data end in, and its seal cuts the zeros off; without the
// journal nothing is padded.
func TestStorePadsWithTheJournalOnly(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		ctx := context.Background()
		mem := vfs.NewMem()
		s, data := padStore(t, mem, Config{NoJournal: noJournal}, 5, 30000)
		want := (data + padRegion - 1) / padRegion * padRegion
		if noJournal {
			want = data
		}
		if got := logSize(t, mem, s, 1); got != want {
			t.Fatalf("noJournal=%v: file of %d bytes of data is %d bytes, want %d", noJournal, data, got, want)
		}
		if _, err := s.Seal(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := logSize(t, mem, s, 1); got != data {
			t.Fatalf("noJournal=%v: sealed file is %d bytes, its data %d", noJournal, got, data)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A disk with room for the batches but not for their padding takes the
// batches: every append is acknowledged and the disk is not marked full.
func TestPaddingNeverFillsTheDisk(t *testing.T) {
	ctx := context.Background()
	q := newQuotaFS(vfs.NewMem())
	s, err := Open(Config{Dir: "/data", FS: q, MaxPendingBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const segs = 8
	for id := SegmentID(1); id <= segs; id++ {
		if err := s.Create(id, 0); err != nil {
			t.Fatal(err)
		}
		// Each file's data end just short of its first region's end.
		if err := s.Append(ctx, id, zeroBatch(t, 0, padRegion-200)); err != nil {
			t.Fatal(err)
		}
	}
	// Room for a few regions of zeros, not for eight.
	q.fill(3 * padRegion / quotaBlock)
	done := make(chan error, segs)
	for id := SegmentID(1); id <= segs; id++ {
		if err := s.AppendAsync(ctx, id, zeroBatch(t, 1, 300), func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for range segs {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("an append was refused: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("appends not acknowledged within 30 s")
		}
	}
	if st := s.DiskState(); st != DiskOK {
		t.Fatalf("disk state %v after appends that fit", st)
	}
	padded := 0
	for id := SegmentID(1); id <= segs; id++ {
		if logSize(t, q, s, id) > 2*padRegion-200 {
			padded++
		}
	}
	if padded == 0 || padded == segs {
		t.Fatalf("%d of %d files padded; the quota should have let some and refused others", padded, segs)
	}
}

// A seal whose trim fails otherwise (an I/O error) stops the store, as
// a segment file that will not sync does.
func TestSealTrimIOErrorStopsTheStore(t *testing.T) {
	ctx := context.Background()
	ffs := vfs.NewFaulty(vfs.NewMem(), nil)
	s, _ := padStore(t, ffs, Config{PadBytes: 512}, 2, 300)
	ffs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpTruncate && strings.HasSuffix(name, logExt) {
			return syscall.EIO
		}
		return nil
	})
	if _, err := s.Seal(ctx, 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("seal with a trim that fails: %v, want EIO", err)
	}
	if err := s.failure(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("store failure after the trim's EIO: %v", err)
	}
}

// cowFS is a copy-on-write filesystem near full: a .log write ending
// past limit fails with ENOSPC, writing nothing, and while the limit is
// set a truncate needs space it does not have.
type cowFS struct {
	vfs.FS
	limit *atomic.Int64
}

type cowFile struct {
	vfs.File
	limit *atomic.Int64
}

func (c cowFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, logExt) {
		return f, err
	}
	return cowFile{File: f, limit: c.limit}, nil
}

func (f cowFile) WriteAt(b []byte, off int64) (int, error) {
	if l := f.limit.Load(); l > 0 && off+int64(len(b)) > l {
		return 0, syscall.ENOSPC
	}
	return f.File.WriteAt(b, off)
}

func (f cowFile) Truncate(n int64) error {
	if f.limit.Load() > 0 {
		return syscall.ENOSPC
	}
	return f.File.Truncate(n)
}

// Room for a batch but not its padding, on a disk that cannot truncate
// either: the batch is taken unpadded, and the file stays whole.
func TestPaddingOnAFullCopyOnWriteDisk(t *testing.T) {
	ctx := context.Background()
	var limit atomic.Int64
	mem := vfs.NewMem()
	s, err := Open(Config{Dir: "/data", FS: cowFS{FS: mem, limit: &limit}, PadBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Create(1, 0); err != nil {
		t.Fatal(err)
	}
	bs := [][]byte{zeroBatch(t, 0, 3000), zeroBatch(t, 1, 3000), zeroBatch(t, 2, 3000)}
	if err := s.Append(ctx, 1, bs[0]); err != nil {
		t.Fatal(err)
	}
	data := int64(segment.FileHeaderSize + len(bs[0]) + len(bs[1]))
	limit.Store(data) // the batch fits; the zeros to 8,192 do not
	if err := s.Append(ctx, 1, bs[1]); err != nil {
		t.Fatalf("an append that fits unpadded: %v", err)
	}
	if st, err := s.DiskState(), s.failure(); st != DiskOK || err != nil {
		t.Fatalf("disk %v, store failure %v after an append that fit", st, err)
	}
	limit.Store(0)
	if err := s.Append(ctx, 1, bs[2]); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Read(1, 0, 1<<20, 3)
	if want := bytes.Join(bs, nil); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d appended", len(got), err, len(want))
	}
	if _, err := s.Seal(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got, want := logSize(t, mem, s, 1), data+int64(len(bs[2])); got != want {
		t.Fatalf("sealed file is %d bytes, its data %d", got, want)
	}
}

// A seal whose trim finds the disk full is refused with ErrNoSpace and
// may be retried once space returns; the store does not fail.
func TestSealTrimOnFullDiskIsRetriable(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ffs := vfs.NewFaulty(mem, nil)
	s, data := padStore(t, ffs, Config{PadBytes: 512}, 4, 300)
	ffs.SetRule(func(op vfs.Op, name string) error {
		if op == vfs.OpTruncate && strings.HasSuffix(name, logExt) {
			return syscall.ENOSPC
		}
		return nil
	})
	if _, err := s.Seal(ctx, 1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("seal with a trim that finds the disk full: %v, want ErrNoSpace", err)
	}
	ffs.SetRule(nil)
	if st := s.CheckSpace(); st != DiskOK {
		t.Fatalf("disk state %v once space returned", st)
	}
	if _, err := s.Seal(ctx, 1); err != nil {
		t.Fatalf("seal again: %v", err)
	}
	if got := logSize(t, mem, s, 1); got != data {
		t.Fatalf("sealed file is %d bytes, its data %d", got, data)
	}
}

// PadBytes that would leave files in a shape tools take for damage (not
// a multiple of segment.PadAlign), or hold too large a buffer, are
// refused, and nothing is created.
func TestPadBytesRefused(t *testing.T) {
	for _, pad := range []int{37, segment.PadAlign + 1, segment.MaxPadBytes + segment.PadAlign} {
		mem := vfs.NewMem()
		if s, err := Open(Config{Dir: "/data", FS: mem, PadBytes: pad}); err == nil || !strings.Contains(err.Error(), "PadBytes") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("PadBytes %d: %v, want a refusal", pad, err)
		}
		if _, err := mem.Stat("/data"); err == nil {
			t.Fatalf("PadBytes %d: the refused Open created its folder", pad)
		}
	}
	for _, pad := range []int{-1, segment.PadAlign, segment.MaxPadBytes} {
		s, err := Open(Config{Dir: "/data", FS: vfs.NewMem(), PadBytes: pad})
		if err != nil {
			t.Fatalf("PadBytes %d: %v", pad, err)
		}
		s.Close()
	}
}
