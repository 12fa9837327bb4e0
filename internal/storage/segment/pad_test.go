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

// writeLog records every WriteAt made through the files of a recFS.
type writeLog struct {
	mu     sync.Mutex
	writes [][2]int64 // [offset, length]
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
	f.log.mu.Unlock()
	return f.File.WriteAt(b, off)
}

// randomBatches makes 1-3 batches from offset at, of 1-40 records of
// 0-300 bytes each, so that appends end anywhere in a region.
func randomBatches(t *testing.T, rng *rand.Rand, at uint64) ([][]byte, uint64) {
	t.Helper()
	var bs [][]byte
	for range 1 + rng.IntN(3) {
		recs := make([]Record, 1+rng.IntN(40))
		for i := range recs {
			v := make([]byte, rng.IntN(300))
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
// are the batches appended, and past them the file holds zeros up to the
// end of the region of unit bytes the data end in (none while the data
// end in the first region, which the file header's write reached).
func checkPadded(t *testing.T, fs vfs.FS, s *Segment, want []byte, unit int64) {
	t.Helper()
	b, err := vfs.ReadFile(fs, "/seg.log")
	if err != nil {
		t.Fatal(err)
	}
	end := int64(FileHeaderSize + len(want))
	size := end
	if end > unit {
		size = (end + unit - 1) / unit * unit
	}
	if int64(len(b)) != size {
		t.Fatalf("file is %d bytes for data ending at %d, want %d", len(b), end, size)
	}
	if !bytes.Equal(b[FileHeaderSize:end], want) {
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
		for range 300 {
			var bs [][]byte
			bs, at = randomBatches(t, rng, at)
			appendSync(t, s, bs...)
			for _, b := range bs {
				want = append(want, b...)
			}
			checkPadded(t, fs, s, want, unit)
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
	appendSome(40)
	checkPadded(t, mem, s, joined(), unit)

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

// TestPaddingDiskFullInThePadding: a write the disk fills part-way
// through its padding is cut off whole, and the same batches are written
// again, padded, once space returns.
func TestPaddingDiskFullInThePadding(t *testing.T) {
	const unit = 4096
	mem := vfs.NewMem()
	ffs := vfs.NewFaulty(mem, nil)
	s := newSeg(t, ffs, 0, Options{IndexIntervalBytes: 256, PadBytes: unit})
	rng := rand.New(rand.NewPCG(9, 9))
	var want []byte
	at := uint64(0)
	for i := 0; i < 60; i++ {
		bs, next := randomBatches(t, rng, at)
		_, d := s.Stats()
		pos, n := int64(FileHeaderSize)+d.Bytes, int64(0)
		for _, b := range bs {
			n += int64(len(b))
		}
		if padTo := padTarget(pos, n, pos, unit); i%3 == 1 && padTo > 0 {
			// Fail the write that carries the padding (the append's last;
			// one gathered write comes before it when the batches reach
			// past the padded region's start), keeping all but its last
			// byte: every byte of the batches is on the file.
			from, writes := max(pos, padTo-unit), 0
			ffs.SetRule(func(op vfs.Op, name string) error {
				if op != vfs.OpWrite {
					return nil
				}
				if writes++; from > pos && writes == 1 {
					return nil
				}
				return vfs.Torn(int(padTo-from)-1, syscall.ENOSPC)
			})
			if err := s.Append(bs...); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append into a full disk: %v", err)
			}
			ffs.SetRule(nil)
			if size, _ := fileSize(mem, "/seg.log"); size != pos {
				t.Fatalf("after a torn padded write the file is %d bytes, it ended at %d", size, pos)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("a full disk failed the segment: %v", err)
			}
		}
		appendSync(t, s, bs...)
		at = next
		for _, b := range bs {
			want = append(want, b...)
		}
		checkPadded(t, mem, s, want, unit)
	}
}
