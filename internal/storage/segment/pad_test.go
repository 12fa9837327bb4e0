package segment

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// writeLog records every WriteAt made through the files of a recFS, and
// fails those fail says to: keep bytes of it are written, then err.
type writeLog struct {
	mu     sync.Mutex
	writes [][2]int64 // [offset, length]
	fail   func(off, n int64) (keep int64, err error)
	// failTruncate, when set, fails each truncate it returns an error for,
	// changing nothing.
	failTruncate func() error
}

type recFS struct {
	vfs.FS
	log *writeLog
}

func (r recFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := r.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return recFile{File: f, log: r.log}, nil
}

type recFile struct {
	vfs.File
	log *writeLog
}

func (f recFile) WriteAt(b []byte, off int64) (int, error) {
	f.log.mu.Lock()
	f.log.writes = append(f.log.writes, [2]int64{off, int64(len(b))})
	fail := f.log.fail
	f.log.mu.Unlock()
	if fail != nil {
		if keep, err := fail(off, int64(len(b))); err != nil {
			n, _ := f.File.WriteAt(b[:keep], off)
			return n, err
		}
	}
	return f.File.WriteAt(b, off)
}

func (f recFile) Truncate(n int64) error {
	f.log.mu.Lock()
	fail := f.log.failTruncate
	f.log.mu.Unlock()
	if fail != nil {
		if err := fail(); err != nil {
			return err
		}
	}
	return f.File.Truncate(n)
}

// randomBatches makes 1-3 batches from offset at, of 1-40 records of
// 0-300 bytes each (0-6,000 in one batch of eight, some of them then
// larger than directWrite), so that appends end anywhere in a region.
func randomBatches(t *testing.T, rng *rand.Rand, at uint64) ([][]byte, uint64) {
	t.Helper()
	var bs [][]byte
	for range 1 + rng.IntN(3) {
		recs := make([]Record, 1+rng.IntN(40))
		size := 300
		if rng.IntN(8) == 0 {
			size = 6000 // some batches of directWrite or more, written apart
		}
		for i := range recs {
			v := make([]byte, rng.IntN(size))
			for j := range v {
				v[j] = byte(rng.IntN(255) + 1) // never zero: zeros are the padding
			}
			recs[i] = Record{Offset: at, Timestamp: int64(at), Value: v}
			at++
		}
		b, err := EncodeBatchAt(nil, recs, CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	return bs, at
}

// checkPadded checks a padded segment's file after an append: the data
// are the batches appended, past them the file holds only zeros, less
// than a region of unit bytes of them. strict: the file is also exactly
// as long as padding an unbroken run of appends makes it, up to the end
// of the region the data end in (no zeros while the data end in the
// first region, which the file header's write reached).
func checkPadded(t *testing.T, fs vfs.FS, s *Segment, want []byte, unit int64, strict bool) {
	t.Helper()
	b, err := vfs.ReadFile(fs, "/seg.log")
	if err != nil {
		t.Fatal(err)
	}
	end := int64(FileHeaderSize + len(want))
	size := (end + unit - 1) / unit * unit
	if end <= unit {
		size = end
	}
	switch {
	case int64(len(b)) < end || int64(len(b))-end >= unit:
		t.Fatalf("file is %d bytes for data ending at %d, padding of %d", len(b), end, unit)
	case strict && int64(len(b)) != size:
		t.Fatalf("file is %d bytes for data ending at %d, want %d", len(b), end, size)
	case !bytes.Equal(b[FileHeaderSize:end], want):
		t.Fatal("the file's data differ from the batches appended")
	}
	if i := bytes.IndexFunc(b[end:], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("nonzero byte at %d in the padding", end+int64(i))
	}
	got, _, err := s.Read(s.Base(), math.MaxInt, math.MaxUint64)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read returned %d bytes (%v), want the %d appended", len(got), err, len(want))
	}
}

// checkRegionsWhole checks that every region of unit bytes past the
// first was first written by a single write covering all of it: the
// page cache then holds it in folios as large as the region.
func checkRegionsWhole(t *testing.T, log *writeLog, unit int64) {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	reached := int64(0)
	for i, w := range log.writes {
		off, end := w[0], w[0]+w[1]
		for r := max(reached, unit) / unit * unit; r < end; r += unit {
			if r < reached {
				continue
			}
			if off > r || end < r+unit {
				t.Fatalf("write %d [%d, %d) is the first to reach region [%d, %d) and does not cover it", i, off, end, r, r+unit)
			}
		}
		reached = max(reached, end)
	}
}

func TestPaddedAppendsWriteEachRegionWhole(t *testing.T) {
	for _, unit := range []int64{512, 4096} {
		log := &writeLog{}
		fs := recFS{FS: vfs.NewMem(), log: log}
		s := newSeg(t, fs, 0, Options{IndexIntervalBytes: 256, PadBytes: int(unit)})
		rng := rand.New(rand.NewPCG(uint64(unit), 1))
		var want []byte
		at := uint64(0)
		for i := range 300 {
			var bs [][]byte
			bs, at = randomBatches(t, rng, at)
			appendSync(t, s, bs...)
			for _, b := range bs {
				want = append(want, b...)
			}
			if i%20 == 19 {
				checkPadded(t, fs, s, want, unit, true)
				continue
			}
			// Between the full checks, the file's length.
			end := int64(FileHeaderSize + len(want))
			if size, _ := fileSize(fs, "/seg.log"); end > unit && size != (end+unit-1)/unit*unit {
				t.Fatalf("file is %d bytes for data ending at %d, padding of %d", size, end, unit)
			}
		}
		checkRegionsWhole(t, log, unit)
	}
}

// TestPaddingUnpadded: without PadBytes the file is exactly its data.
func TestPaddingOffWritesOnlyData(t *testing.T) {
	mem := vfs.NewMem()
	s := newSeg(t, mem, 0, Options{})
	rng := rand.New(rand.NewPCG(3, 3))
	n, at := 0, uint64(0)
	for range 50 {
		var bs [][]byte
		bs, at = randomBatches(t, rng, at)
		appendSync(t, s, bs...)
		for _, b := range bs {
			n += len(b)
		}
	}
	if size, _ := fileSize(mem, "/seg.log"); size != int64(FileHeaderSize+n) {
		t.Fatalf("unpadded file is %d bytes for %d of data", size, FileHeaderSize+n)
	}
}

func TestPaddingAfterCutTrimAndRecovery(t *testing.T) {
	const unit = 1024
	mem := vfs.NewMem()
	o := Options{IndexIntervalBytes: 256, PadBytes: unit}
	s := newSeg(t, mem, 0, o)
	rng := rand.New(rand.NewPCG(7, 7))
	var batches [][]byte
	at := uint64(0)
	appendSome := func(k int) {
		for range k {
			var bs [][]byte
			bs, at = randomBatches(t, rng, at)
			appendSync(t, s, bs...)
			batches = append(batches, bs...)
		}
	}
	joined := func() []byte { return bytes.Join(batches, nil) }
	appendSome(40)

	// A cut takes the padding with it; appends after it pad again.
	keep := len(batches) / 2
	h, _ := ParseHeader(batches[keep])
	c, err := s.PlanCut(h.BaseOffset)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCut(c); err != nil {
		t.Fatal(err)
	}
	batches, at = batches[:keep], h.BaseOffset
	if size, _ := fileSize(mem, "/seg.log"); size != c.Pos {
		t.Fatalf("file is %d bytes after a cut to %d", size, c.Pos)
	}
	// Appends that stay in the cut's region add no zeros; the first that
	// ends in a region past it pads that region, and so on.
	for crossed := 0; crossed < 20; {
		before := int64(FileHeaderSize + len(joined()))
		appendSome(1)
		end := int64(FileHeaderSize + len(joined()))
		if end/unit > before/unit {
			crossed++
		}
		checkPadded(t, mem, s, joined(), unit, crossed > 0)
	}

	// Recovery cuts the padding off as a torn tail, with or without a
	// journal's cut, and keeps every batch.
	end := int64(FileHeaderSize + len(joined()))
	for _, journal := range []bool{false, true} {
		clone := mem.CrashClone()
		var r *Segment
		var rec Recovery
		if journal {
			r, rec, err = RecoverCut(clone, "/seg.log", o, end)
		} else {
			r, rec, err = Recover(clone, "/seg.log", o)
		}
		if err != nil || rec.Damage != nil {
			t.Fatalf("journal=%v: recover: %v, damage %v", journal, err, rec.Damage)
		}
		if size, _ := fileSize(clone, "/seg.log"); size != end {
			t.Fatalf("journal=%v: recovered file is %d bytes, its data end at %d", journal, size, end)
		}
		if got, _, err := r.Read(0, math.MaxInt, math.MaxUint64); err != nil || !bytes.Equal(got, joined()) {
			t.Fatalf("journal=%v: recovered segment reads %d bytes (%v), want %d", journal, len(got), err, len(joined()))
		}
	}

	// TrimPadding leaves the file exactly as long as its data, as a
	// sealed file must be.
	if err := s.TrimPadding(); err != nil {
		t.Fatal(err)
	}
	ft := sealSeg(t, mem, s, at, false)
	if _, err := OpenSealed(mem, "/seg.log", "", ft, o); err != nil {
		t.Fatal(err)
	}
}

// TestPaddingDiskFull: a disk too full for the zeros takes the batches
// without them; one too full for the batches refuses them and the file
// ends where it did; padding goes on once space returns.
func TestPaddingDiskFull(t *testing.T) {
	const unit = 4096
	log := &writeLog{}
	fs := recFS{FS: vfs.NewMem(), log: log}
	s := newSeg(t, fs, 0, Options{IndexIntervalBytes: 256, PadBytes: unit})
	rng := rand.New(rand.NewPCG(9, 9))
	var want []byte
	at, refused, unpadded := uint64(0), 0, 0
	for i := 0; i < 90; i++ {
		bs, next := randomBatches(t, rng, at)
		_, d := s.Stats()
		pos, n := int64(FileHeaderSize)+d.Bytes, int64(0)
		for _, b := range bs {
			n += int64(len(b))
		}
		padded := padTarget(pos, n, unit) > 0
		setFail := func(f func(off, n int64) (int64, error)) {
			log.mu.Lock()
			log.fail = f
			log.mu.Unlock()
		}
		switch {
		case padded && i%3 == 1:
			// No room for the zeros: the write that carries them fails
			// with all but its last byte written.
			setFail(func(off, k int64) (int64, error) {
				if off+k > pos+n {
					return k - 1, syscall.ENOSPC
				}
				return 0, nil
			})
			appendSync(t, s, bs...)
			setFail(nil)
			if size, _ := fileSize(fs, "/seg.log"); size != pos+n {
				t.Fatalf("padding refused: file is %d bytes, its data end at %d", size, pos+n)
			}
			unpadded++
		case i%3 == 2:
			// No room at all: half of the first write lands.
			setFail(func(off, k int64) (int64, error) { return k / 2, syscall.ENOSPC })
			if err := s.Append(bs...); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append into a full disk: %v", err)
			}
			setFail(nil)
			if size, _ := fileSize(fs, "/seg.log"); size != pos {
				t.Fatalf("after a refused append the file is %d bytes, it ended at %d", size, pos)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("a full disk failed the segment: %v", err)
			}
			refused++
			appendSync(t, s, bs...)
		default:
			appendSync(t, s, bs...)
		}
		at = next
		for _, b := range bs {
			want = append(want, b...)
		}
		checkPadded(t, fs, s, want, unit, false)
	}
	if refused == 0 || unpadded == 0 {
		t.Fatalf("the run refused %d appends and their padding %d times; want both", refused, unpadded)
	}
}

// sizedBatch is one batch at offset off of about n bytes (its value n
// bytes less the framing).
func sizedBatch(t *testing.T, off uint64, n int) []byte {
	t.Helper()
	v := bytes.Repeat([]byte{'x'}, n)
	b, err := EncodeBatchAt(nil, []Record{{Offset: off, Timestamp: 1, Value: v[:n-64]}}, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A region larger than directWrite: a run of small batches followed by a
// batch of directWrite or more that still ends short of the region's
// boundary is one gathered write, not a flush that stops inside the
// region it is the first to reach.
func TestPaddingRegionLargerThanDirectWrite(t *testing.T) {
	const unit = 256 << 10
	log := &writeLog{}
	fs := recFS{FS: vfs.NewMem(), log: log}
	s := newSeg(t, fs, 0, Options{IndexIntervalBytes: 4096, PadBytes: unit})
	first := sizedBatch(t, 0, 250<<10)
	appendSync(t, s, first)
	run := [][]byte{sizedBatch(t, 1, 10<<10), sizedBatch(t, 2, 70<<10), sizedBatch(t, 3, 300<<10)}
	appendSync(t, s, run...)
	checkPadded(t, fs, s, bytes.Join(append([][]byte{first}, run...), nil), unit, true)
	checkRegionsWhole(t, log, unit)
}
