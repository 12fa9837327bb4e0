package segment

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// countFS counts the ReadAt calls, and the bytes they ask for, on the
// files it opens.
type countFS struct {
	vfs.FS
	reads, bytes atomic.Int64
}

type countFile struct {
	vfs.File
	fs *countFS
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &countFile{File: f, fs: c}, nil
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.reads.Add(1)
	f.fs.bytes.Add(int64(len(p)))
	return f.File.ReadAt(p, off)
}

// bigBatch encodes n records from base, each with a value of size bytes
// that does not compress, so the batch is about n*size bytes.
func bigBatch(t *testing.T, base uint64, n, size int) []byte {
	t.Helper()
	recs := make([]Record, n)
	for i := range recs {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte((uint64(i)*31 + uint64(j)*7 + base) % 251)
		}
		recs[i] = Record{Offset: base + uint64(i), Timestamp: int64(base) + int64(i), Value: v}
	}
	b, err := EncodeBatchAt(nil, recs, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readCounted is a Read that also says how many preads it made and how
// many bytes they asked for.
func readCounted(t *testing.T, fs *countFS, s *Segment, from uint64, maxBytes int) ([]byte, uint64, int64, int64) {
	t.Helper()
	r0, b0 := fs.reads.Load(), fs.bytes.Load()
	buf, next, err := s.Read(from, maxBytes, ^uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	return buf, next, fs.reads.Load() - r0, fs.bytes.Load() - b0
}

// A page over many ranges asks each range for a share far smaller than
// the producer's batches: a first batch larger than the request is still
// returned whole, read once, with one pread (its size comes from the
// index), and nothing past it is returned.
func TestReadBatchLargerThanRequestOnePread(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	small := mkBatch(t, 0, 1, 2)
	big1 := bigBatch(t, 3, 200, 1000) // about 200 KiB
	big2 := bigBatch(t, 203, 150, 1000)
	tail := mkBatch(t, 353, 354)
	appendSync(t, s, small, big1, big2, tail)
	const share = 16 << 10
	if len(big1) <= 2*share || len(big1) > maxReadAhead {
		t.Fatalf("test batch of %d bytes does not exercise the case", len(big1))
	}

	for _, tc := range []struct {
		name string
		from uint64
		want []byte
		next uint64
	}{
		{"at its base", 3, big1, 203},
		{"inside it", 150, big1, 203},
		{"the next one", 203, big2, 353},
	} {
		buf, next, reads, read := readCounted(t, fs, s, tc.from, share)
		if !bytes.Equal(buf, tc.want) || next != tc.next {
			t.Fatalf("%s: got %d bytes, next %d; want the %d-byte batch, next %d", tc.name, len(buf), next, len(tc.want), tc.next)
		}
		if reads != 1 {
			t.Fatalf("%s: %d preads, want 1", tc.name, reads)
		}
		if bound := int64(len(tc.want) + s.interval + 2*HeaderSize + share); read > bound {
			t.Fatalf("%s: read %d bytes for a %d-byte batch", tc.name, read, len(tc.want))
		}
	}

	// The last batch of the segment has no index entry after it: the
	// durable end bounds it instead.
	buf, next, reads, _ := readCounted(t, fs, s, 353, 1)
	if !bytes.Equal(buf, tail) || next != 355 || reads != 1 {
		t.Fatalf("tail: %d bytes, next %d, %d preads", len(buf), next, reads)
	}

	// A request that covers more than the first batch gets whole batches
	// within it, never a part of one.
	buf, next, _, _ = readCounted(t, fs, s, 0, len(small)+len(big1)+len(big2)/2)
	if want := append(append([]byte{}, small...), big1...); !bytes.Equal(buf, want) || next != 203 {
		t.Fatalf("bounded read: %d bytes, next %d; want %d bytes, next 203", len(buf), next, len(want))
	}
}

// A batch larger than the read-ahead bound takes two preads, the second
// for the rest of it only: no byte of it is read twice.
func TestReadBatchLargerThanReadAheadReadOnce(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	small := mkBatch(t, 0)
	huge := bigBatch(t, 1, 600, 1000) // about 600 KiB
	after := mkBatch(t, 601)
	appendSync(t, s, small, huge, after)
	if len(huge) <= maxReadAhead+s.interval+2*HeaderSize {
		t.Fatalf("test batch of %d bytes does not exercise the case", len(huge))
	}
	for _, from := range []uint64{1, 300, 600} {
		buf, next, reads, read := readCounted(t, fs, s, from, 4<<10)
		if !bytes.Equal(buf, huge) || next != 601 {
			t.Fatalf("from %d: got %d bytes, next %d; want the %d-byte batch, next 601", from, len(buf), next, len(huge))
		}
		// The read starts at the index point, the small batch before it.
		if want := int64(len(small) + len(huge)); reads != 2 || read != want {
			t.Fatalf("from %d: %d preads of %d bytes, want 2 of %d in all", from, reads, read, want)
		}
	}
}

// A reader that took whole batches stands at a batch's base; when that
// batch is an indexed one, the read starts there and has no headers to
// walk, so it asks the file for what it returns (up to the batch that
// would not fit) and not an interval more. From a base the index does not
// hold, the walk's allowance is read as before, and the answer is the
// same.
func TestReadFromIndexedBatchReadsNoWalk(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	var batches [][]byte
	for i := range 12 {
		batches = append(batches, bigBatch(t, uint64(i*10), 10, 600)) // about 6 KiB each, every one indexed
	}
	appendSync(t, s, batches...)
	if len(batches[0]) < s.interval {
		t.Fatalf("test batches of %d bytes are not each indexed (interval %d)", len(batches[0]), s.interval)
	}
	maxBytes := 3*len(batches[0]) + len(batches[0])/2
	buf, next, reads, read := readCounted(t, fs, s, 40, maxBytes)
	want := bytes.Join(batches[4:7], nil)
	if !bytes.Equal(buf, want) || next != 70 {
		t.Fatalf("got %d bytes, next %d; want batches 4-6 (%d bytes), next 70", len(buf), next, len(want))
	}
	if reads != 1 || read > int64(maxBytes) {
		t.Fatalf("%d preads of %d bytes for a read of at most %d", reads, read, maxBytes)
	}

	// From inside batch 4 the read walks from the indexed batch, and
	// still gets whole batches from 4 on.
	buf, next, reads, read = readCounted(t, fs, s, 45, maxBytes)
	if !bytes.Equal(buf, want) || next != 70 || reads != 1 {
		t.Fatalf("inside: got %d bytes, next %d, %d preads", len(buf), next, reads)
	}
	if read <= int64(maxBytes) {
		t.Fatalf("inside: read %d bytes, no room for the walk", read)
	}
}

// A producer's batch of 256 KiB of records is a little over the
// read-ahead bound with its framing. A page's reader that left it for
// want of room reads it next from its base: the read before stopped at
// it and kept its header, so this read takes the batch in one pread of
// exactly its bytes, whatever share of a page was asked. The first form
// read the bound, copied it into a buffer of the batch's size and read
// the last bytes with a second pread. A read that returns nothing,
// because upTo falls inside that batch, and a read whose first batch is
// unknown read no more than the bound, as before: the index alone does
// not say how much of what lies up to its next entry a read returns.
func TestReadFirstBatchOverReadAheadOnePread(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	a, b := bigBatch(t, 0, 80, 1000), bigBatch(t, 80, 80, 1000) // about 80 KiB each
	over := bigBatch(t, 160, 262, 1000)                         // a little over 256 KiB
	tiny := mkBatch(t, 422)                                     // indexed, then
	big := bigBatch(t, 423, 400, 1000)                          // too close to it to be
	tail := mkBatch(t, 823)
	appendSync(t, s, a, b, over, tiny, big, tail)
	if len(over) <= maxReadAhead || len(tiny) >= s.interval || len(big) <= maxReadAhead {
		t.Fatalf("test batches of %d, %d and %d bytes do not exercise the bound", len(over), len(tiny), len(big))
	}
	ab := append(append([]byte{}, a...), b...)

	// Unknown (no read stopped at it yet), it is read as before.
	buf, next, _, _ := readCounted(t, fs, s, 160, 64<<10)
	if !bytes.Equal(buf, over) || next != 422 {
		t.Fatalf("unknown: got %d bytes, next %d; want the %d-byte batch, next 422", len(buf), next, len(over))
	}

	for _, maxBytes := range []int{64 << 10, maxReadAhead} {
		// A read that leaves over for want of room keeps its header.
		buf, next, _, _ = readCounted(t, fs, s, 0, len(ab)+(10<<10))
		if !bytes.Equal(buf, ab) || next != 160 {
			t.Fatalf("before: got %d bytes, next %d; want batches a and b", len(buf), next)
		}
		buf, next, reads, read := readCounted(t, fs, s, 160, maxBytes)
		if !bytes.Equal(buf, over) || next != 422 {
			t.Fatalf("asked %d: got %d bytes, next %d; want the %d-byte batch, next 422", maxBytes, len(buf), next, len(over))
		}
		if reads != 1 || read != int64(len(over)) {
			t.Fatalf("asked %d: %d preads of %d bytes for a %d-byte batch, want one of its bytes", maxBytes, reads, read, len(over))
		}
	}

	// Known but not returned: upTo falls inside it.
	readCounted(t, fs, s, 0, len(ab)+(10<<10))
	r0, b0 := fs.reads.Load(), fs.bytes.Load()
	buf, next, err := s.Read(160, 64<<10, 300)
	if err != nil || len(buf) != 0 || next != 160 {
		t.Fatalf("upTo inside: got %d bytes, next %d, %v; want nothing", len(buf), next, err)
	}
	if read := fs.bytes.Load() - b0; read > maxReadAhead {
		t.Fatalf("upTo inside: %d preads of %d bytes to return nothing, want at most %d", fs.reads.Load()-r0, read, maxReadAhead)
	}

	// A tiny indexed batch with a large one up to the next index entry: a
	// read of the tiny one is not sized by the large one.
	buf, next, _, read := readCounted(t, fs, s, 422, 1)
	if !bytes.Equal(buf, tiny) || next != 423 || read > maxReadAhead {
		t.Fatalf("tiny: got %d bytes, next %d, read %d; want the tiny batch, at most %d read", len(buf), next, read, maxReadAhead)
	}
}

// A read from an indexed batch ends on a batch boundary the index knows:
// it asks the file for the whole batches it returns and the next batch's
// header, not for the start of that batch too, which it would only leave.
// Up to the durable end, the end is such a boundary (with no header past
// it). A first batch larger than the
// request is still read whole, and a read that would save less than
// TrimAtLeast of a batch reads its whole size, as before.
func TestReadFromIndexedBatchReadsOnlyWholeBatches(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	var batches [][]byte
	for i := range 8 {
		batches = append(batches, bigBatch(t, uint64(i*10), 10, 8000+2000*(i%3))) // 80-120 KiB, every one indexed
	}
	appendSync(t, s, batches...)
	small := TrimAtLeast / 2
	for _, tc := range []struct {
		name     string
		from     uint64
		maxBytes int
		want     [][]byte
		next     uint64
		read     int // what the file is asked for; 0: what is returned
	}{
		{"two and a half batches", 20, len(batches[2]) + len(batches[3]) + len(batches[4])/2, batches[2:4], 40, len(batches[2]) + len(batches[3]) + HeaderSize},
		{"exactly two", 20, len(batches[2]) + len(batches[3]), batches[2:4], 40, 0},
		{"past the durable end", 60, 1 << 20, batches[6:], 80, 0},
		{"a first batch larger than asked", 30, 1 << 10, batches[3:4], 40, 0},
		{"two batches and a little", 20, len(batches[2]) + len(batches[3]) + small, batches[2:4], 40, len(batches[2]) + len(batches[3]) + small},
	} {
		buf, next, reads, read := readCounted(t, fs, s, tc.from, tc.maxBytes)
		want := bytes.Join(tc.want, nil)
		if !bytes.Equal(buf, want) || next != tc.next {
			t.Fatalf("%s: got %d bytes, next %d; want %d bytes, next %d", tc.name, len(buf), next, len(want), tc.next)
		}
		asked := int64(tc.read)
		if asked == 0 {
			asked = int64(len(want))
		}
		if reads != 1 || read != asked {
			t.Fatalf("%s: %d preads of %d bytes to return %d, want one of %d", tc.name, reads, read, len(want), asked)
		}
	}
}

// BatchHeaderAt answers the header of a durable batch the index places at
// an offset, reading only that header, and nothing for an offset inside a
// batch, past the durable end, or at a batch the index skipped.
func TestBatchHeaderAt(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	big0, big1 := bigBatch(t, 0, 10, 1000), bigBatch(t, 10, 10, 1000)
	small1, small2 := mkBatch(t, 20), mkBatch(t, 21) // the second follows the first too closely to be indexed
	appendSync(t, s, big0, big1, small1, small2)
	for _, tc := range []struct {
		from uint64
		size int
		ok   bool
	}{{0, len(big0), true}, {10, len(big1), true}, {20, len(small1), true}, {21, 0, false}, {5, 0, false}, {22, 0, false}} {
		r0, b0 := fs.reads.Load(), fs.bytes.Load()
		h, ok := s.BatchHeaderAt(tc.from)
		if ok != tc.ok || ok && (h.Length != tc.size || h.BaseOffset != tc.from) {
			t.Fatalf("from %d: %+v, %v; want size %d, %v", tc.from, h, ok, tc.size, tc.ok)
		}
		if reads, read := fs.reads.Load()-r0, fs.bytes.Load()-b0; ok && (reads != 1 || read != HeaderSize) {
			t.Fatalf("from %d: %d preads of %d bytes for a header", tc.from, reads, read)
		}
	}
}

// A read that stops at a batch for want of room, having read its header,
// keeps that header: BatchHeaderAt then answers it without a read. It
// answers for that batch only, and reads again after a cut, which may
// have put other batches at the same offsets and positions.
func TestBatchHeaderAtAnswersTheHeaderTheLastReadStoppedAt(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	var batches [][]byte
	for i := range 4 {
		batches = append(batches, bigBatch(t, uint64(i*10), 10, 8000)) // about 80 KiB, every one indexed
	}
	appendSync(t, s, batches...)
	headerReads := func(from uint64) (BatchHeader, bool, int64) {
		t.Helper()
		r0 := fs.reads.Load()
		h, ok := s.BatchHeaderAt(from)
		return h, ok, fs.reads.Load() - r0
	}

	// Ended early on a boundary: the read took batch 2's header along.
	buf, next, reads, _ := readCounted(t, fs, s, 10, len(batches[1])+len(batches[2])/2)
	if !bytes.Equal(buf, batches[1]) || next != 20 || reads != 1 {
		t.Fatalf("got %d bytes, next %d, %d preads; want batch 1 in one pread", len(buf), next, reads)
	}
	if h, ok, n := headerReads(20); !ok || h.Length != len(batches[2]) || h.BaseOffset != 20 || n != 0 {
		t.Fatalf("batch 2's header after a read that stopped at it: %+v, %v, %d preads; want it with none", h, ok, n)
	}
	if _, ok, n := headerReads(30); !ok || n != 1 {
		t.Fatalf("batch 3's header, which no read stopped at: ok %v after %d preads, want one", ok, n)
	}

	// Cut back to batch 1 and written again with other batches from 20:
	// batch 2's old header must not answer for the new one.
	c, err := s.PlanCut(20)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _ = readCounted(t, fs, s, 10, len(batches[1])+len(batches[2])/2); s.peeked.Load() == nil {
		t.Fatal("the read before the cut kept no header: the cut has nothing to clear")
	}
	if err := s.ApplyCut(c); err != nil {
		t.Fatal(err)
	}
	again := bigBatch(t, 20, 10, 9000) // larger: the old header would pass the durable end check
	appendSync(t, s, again)
	if h, ok, n := headerReads(20); !ok || h.Length != len(again) || n != 1 {
		t.Fatalf("after the cut: %+v, %v, %d preads; want the new batch's header (%d bytes), read", h, ok, n, len(again))
	}
}

// A read ended early takes the next batch's header along, but that batch
// is not what it was asked for: damage in that header leaves the read
// its good batches, is kept as no header, and is reported by the read that
// asks for the damaged batch.
func TestDamageInThePeekedHeaderIsLeftForTheReadOfItsBatch(t *testing.T) {
	mem := vfs.NewMem()
	fs := &countFS{FS: mem}
	s := newSeg(t, fs, 0, Options{})
	var batches [][]byte
	for i := range 4 {
		batches = append(batches, bigBatch(t, uint64(i*10), 10, 8000)) // about 80 KiB, every one indexed
	}
	appendSync(t, s, batches...)
	flipByte(t, mem, "/seg.log", int64(FileHeaderSize+len(batches[0])+len(batches[1]))) // batch 2's magic

	buf, next, reads, read := readCounted(t, fs, s, 10, len(batches[1])+len(batches[2])/2)
	if !bytes.Equal(buf, batches[1]) || next != 20 {
		t.Fatalf("got %d bytes, next %d; want batch 1, next 20", len(buf), next)
	}
	if reads != 1 || read != int64(len(batches[1])+HeaderSize) {
		t.Fatalf("%d preads of %d bytes: the read did not take the next header along", reads, read)
	}
	if p := s.peeked.Load(); p != nil {
		t.Fatalf("a damaged header was kept: %+v", p)
	}
	if _, _, err := s.Read(20, len(batches[2]), ^uint64(0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("the read of the damaged batch: %v, want ErrCorrupt", err)
	}
}

// An index entry inside the first batch (a damaged .idx that passed its
// checks) does not shorten a read below that batch: it is returned whole,
// as before reads ended on index boundaries.
func TestReadReturnsTheFirstBatchWholeWhateverTheIndexSays(t *testing.T) {
	fs := &countFS{FS: vfs.NewMem()}
	s := newSeg(t, fs, 0, Options{})
	first, second := bigBatch(t, 0, 10, 10000), bigBatch(t, 10, 10, 10000) // about 100 KB each
	appendSync(t, s, first, second)
	s.mu.Lock()
	e := s.idx.entries
	if len(e) != 2 || e[0].Offset != 0 || e[1].Offset != 10 {
		s.mu.Unlock()
		t.Fatalf("index %+v: the test expects an entry per batch", e)
	}
	s.idx.entries = []IndexEntry{e[0], {Offset: 5, Pos: e[0].Pos + 100}, e[1]}
	s.mu.Unlock()
	// Asked for more than TrimAtLeast past the false entry, and less than
	// the first batch.
	buf, next, _, _ := readCounted(t, fs, s, 0, 100+2*TrimAtLeast)
	if 100+2*TrimAtLeast >= len(first) {
		t.Fatalf("a first batch of %d bytes does not exercise the case", len(first))
	}
	if !bytes.Equal(buf, first) || next != 10 {
		t.Fatalf("got %d bytes, next %d; want the first batch (%d bytes), next 10", len(buf), next, len(first))
	}
}
