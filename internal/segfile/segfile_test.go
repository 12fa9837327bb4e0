package segfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// written is a segment file the store's own code wrote, with what went
// into it.
type written struct {
	data   []byte
	id     uint64
	footer segment.Footer
	pos    []int64 // file position of each batch
	recs   []batch.Record
}

// writeSegment writes nBatches batches of perBatch records through
// segment.Create, Append, Sync and Footer, as a node does, and returns
// the file's bytes.
func writeSegment(t *testing.T, nBatches, perBatch int) written {
	t.Helper()
	path := filepath.Join(t.TempDir(), "00000000000000000007.log")
	const id, base = 7, 100
	s, err := segment.Create(vfs.OS(), path, id, base, segment.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := written{id: id}
	off := uint64(base)
	pos := int64(FileHeaderSize)
	for b := range nBatches {
		var recs []batch.Record
		for i := range perBatch {
			r := batch.Record{
				Timestamp: 1_700_000_000_000 + int64(b*perBatch+i),
				Key:       fmt.Appendf(nil, "key-%d", i%3),
				Value:     fmt.Appendf(nil, "value %d.%d", b, i),
			}
			if i == 1 {
				r.Headers = []batch.Header{{Key: []byte("source"), Value: []byte("test")}}
			}
			recs = append(recs, r)
		}
		codec := batch.CodecNone
		if b%2 == 1 {
			codec = batch.CodecZstd
		}
		enc, err := batch.EncodeBatch(nil, off, recs, codec)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(enc); err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			recs[i].Offset = off + uint64(i)
		}
		w.recs = append(w.recs, recs...)
		w.pos = append(w.pos, pos)
		pos += int64(len(enc))
		off += uint64(perBatch)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if w.footer, err = s.Footer(off, 1); err != nil {
		t.Fatal(err)
	}
	if w.data, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	return w
}

// collect scans data and returns the summary and every record visited,
// copied.
func collect(t *testing.T, data []byte, o Options) (Summary, []batch.Record) {
	t.Helper()
	var got []batch.Record
	s, err := Scan(context.Background(), bytes.NewReader(data), int64(len(data)), o, func(b Batch) error {
		return b.Records(func(r *batch.Record) error {
			got = append(got, batch.Record{Offset: r.Offset, Timestamp: r.Timestamp, Expiry: r.Expiry,
				Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Headers: cloneHeaders(r.Headers)})
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, got
}

func cloneHeaders(hs []batch.Header) []batch.Header {
	var out []batch.Header
	for _, h := range hs {
		out = append(out, batch.Header{Key: bytes.Clone(h.Key), Value: bytes.Clone(h.Value)})
	}
	return out
}

func sameRecords(t *testing.T, got, want []batch.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || g.Timestamp != w.Timestamp || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) ||
			fmt.Sprint(g.Headers) != fmt.Sprint(w.Headers) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestScanWholeSegment(t *testing.T) {
	w := writeSegment(t, 6, 5)
	s, got := collect(t, w.data, Options{})
	if !s.Clean() {
		t.Fatalf("clean file reported damage: %+v", s)
	}
	if s.Header.ID != w.id || s.Header.Base != 100 {
		t.Errorf("file header %+v", s.Header)
	}
	if s.Batches != 6 || s.Records != 30 || s.FirstOffset != 100 || s.LastOffset != 129 {
		t.Errorf("summary %+v", s)
	}
	if s.Bytes != int64(len(w.data))-FileHeaderSize {
		t.Errorf("bytes %d, file holds %d after its header", s.Bytes, len(w.data)-FileHeaderSize)
	}
	if s.MinTimestamp != 1_700_000_000_000 || s.MaxTimestamp != 1_700_000_000_029 {
		t.Errorf("timestamps %d..%d", s.MinTimestamp, s.MaxTimestamp)
	}
	sameRecords(t, got, w.recs)
	hash, err := ContentHash(context.Background(), bytes.NewReader(w.data), int64(len(w.data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckFooter(w.id, w.footer, hash); err != nil {
		t.Errorf("footer of the store disagrees: %v", err)
	}
	if err := s.CheckFooter(w.id+1, w.footer, hash+1); err == nil {
		t.Error("a footer of another segment and hash agrees")
	}
}

func TestScanCorruptByteInTheMiddle(t *testing.T) {
	w := writeSegment(t, 6, 5)
	data := bytes.Clone(w.data)
	bad := w.pos[2] + batch.HeaderSize + 3 // inside batch 2's records
	data[bad] ^= 0xff

	s, got := collect(t, data, Options{})
	if !s.Stopped || s.DamagedSpans != 1 || s.Damaged[0].Start != w.pos[2] || s.Damaged[0].End != int64(len(data)) {
		t.Fatalf("stopped %v, damage %+v; want a stop at byte %d", s.Stopped, s.Damaged, w.pos[2])
	}
	if !strings.Contains(s.Damaged[0].Reason, "crc") {
		t.Errorf("reason %q does not say crc", s.Damaged[0].Reason)
	}
	sameRecords(t, got, w.recs[:10])

	s, got = collect(t, data, Options{SkipDamaged: true})
	if s.Stopped || s.DamagedSpans != 1 || s.Damaged[0].Start != w.pos[2] || s.Damaged[0].End != w.pos[3] {
		t.Fatalf("with skip: stopped %v, damage %+v; want bytes %d-%d", s.Stopped, s.Damaged, w.pos[2], w.pos[3])
	}
	if s.Batches != 5 || s.Records != 25 {
		t.Errorf("with skip: %d batches, %d records", s.Batches, s.Records)
	}
	sameRecords(t, got, append(append([]batch.Record(nil), w.recs[:10]...), w.recs[15:]...))
}

func TestScanTruncated(t *testing.T) {
	w := writeSegment(t, 4, 5)
	cut := w.pos[3] + 20
	for _, skip := range []bool{false, true} {
		s, got := collect(t, w.data[:cut], Options{SkipDamaged: skip})
		if s.DamagedSpans != 1 || s.Damaged[0].Start != w.pos[3] || s.Damaged[0].End != cut {
			t.Fatalf("skip %v: damage %+v, want bytes %d-%d", skip, s.Damaged, w.pos[3], cut)
		}
		sameRecords(t, got, w.recs[:15])
	}
	// Cut inside the batch, past its header: the header's length says more
	// than the file holds.
	cut = w.pos[3] + batch.HeaderSize + 4
	s, _ := collect(t, w.data[:cut], Options{})
	if s.DamagedSpans != 1 || !strings.Contains(s.Damaged[0].Reason, "left in the file") {
		t.Fatalf("damage %+v", s.Damaged)
	}
}

func TestScanRandomBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 5, FileHeaderSize, 4096, 3 << 20} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		// A magic byte here and there gives the forward search work.
		for i := 0; i+1 < n; i += 997 {
			data[i], data[i+1] = batch.Magic, batch.Version
		}
		for _, skip := range []bool{false, true} {
			s, got := collect(t, data, Options{SkipDamaged: skip})
			if s.HeaderErr == nil || len(got) != 0 || s.Clean() {
				t.Fatalf("%d random bytes: header err %v, %d records, clean %v", n, s.HeaderErr, len(got), s.Clean())
			}
			if n > FileHeaderSize && (s.DamagedSpans != 1 || s.Damaged[0].Start != FileHeaderSize || s.Damaged[0].End != int64(n)) {
				t.Fatalf("%d random bytes: damage %+v", n, s.Damaged)
			}
		}
	}
}

// readerAt records the largest read asked of it.
type readerAt struct {
	r       *bytes.Reader
	mu      sync.Mutex
	largest int
}

func (r *readerAt) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.largest = max(r.largest, len(p))
	r.mu.Unlock()
	return r.r.ReadAt(p, off)
}

func TestScanHugeDeclaredLength(t *testing.T) {
	w := writeSegment(t, 3, 4)
	for _, length := range []uint32{batch.MaxBatchSize, 0xffffffff} {
		data := bytes.Clone(w.data)
		binary.LittleEndian.PutUint32(data[w.pos[1]+14:], length) // batch length field
		for _, skip := range []bool{false, true} {
			r := &readerAt{r: bytes.NewReader(data)}
			s, err := Scan(context.Background(), r, int64(len(data)), Options{SkipDamaged: skip}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.DamagedSpans != 1 || s.Damaged[0].Start != w.pos[1] {
				t.Fatalf("length %d: damage %+v", length, s.Damaged)
			}
			if skip && (s.Damaged[0].End != w.pos[2] || s.Batches != 2) {
				t.Fatalf("length %d with skip: damage %+v, %d batches", length, s.Damaged, s.Batches)
			}
			if r.largest > len(data) {
				t.Fatalf("length %d: read %d bytes at once from a file of %d", length, r.largest, len(data))
			}
		}
	}
}

func TestScanBadFileHeaderStillReadsBatches(t *testing.T) {
	w := writeSegment(t, 2, 3)
	data := bytes.Clone(w.data)
	data[9] ^= 1 // segment id, under the header CRC
	s, got := collect(t, data, Options{})
	if s.HeaderErr == nil || s.Clean() {
		t.Fatalf("a damaged file header went unnoticed: %+v", s)
	}
	sameRecords(t, got, w.recs)
}

func TestScanOffsetsGoingBack(t *testing.T) {
	w := writeSegment(t, 3, 2)
	// The third batch again, after the others: its offsets repeat.
	data := append(bytes.Clone(w.data), w.data[w.pos[2]:]...)
	s, got := collect(t, data, Options{SkipDamaged: true})
	if s.DamagedSpans != 1 || !strings.Contains(s.Damaged[0].Reason, "below") {
		t.Fatalf("damage %+v", s.Damaged)
	}
	sameRecords(t, got, w.recs)
}

func TestScanStopsWithContext(t *testing.T) {
	w := writeSegment(t, 2, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Scan(ctx, bytes.NewReader(w.data), int64(len(w.data)), Options{}, nil); err == nil {
		t.Fatal("a cancelled scan went on")
	}
}

// TestScanMaxExpiry: max expiry is 0 as soon as one record never expires,
// as a seal footer says, whether the walk ended at the end or at damage.
func TestScanMaxExpiry(t *testing.T) {
	w := writeSegment(t, 1, 2)
	exp := []batch.Record{{Timestamp: 5, Expiry: 900, Value: []byte("a")}, {Timestamp: 6, Expiry: 700, Value: []byte("b")}}
	enc, err := batch.EncodeBatch(nil, w.footer.End, exp, batch.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	header := w.data[:FileHeaderSize]
	onlyExpiring := append(append(bytes.Clone(header), enc...), 0xde, 0xad)
	if s, _ := collect(t, onlyExpiring, Options{}); s.MaxExpiry != 900 || !s.Stopped {
		t.Errorf("expiring records only: max expiry %d, stopped %v", s.MaxExpiry, s.Stopped)
	}
	mixed := append(append(bytes.Clone(w.data), enc...), 0xde, 0xad)
	if s, _ := collect(t, mixed, Options{}); s.MaxExpiry != 0 || !s.Stopped || s.Records != 4 {
		t.Errorf("with records that never expire: max expiry %d, stopped %v, %d records", s.MaxExpiry, s.Stopped, s.Records)
	}
}
