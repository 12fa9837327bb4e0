package segfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/malachi-log/malachi/internal/batch"
)

// countingReader serves data and refuses to read more than budget bytes
// in all, so that a walk that rereads the file without bound fails fast
// instead of running for hours.
type countingReader struct {
	data   []byte
	budget int64
	read   atomic.Int64
}

var errReadBudget = errors.New("read budget spent")

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	if c.read.Add(int64(len(p))) > c.budget {
		return 0, fmt.Errorf("%w: %d bytes read of a %d-byte file", errReadBudget, c.read.Load(), len(c.data))
	}
	return bytes.NewReader(c.data).ReadAt(p, off)
}

// fileHeader returns a valid .log file header for segment id at base.
func fileHeader(id, base uint64) []byte {
	le := binary.LittleEndian
	b := []byte("MLOG")
	b = le.AppendUint16(b, 1)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint64(b, id)
	b = le.AppendUint64(b, base)
	b = le.AppendUint32(b, 0)
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// putBatchHeader writes at the start of b a batch header that
// batch.ParseHeader accepts: one record at base, declaring length bytes
// and a records section of rawLength bytes in codec. The CRC is left as b
// holds it.
func putBatchHeader(b []byte, base uint64, length, rawLength int, count uint32, codec batch.Codec) {
	le := binary.LittleEndian
	b[0], b[1] = batch.Magic, batch.Version
	le.PutUint64(b[6:], base)
	le.PutUint32(b[14:], uint32(length))
	le.PutUint16(b[18:], uint16(codec))
	le.PutUint32(b[20:], count-1)
	le.PutUint32(b[24:], count)
	le.PutUint64(b[28:], 1_700_000_000_000)
	le.PutUint64(b[36:], 1_700_000_000_000)
	le.PutUint64(b[44:], 0)
	le.PutUint32(b[52:], uint32(rawLength))
}

// TestSkipDamagedReadsTheFileABoundedNumberOfTimes: with --skip-damaged,
// every 'M' byte after damage is tried as a batch start, and each try
// reads (and CRCs) the whole length the candidate declares, from the disk
// again when it is not in the window. A damaged region full of headers
// that parse but fail their CRC, each declaring 1 MiB, so makes a 4 MiB
// file cost tens of GiB of reads and CRC work: the walk is quadratic in
// the file's size, and inspect --skip-damaged on a crafted or unlucky
// 64 MiB file does not finish. (window.nextValid -> window.batchAt.)
func TestSkipDamagedReadsTheFileABoundedNumberOfTimes(t *testing.T) {
	const size = 4 << 20
	const declared = 1 << 20
	data := make([]byte, size)
	copy(data, fileHeader(1, 0))
	for pos := FileHeaderSize; pos+batch.HeaderSize <= size-declared; pos += 64 {
		putBatchHeader(data[pos:], 0, declared, declared-batch.HeaderSize, 1, batch.CodecNone)
	}
	r := &countingReader{data: data, budget: 16 * size}
	s, err := Scan(context.Background(), r, size, Options{SkipDamaged: true}, nil)
	if err != nil {
		t.Fatalf("scan of a %d-byte file with --skip-damaged: %v (the budget is 16 reads of the file)", size, err)
	}
	if s.Records != 0 || s.DamagedBytes != size-FileHeaderSize {
		t.Errorf("summary %+v", s)
	}
}

// TestScanHoldsOneBatchInMemory: Scan's doc (and inspect's help) promise
// that the walk holds at most one batch (batch.MaxBatchSize) plus a read
// chunk, whatever the file declares. A valid, CRC-correct zstd batch of a
// few KiB whose 32 MiB records section holds millions of minimal records
// makes Scan decode them all into one []batch.Record (96 bytes each), so
// a tiny file makes inspect allocate several hundred MiB per batch.
// (batchAt -> batch.DecodeRecords into *recs.)
func TestScanHoldsOneBatchInMemory(t *testing.T) {
	var raw []byte
	var n uint32
	for {
		rec := binary.AppendUvarint(nil, uint64(n)) // offset delta
		rec = append(rec, 0, 0, 0, 1, 0)            // ts delta, expiry, no key, empty value, no headers
		if len(raw)+len(rec) > batch.MaxBatchSize {
			break
		}
		raw = append(raw, rec...)
		n++
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	body := enc.EncodeAll(raw, nil)
	enc.Close()
	b := make([]byte, batch.HeaderSize+len(body))
	copy(b[batch.HeaderSize:], body)
	putBatchHeader(b, 0, len(b), len(raw), n, batch.CodecZstd)
	binary.LittleEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
	if err := batch.Verify(b); err != nil {
		t.Fatal(err)
	}
	data := append(fileHeader(1, 0), b...)
	raw, body = nil, nil

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := Scan(context.Background(), bytes.NewReader(data), int64(len(data)), Options{}, nil)
	runtime.ReadMemStats(&after)
	if err != nil || !s.Clean() || s.Records != uint64(n) {
		t.Fatalf("scan: %v, %+v", err, s)
	}
	const bound = 2 * (batch.MaxBatchSize + chunk)
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Errorf("scanning a %d-byte file (one batch of %d records) allocated %d MiB; the walk promises one batch plus a chunk (%d MiB with slack)",
			len(data), n, got>>20, bound>>20)
	}
}
