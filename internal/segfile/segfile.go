// Package segfile reads a segment .log file that nothing vouches for: a
// copy set aside in a node's quarantine, or one taken off a damaged disk.
// It walks the file batch by batch through an io.ReaderAt, checks the
// file header, each batch's framing, CRC, records and offset order, and
// reports what it found (counts, offsets, times, damaged spans) without
// ever trusting a declared size: every length is bounded by the bytes left
// in the file and by the batch format's limit (batch.MaxBatchSize) before
// anything is read or allocated.
//
// It does no I/O of its own beyond the reader it is given, so that tests
// can feed it crafted bytes and the command line opens the files. The
// format is docs/storage-format.md's, decoded by internal/batch.
package segfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// FileHeaderSize is the size of a .log file's header; batches follow it.
const FileHeaderSize = segment.FileHeaderSize

// MaxSpans bounds the damaged spans a Summary lists; the rest are counted.
const MaxSpans = 1000

// chunk is how much the walk reads at a time when batches are small.
const chunk = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileHeader is a .log file's header (the layout is segment.go's):
//
//	0  4  magic "MLOG"     16  8  base offset
//	4  2  version (1)      24  4  owner tag (0 = not recorded)
//	6  2  reserved (0)     28  4  CRC32C of bytes 0..27
//	8  8  segment id
type FileHeader struct {
	ID, Base uint64
	Owner    uint32
}

// ParseFileHeader decodes and checks the header at the start of b.
func ParseFileHeader(b []byte) (FileHeader, error) {
	le := binary.LittleEndian
	switch {
	case len(b) < FileHeaderSize:
		return FileHeader{}, fmt.Errorf("%w: file of %d bytes is shorter than its %d-byte header", batch.ErrCorrupt, len(b), FileHeaderSize)
	case string(b[:4]) != "MLOG":
		return FileHeader{}, fmt.Errorf("%w: file header magic %q is not \"MLOG\": not a segment file", batch.ErrCorrupt, b[:4])
	case le.Uint16(b[4:]) != 1:
		return FileHeader{}, fmt.Errorf("%w: segment file version %d, this reader knows 1", batch.ErrCorrupt, le.Uint16(b[4:]))
	case crc32.Checksum(b[:28], castagnoli) != le.Uint32(b[28:]):
		return FileHeader{}, fmt.Errorf("%w: file header CRC mismatch", batch.ErrCorrupt)
	}
	return FileHeader{ID: le.Uint64(b[8:]), Base: le.Uint64(b[16:]), Owner: le.Uint32(b[24:])}, nil
}

// Span is a run of bytes that holds no valid batch: [Start, End).
type Span struct {
	Start, End int64
	// Reason says what was wrong at Start.
	Reason string
}

// Batch is one valid batch, as Scan hands it to its visitor.
type Batch struct {
	Pos    int64 // byte position in the file
	Header batch.BatchHeader
	b      []byte // the batch's bytes, in Scan's window
}

// Records calls fn with each record of the batch, in order, with absolute
// offsets, one at a time: the batch is never decoded into a slice of
// records, so a batch of millions of small records costs its records
// section and no more. rec, its headers and its byte slices are valid only
// during the call (copy what you keep), and Records only during the visit.
// It stops at fn's first error and returns it. Records decodes the
// records section again, so a visitor that needs none of them should not
// call it.
func (b Batch) Records(fn func(rec *batch.Record) error) error {
	var ferr error
	err := batch.Scan(b.b, func(rec *batch.Record) {
		if ferr == nil {
			ferr = fn(rec)
		}
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		// Scan checked this batch already: the bytes changed under it.
		return fmt.Errorf("segfile: batch at %d no longer decodes: %w", b.Pos, err)
	}
	return nil
}

// Options tune Scan.
type Options struct {
	// SkipDamaged scans forward past a bad batch for the next valid one,
	// as a node's recovery does, instead of stopping there.
	SkipDamaged bool
}

// Summary is what Scan found.
type Summary struct {
	Size int64
	// Header is the file header; HeaderErr says why it is not, when it
	// could not be read. The batches are walked either way.
	Header    FileHeader
	HeaderErr error

	Batches, Records uint64
	Bytes            int64 // bytes of the valid batches
	// FirstOffset and LastOffset are those of the first and last valid
	// records; meaningful when Records > 0.
	FirstOffset, LastOffset uint64
	// MinTimestamp and MaxTimestamp bound the records' timestamps (ms).
	MinTimestamp, MaxTimestamp int64
	// MaxExpiry is when every record has expired (ms), 0 when some record
	// never expires, as a seal footer says.
	MaxExpiry int64
	// Damaged lists the spans without a valid batch (the first MaxSpans);
	// DamagedSpans and DamagedBytes count them all.
	Damaged      []Span
	DamagedSpans int
	DamagedBytes int64
	// Stopped says the walk ended at damage (no SkipDamaged) rather than
	// at the end of the file; the bytes after it were not looked at.
	Stopped bool

	neverExpires bool
}

// Clean reports whether the whole file was read and nothing was damaged.
func (s *Summary) Clean() bool {
	return s.HeaderErr == nil && s.DamagedSpans == 0 && !s.Stopped
}

// Scan walks the file r of size bytes, calling visit (when not nil) for
// each valid batch in file order. Damage ends the walk unless o says to
// skip it; either way it is reported in the Summary, not as an error.
// The error is r's, ctx's or visit's.
//
// A batch is valid when its header parses (magic, version, lengths within
// the format's limits and the file), its CRC matches, its records decode
// and agree with the header, and its offsets lie above those of the batch
// before it. The walk holds at most one batch (batch.MaxBatchSize, and its
// records section once decompressed) plus a read chunk in memory,
// whatever the file declares, and reads each byte of the file from r a
// bounded number of times, --skip-damaged's forward search included.
func Scan(ctx context.Context, r io.ReaderAt, size int64, o Options, visit func(Batch) error) (Summary, error) {
	s := Summary{Size: size}
	w := &window{r: r, size: size}
	var minBase uint64
	hdr, err := w.at(0, int(min(size, FileHeaderSize)), chunk)
	if err != nil {
		return s, err
	}
	if s.Header, s.HeaderErr = ParseFileHeader(hdr); s.HeaderErr == nil {
		minBase = s.Header.Base
	}
	pos := int64(FileHeaderSize)
	for pos < size {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		b, h, st, reason, err := w.batchAt(pos, minBase)
		if err != nil {
			return s, err
		}
		if reason != "" {
			next := size
			if o.SkipDamaged {
				if next, err = w.nextValid(ctx, pos+1, minBase); err != nil {
					return s, err
				}
			}
			s.damage(Span{Start: pos, End: next, Reason: reason})
			if !o.SkipDamaged {
				s.Stopped = true
				break
			}
			pos = next
			continue
		}
		s.add(h, st)
		if visit != nil {
			if err := visit(Batch{Pos: pos, Header: h, b: b}); err != nil {
				return s, err
			}
		}
		minBase = h.LastOffset() + 1
		pos += int64(len(b))
	}
	if s.neverExpires {
		s.MaxExpiry = 0
	}
	return s, nil
}

func (s *Summary) damage(sp Span) {
	s.DamagedSpans++
	s.DamagedBytes += sp.End - sp.Start
	if len(s.Damaged) < MaxSpans {
		s.Damaged = append(s.Damaged, sp)
	}
}

func (s *Summary) add(h batch.BatchHeader, st batchStats) {
	// The records checked against the header: the first is at the base
	// offset, the last at LastOffset, the largest timestamp is the
	// header's, and so is the max expiry (0 when some record never
	// expires).
	if s.Records == 0 {
		s.FirstOffset, s.MinTimestamp, s.MaxTimestamp = h.BaseOffset, st.minTS, h.MaxTimestamp
	}
	s.Records += uint64(h.RecordCount)
	s.LastOffset = h.LastOffset()
	s.MinTimestamp = min(s.MinTimestamp, st.minTS)
	s.MaxTimestamp = max(s.MaxTimestamp, h.MaxTimestamp)
	if h.MaxExpiry == 0 {
		s.neverExpires = true
	}
	s.MaxExpiry = max(s.MaxExpiry, h.MaxExpiry)
	s.Batches++
	s.Bytes += int64(h.Length)
}

// batchStats is what a batch's records say that its header does not.
type batchStats struct {
	minTS int64
}

// window reads the file through one buffer that slides forward: bytes it
// holds already are kept when it moves, so that a walk moving forward
// reads each byte of the file from disk once or so, however often it
// looks at it.
type window struct {
	r     io.ReaderAt
	size  int64
	buf   []byte
	start int64 // buf holds the file's bytes [start, start+len(buf))
	pc    prefixCRCs
}

// searchSpan is how far the forward search loads ahead of a candidate: a
// batch of the largest size and a chunk past it, so that the window moves
// (and copies what it keeps) once per chunk of progress at most.
const searchSpan = batch.MaxBatchSize + chunk

// at returns the n bytes at pos, valid until the next call, reading at
// least ahead bytes (bounded by the file) when it must read. n and ahead
// are at most searchSpan by every caller, and pos+n within size.
func (w *window) at(pos int64, n, ahead int) ([]byte, error) {
	if pos < 0 || n < 0 || pos+int64(n) > w.size {
		return nil, fmt.Errorf("segfile: read of %d bytes at %d outside a file of %d", n, pos, w.size)
	}
	end := w.start + int64(len(w.buf))
	if pos >= w.start && pos+int64(n) <= end {
		return w.buf[pos-w.start : pos-w.start+int64(n)], nil
	}
	want := int(min(int64(max(n, ahead)), w.size-pos))
	keep := 0
	if pos >= w.start && pos < end {
		keep = int(end - pos)
	}
	if cap(w.buf) < want {
		nb := make([]byte, want)
		copy(nb, w.buf[len(w.buf)-keep:])
		w.buf = nb
	} else {
		copy(w.buf, w.buf[len(w.buf)-keep:])
		w.buf = w.buf[:want]
	}
	w.start = pos
	got, err := w.r.ReadAt(w.buf[keep:], pos+int64(keep))
	if got < want-keep {
		w.buf, w.start = w.buf[:0], 0
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %d bytes at %d: %w", want-keep, pos+int64(keep), err)
	}
	return w.buf[:n], nil
}

// plausible checks what the header at pos says without reading its batch:
// a non-empty reason says why there is no valid batch there.
func (w *window) plausible(pos int64, minBase uint64) (h batch.BatchHeader, reason string, err error) {
	left := w.size - pos
	if left < batch.HeaderSize {
		return h, fmt.Sprintf("%d bytes left, fewer than a %d-byte batch header (a torn write?)", left, batch.HeaderSize), nil
	}
	hb, err := w.at(pos, batch.HeaderSize, chunk)
	if err != nil {
		return h, "", err
	}
	if h, err = batch.ParseHeader(hb); err != nil {
		return h, "batch header: " + err.Error(), nil
	}
	// ParseHeader bounded the length by the format's limit; bound it by
	// the file before reading it.
	switch raw := h.Length - batch.HeaderSize; {
	case int64(h.Length) > left:
		return h, fmt.Sprintf("batch declares %d bytes but %d are left in the file (truncated?)", h.Length, left), nil
	case h.BaseOffset < minBase:
		return h, fmt.Sprintf("batch base offset %d is below %d, where the batches before it end", h.BaseOffset, minBase), nil
	case h.Codec() == batch.CodecNone && h.RawLength != raw:
		return h, fmt.Sprintf("uncompressed records section of %d bytes, the header says %d", raw, h.RawLength), nil
	case int(h.RecordCount) > h.RawLength/batch.MinRecordSize:
		return h, fmt.Sprintf("%d records cannot fit in a records section of %d bytes", h.RecordCount, h.RawLength), nil
	}
	return h, "", nil
}

// batchAt reads and checks the batch at pos. A non-empty reason says why
// there is no valid batch there; err is a read error. The records are
// walked one at a time, never held as a slice.
func (w *window) batchAt(pos int64, minBase uint64) (b []byte, h batch.BatchHeader, st batchStats, reason string, err error) {
	if h, reason, err = w.plausible(pos, minBase); reason != "" || err != nil {
		return nil, h, st, reason, err
	}
	if b, err = w.at(pos, h.Length, chunk); err != nil {
		return nil, h, st, "", err
	}
	st.minTS = h.FirstTimestamp
	if err := batch.Scan(b, func(rec *batch.Record) { st.minTS = min(st.minTS, rec.Timestamp) }); err != nil {
		return nil, h, st, err.Error(), nil
	}
	return b, h, st, "", nil
}

// nextValid searches [from, size) for the start of a valid batch whose
// offsets lie at or above minBase, as a node's recovery does, and returns
// it, or size when there is none. A candidate costs its header's checks,
// then its CRC from the window's prefix CRCs (rangeCRC), and only one
// whose CRC matches is decoded: the search reads and CRCs the file a
// bounded number of times, whatever its headers declare.
func (w *window) nextValid(ctx context.Context, from int64, minBase uint64) (int64, error) {
	for q := from; q+batch.HeaderSize <= w.size; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		c, err := w.ahead(q)
		if err != nil {
			return 0, err
		}
		i := bytes.IndexByte(c, batch.Magic)
		if i < 0 {
			q += int64(len(c))
			continue
		}
		q += int64(i)
		ok, err := w.candidate(q, minBase)
		if err != nil {
			return 0, err
		}
		if ok {
			return q, nil
		}
		q++
	}
	return w.size, nil
}

// candidate reports whether a valid batch starts at q.
func (w *window) candidate(q int64, minBase uint64) (bool, error) {
	h, reason, err := w.plausible(q, minBase)
	if reason != "" || err != nil {
		return false, err
	}
	b, err := w.at(q, h.Length, searchSpan)
	if err != nil {
		return false, err
	}
	if w.rangeCRC(q+crcStart, q+int64(h.Length)) != binary.LittleEndian.Uint32(b[crcField:]) {
		return false, nil
	}
	_, _, _, reason, err = w.batchAt(q, minBase)
	return reason == "" && err == nil, err
}

// crcField and crcStart are where a batch header holds its CRC and where
// the bytes it covers begin (docs/storage-format.md).
const (
	crcField = 2
	crcStart = 6
)

// ahead returns the bytes from pos that the buffer holds when they are
// at least a batch header, else the next chunk from pos: a search that
// steps one byte at a time does not reread the file at each step.
func (w *window) ahead(pos int64) ([]byte, error) {
	if end := w.start + int64(len(w.buf)); pos >= w.start && end-pos >= batch.HeaderSize {
		return w.buf[pos-w.start:], nil
	}
	return w.at(pos, int(min(chunk, w.size-pos)), chunk)
}

// ContentHash is the xxhash64 of the file's bytes after its header, as a
// seal footer records it. It reads the file a chunk at a time.
func ContentHash(ctx context.Context, r io.ReaderAt, size int64) (uint64, error) {
	h := xxhash.New()
	buf := make([]byte, min(chunk, max(size-FileHeaderSize, 0)))
	for pos := int64(FileHeaderSize); pos < size; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n := int(min(int64(len(buf)), size-pos))
		got, err := r.ReadAt(buf[:n], pos)
		if got < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("read %d bytes at %d: %w", n, pos, err)
		}
		_, _ = h.Write(buf[:n])
		pos += int64(n)
	}
	return h.Sum64(), nil
}

// CheckFooter compares what Scan found, and the file's content hash,
// with a seal footer written for segment id, and says how they differ
// (nil when they agree).
func (s *Summary) CheckFooter(id uint64, f segment.Footer, contentHash uint64) error {
	var diffs []error
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Errorf(format, args...)) }
	if s.HeaderErr == nil {
		if id != s.Header.ID {
			add("footer is for segment %d, the file header says %d", id, s.Header.ID)
		}
		if f.Base != s.Header.Base {
			add("footer base %d, the file header says %d", f.Base, s.Header.Base)
		}
	}
	if got := s.Size - FileHeaderSize; got != f.Bytes {
		add("footer says %d bytes of batches, the file holds %d", f.Bytes, got)
	}
	if s.Records != f.Records {
		add("footer says %d records, %d were read", f.Records, s.Records)
	}
	if s.Records > 0 && s.LastOffset >= f.End {
		add("records reach offset %d, past the footer's end %d", s.LastOffset, f.End)
	}
	if contentHash != f.ContentHash {
		add("content hash %#x, footer says %#x", contentHash, f.ContentHash)
	}
	return errors.Join(diffs...)
}
