package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// mkBatch encodes records at the given offsets, each value naming its offset.
func mkBatch(t testing.TB, offs ...uint64) []byte {
	t.Helper()
	recs := make([]Record, len(offs))
	for i, o := range offs {
		recs[i] = Record{Offset: o, Timestamp: int64(o), Value: []byte(fmt.Sprintf("value-%d", o))}
	}
	b, err := EncodeBatchAt(nil, recs, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newSeg(t *testing.T, fs vfs.FS, base uint64, o Options) *Segment {
	t.Helper()
	s, err := Create(fs, "/seg.log", 1, base, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return s
}

func appendSync(t *testing.T, s *Segment, batches ...[]byte) {
	t.Helper()
	if err := s.Append(batches...); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// offsetsOf decodes a Read result into its record offsets.
func offsetsOf(t *testing.T, buf []byte) []uint64 {
	t.Helper()
	parts, err := SplitBatches(buf)
	if err != nil {
		t.Fatal(err)
	}
	var offs []uint64
	for _, p := range parts {
		recs, err := DecodeRecords(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if string(r.Value) != fmt.Sprintf("value-%d", r.Offset) {
				t.Fatalf("offset %d holds %q", r.Offset, r.Value)
			}
			offs = append(offs, r.Offset)
		}
	}
	return offs
}

func TestAppendOffsetRules(t *testing.T) {
	tests := []struct {
		name    string
		batches [][]uint64
		wantErr error
		wantEnd uint64
	}{
		{"consecutive", [][]uint64{{10, 11}, {12}}, nil, 13},
		{"hole between batches", [][]uint64{{10}, {20, 25}}, nil, 26},
		{"first batch above base", [][]uint64{{15}}, nil, 16},
		{"below base", [][]uint64{{9}}, ErrOffsetRegression, 10},
		{"overlap", [][]uint64{{10, 11, 12}, {12, 13}}, ErrOffsetRegression, 13},
		{"regression", [][]uint64{{10, 11}, {5}}, ErrOffsetRegression, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeg(t, vfs.NewMem(), 10, Options{})
			var err error
			for _, offs := range tc.batches {
				if err = s.Append(mkBatch(t, offs...)); err != nil {
					break
				}
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if w, _ := s.Stats(); w.End != tc.wantEnd {
				t.Fatalf("end %d, want %d", w.End, tc.wantEnd)
			}
		})
	}
}

func TestReadBounds(t *testing.T) {
	s := newSeg(t, vfs.NewMem(), 0, Options{IndexIntervalBytes: 64})
	// Batches: [0 1 2] [3] [10 12] [13 14 15] [30]
	layout := [][]uint64{{0, 1, 2}, {3}, {10, 12}, {13, 14, 15}, {30}}
	var sizes []int
	for _, offs := range layout {
		b := mkBatch(t, offs...)
		sizes = append(sizes, len(b))
		appendSync(t, s, b)
	}
	all := math.MaxInt
	tests := []struct {
		name     string
		from     uint64
		maxBytes int
		upTo     uint64
		want     []uint64
		next     uint64
	}{
		{"all", 0, all, math.MaxUint64, []uint64{0, 1, 2, 3, 10, 12, 13, 14, 15, 30}, 31},
		{"mid batch returns whole batch", 1, all, math.MaxUint64, []uint64{0, 1, 2, 3, 10, 12, 13, 14, 15, 30}, 31},
		{"from a hole", 5, all, math.MaxUint64, []uint64{10, 12, 13, 14, 15, 30}, 31},
		{"hole inside batch", 11, all, math.MaxUint64, []uint64{10, 12, 13, 14, 15, 30}, 31},
		{"upTo excludes batch reaching it", 0, all, 15, []uint64{0, 1, 2, 3, 10, 12}, 13},
		{"upTo inside first batch", 0, all, 2, nil, 0},
		{"maxBytes zero gives first batch", 3, 0, math.MaxUint64, []uint64{3}, 4},
		{"maxBytes smaller than first", 0, 1, math.MaxUint64, []uint64{0, 1, 2}, 3},
		{"maxBytes two batches", 0, sizes[0] + sizes[1], math.MaxUint64, []uint64{0, 1, 2, 3}, 4},
		{"maxBytes just short", 0, sizes[0] + sizes[1] - 1, math.MaxUint64, []uint64{0, 1, 2}, 3},
		{"last batch", 30, all, math.MaxUint64, []uint64{30}, 31},
		{"past end", 31, all, math.MaxUint64, nil, 31},
		{"far past end", 1000, all, math.MaxUint64, nil, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf, next, err := s.Read(tc.from, tc.maxBytes, tc.upTo)
			if err != nil {
				t.Fatal(err)
			}
			got := offsetsOf(t, buf)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || next != tc.next {
				t.Fatalf("got %v next %d, want %v next %d", got, next, tc.want, tc.next)
			}
		})
	}
}

func TestReadSeesOnlySyncedData(t *testing.T) {
	s := newSeg(t, vfs.NewMem(), 0, Options{})
	appendSync(t, s, mkBatch(t, 0))
	if err := s.Append(mkBatch(t, 1), mkBatch(t, 2)); err != nil {
		t.Fatal(err)
	}
	buf, next, _ := s.Read(0, math.MaxInt, math.MaxUint64)
	if got := offsetsOf(t, buf); len(got) != 1 || next != 1 {
		t.Fatalf("before sync read %v next %d", got, next)
	}
	if buf, _, _ := s.Read(1, math.MaxInt, math.MaxUint64); buf != nil {
		t.Fatal("read returned unsynced batch")
	}
	_ = s.Sync()
	buf, _, _ = s.Read(0, math.MaxInt, math.MaxUint64)
	if got := offsetsOf(t, buf); len(got) != 3 {
		t.Fatalf("after sync read %v", got)
	}
}

// Reads through the sparse index land on the right batch from any offset.
func TestIndexLookupsAgreeWithScan(t *testing.T) {
	s := newSeg(t, vfs.NewMem(), 0, Options{IndexIntervalBytes: 200})
	var offs []uint64
	for o := uint64(0); o < 600; o += 3 {
		offs = append(offs, o)
		appendSync(t, s, mkBatch(t, o, o+1))
	}
	if n := len(s.IndexEntries()); n < 10 || n > len(offs)/2 {
		t.Fatalf("index has %d entries for %d batches", n, len(offs))
	}
	for from := uint64(0); from < 602; from++ {
		buf, _, err := s.Read(from, 0, math.MaxUint64)
		if err != nil {
			t.Fatal(err)
		}
		got := offsetsOf(t, buf)
		want := (from + 2) / 3 * 3 // first batch start >= from, or the batch holding it
		if from%3 == 1 {
			want = from - 1
		}
		if from >= 599 { // the last batch is [597 598]
			if len(got) != 0 {
				t.Fatalf("from %d: %v", from, got)
			}
			continue
		}
		if len(got) != 2 || got[0] != want {
			t.Fatalf("from %d: got %v, want batch at %d", from, got, want)
		}
	}
}

func TestRecoverTruncatesTornTail(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		mem := vfs.NewMem()
		s := newSeg(t, mem, 0, Options{})
		appendSync(t, s, mkBatch(t, 0, 1), mkBatch(t, 2))
		if err := s.Append(mkBatch(t, 3, 4, 5), mkBatch(t, 6)); err != nil {
			t.Fatal(err)
		}
		crashed := mem.PowerLoss(rand.New(rand.NewPCG(seed, 7)))
		r, rec, err := Recover(crashed, "/seg.log", Options{})
		if err != nil || rec.Damage != nil {
			t.Fatalf("seed %d: %v %v", seed, err, rec.Damage)
		}
		buf, _, _ := r.Read(0, math.MaxInt, math.MaxUint64)
		got := fmt.Sprint(offsetsOf(t, buf))
		if got != "[0 1 2]" && got != "[0 1 2 3 4 5]" && got != "[0 1 2 3 4 5 6]" {
			t.Fatalf("seed %d: recovered %s", seed, got)
		}
		w, _ := r.Stats()
		if size, _ := fileSize(crashed, "/seg.log"); size != FileHeaderSize+w.Bytes {
			t.Fatalf("seed %d: file %d bytes, stats %d", seed, size, w.Bytes)
		}
		// Recovery made the survivors durable: a second power loss keeps them.
		again, _, err := Recover(crashed.PowerLoss(nil), "/seg.log", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if w2, _ := again.Stats(); w2 != w {
			t.Fatalf("seed %d: stats changed across second crash: %+v vs %+v", seed, w2, w)
		}
	}
}

func fileSize(fs vfs.FS, name string) (int64, error) {
	st, err := fs.Stat(name)
	return st.Size, err
}

// flipByte changes one byte of a file in place and syncs it.
func flipByte(t *testing.T, fs vfs.FS, name string, pos int64) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
}

func TestRecoverReportsDamageInsteadOfTruncating(t *testing.T) {
	mem := vfs.NewMem()
	s := newSeg(t, mem, 0, Options{})
	b0, b1, b2 := mkBatch(t, 0), mkBatch(t, 1), mkBatch(t, 2)
	appendSync(t, s, b0, b1, b2)
	_ = s.Close()
	flipByte(t, mem, "/seg.log", int64(FileHeaderSize+len(b0)+HeaderSize+1))
	size, _ := fileSize(mem, "/seg.log")
	r, rec, err := Recover(mem, "/seg.log", Options{})
	if err != nil || !errors.Is(rec.Damage, ErrCorrupt) || rec.TruncatedBytes != 0 {
		t.Fatalf("err %v, recovery %+v", err, rec)
	}
	if after, _ := fileSize(mem, "/seg.log"); after != size {
		t.Fatalf("damaged file changed size %d -> %d", size, after)
	}
	if err := r.Append(mkBatch(t, 3)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("append to damaged segment: %v", err)
	}
	buf, _, _ := r.Read(0, math.MaxInt, math.MaxUint64)
	if got := offsetsOf(t, buf); len(got) != 1 {
		t.Fatalf("read of damaged segment %v", got)
	}
}

func TestRecoverTornCreate(t *testing.T) {
	mem := vfs.NewMem()
	f, _ := mem.OpenFile("/seg.log", os.O_CREATE|os.O_RDWR, 0o644)
	_, _ = f.Write(make([]byte, 10))
	if _, _, err := Recover(mem, "/seg.log", Options{}); !errors.Is(err, ErrTornCreate) {
		t.Fatalf("err %v", err)
	}
}

func sealSeg(t *testing.T, fs vfs.FS, s *Segment, end uint64, idx bool) Footer {
	t.Helper()
	ft, err := s.Footer(end, 3)
	if err != nil {
		t.Fatal(err)
	}
	if idx {
		if err := s.WriteIndex(fs, "/seg.idx"); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFooter(fs, "/seg.seal", s.ID(), ft); err != nil {
		t.Fatal(err)
	}
	s.MarkSealed(end)
	return ft
}

func TestSealAndReopen(t *testing.T) {
	for _, idx := range []bool{true, false} {
		t.Run(fmt.Sprintf("idx=%v", idx), func(t *testing.T) {
			mem := vfs.NewMem()
			s := newSeg(t, mem, 5, Options{IndexIntervalBytes: 100})
			for o := uint64(5); o < 100; o += 5 {
				appendSync(t, s, mkBatch(t, o, o+2))
			}
			if _, err := s.Footer(90, 0); !errors.Is(err, ErrOffsetRegression) {
				t.Fatalf("footer below end: %v", err)
			}
			ft := sealSeg(t, mem, s, 120, idx)
			if err := s.Append(mkBatch(t, 200)); !errors.Is(err, ErrSealed) {
				t.Fatalf("append after seal: %v", err)
			}
			id, got, err := ReadFooter(mem, "/seg.seal")
			if err != nil || id != 1 || got != ft || got.End != 120 || got.Records != 38 || got.Generation != 3 {
				t.Fatalf("footer %+v %v", got, err)
			}
			idxPath := ""
			if idx {
				idxPath = "/seg.idx"
			}
			r, err := OpenSealed(mem, "/seg.log", idxPath, ft, Options{IndexIntervalBytes: 100})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(r.IndexEntries()) != fmt.Sprint(s.IndexEntries()) {
				t.Fatal("reopened index differs")
			}
			if err := r.Verify(&ft); err != nil {
				t.Fatal(err)
			}
			buf, next, err := r.Read(96, math.MaxInt, math.MaxUint64)
			if got := offsetsOf(t, buf); err != nil || fmt.Sprint(got) != "[95 97]" || next != 98 {
				t.Fatalf("read %v next %d err %v", got, next, err)
			}
			if buf, next, _ := r.Read(110, math.MaxInt, math.MaxUint64); buf != nil || next != 110 {
				t.Fatal("read in the explicit-end gap returned data")
			}
		})
	}
}

func TestSealedCorruptionDetected(t *testing.T) {
	mem := vfs.NewMem()
	s := newSeg(t, mem, 0, Options{})
	b := mkBatch(t, 0, 1)
	appendSync(t, s, b, mkBatch(t, 2))
	ft := sealSeg(t, mem, s, 3, true)
	_ = s.Close()
	flipByte(t, mem, "/seg.log", int64(FileHeaderSize+len(b)+HeaderSize+2))
	r, err := OpenSealed(mem, "/seg.log", "/seg.idx", ft, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Read(2, math.MaxInt, math.MaxUint64); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read: %v", err)
	}
	if err := r.Verify(&ft); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify: %v", err)
	}
	// Reads that do not touch the damaged batch still work.
	buf, _, err := r.Read(0, 0, math.MaxUint64)
	if err != nil || !bytes.Equal(buf, b) {
		t.Fatalf("undamaged read: %v", err)
	}
	// A wrong length is caught at open.
	ft.Bytes++
	if _, err := OpenSealed(mem, "/seg.log", "", ft, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("length mismatch: %v", err)
	}
}

func TestIndexFileRejectsNonsense(t *testing.T) {
	x := NewIndex(10)
	x.Add(BatchHeader{BaseOffset: 0}, FileHeaderSize)
	x.Add(BatchHeader{BaseOffset: 5}, 100)
	b, _ := x.MarshalBinary()
	if _, ok := parseIndex(b, 10, 200); !ok {
		t.Fatal("good index rejected")
	}
	if _, ok := parseIndex(b, 10, 100); ok {
		t.Fatal("index past file end accepted")
	}
	b[len(b)-5] ^= 1
	if _, ok := parseIndex(b, 10, 200); ok {
		t.Fatal("bad crc accepted")
	}
}

// TestRecoverEndPastDamage: with damage followed by valid batches, and
// more damage after those, Recovery reports the end of the last valid
// batch in the file, so nothing after the segment reuses its offsets.
func TestRecoverEndPastDamage(t *testing.T) {
	mem := vfs.NewMem()
	s, err := Create(mem, "/seg.log", 1, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	at := int64(FileHeaderSize)
	for i, offs := range [][]uint64{{0}, {1, 2}, {3}, {4, 5, 6}, {7}} {
		b := mkBatch(t, offs...)
		if err := s.Append(b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		pos = append(pos, at)
		at += int64(len(b))
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	flipByte(t, mem, "/seg.log", pos[1]+HeaderSize+1) // batch {1,2}
	flipByte(t, mem, "/seg.log", pos[3]+HeaderSize+1) // batch {4,5,6}
	_, rec, err := Recover(mem, "/seg.log", Options{})
	if err != nil || rec.Damage == nil {
		t.Fatalf("err %v, recovery %+v", err, rec)
	}
	if rec.EndPastDamage != 8 {
		t.Fatalf("EndPastDamage %d, want 8", rec.EndPastDamage)
	}
}

// TestRecoverTornHeaderIsTornCreate: a file no longer than its header whose
// header is torn (not all zeros) cannot hold a batch: it is an interrupted
// Create, not damage.
func TestRecoverTornHeaderIsTornCreate(t *testing.T) {
	mem := vfs.NewMem()
	f, _ := mem.OpenFile("/seg.log", os.O_CREATE|os.O_RDWR, 0o644)
	_, _ = f.Write(append([]byte("MLOG\x01\x00\x00\x00\x01"), make([]byte, FileHeaderSize-9)...))
	if _, _, err := Recover(mem, "/seg.log", Options{}); !errors.Is(err, ErrTornCreate) {
		t.Fatalf("err %v", err)
	}
}
