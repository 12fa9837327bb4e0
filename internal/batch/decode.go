package batch

import (
	"encoding/binary"
	"slices"
)

// DecodeRecords verifies the CRC of the batch at the start of b,
// decompresses it and appends its records to dst with absolute offsets.
// For CodecNone the records' byte slices alias b; otherwise they alias one
// fresh buffer. On error dst is returned unchanged in length.
func DecodeRecords(b []byte, dst []Record) ([]Record, error) {
	if err := Verify(b); err != nil {
		return dst, err
	}
	h, _ := ParseHeader(b) // Verify parsed it already
	return decodeVerified(b[:h.Length], h, dst)
}

// Scan verifies the batch at the start of b as DecodeRecords does and
// calls fn with each of its records, in order, without materialising a
// slice of them. rec and rec.Headers are reused from one call to the next,
// so fn must copy what it keeps of them; the byte slices they hold alias b
// (CodecNone) or one fresh buffer, as DecodeRecords' do, and may be kept.
// Errors are DecodeRecords'; fn may have been called for the records
// before a defect.
func Scan(b []byte, fn func(rec *Record)) error {
	if err := Verify(b); err != nil {
		return err
	}
	h, _ := ParseHeader(b) // Verify parsed it already
	raw, err := decompress(b[HeaderSize:h.Length], h)
	if err != nil {
		return err
	}
	w, err := newRecWalker(raw, h, ErrCorrupt, reuseHeaders)
	if err != nil {
		return err
	}
	var rec Record
	for w.more() {
		if _, err := w.next(&rec); err != nil {
			return err
		}
		fn(&rec)
	}
	return w.finish()
}

// decodeVerified decodes a batch whose header parsed and whose CRC matched.
// It trusts nothing else: every count and length is checked against the
// bytes that remain, so hostile input cannot make it over-allocate.
func decodeVerified(b []byte, h BatchHeader, dst []Record) ([]Record, error) {
	raw, err := decompress(b[HeaderSize:], h)
	if err != nil {
		return dst, err
	}
	orig := len(dst)
	out, err := parseRecords(raw, h, dst)
	if err != nil {
		return dst[:orig], err
	}
	return out, nil
}

// recReader reads varints and byte strings, remembering the first error.
type recReader struct {
	b   []byte
	bad bool
}

func (r *recReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads a len+1 encoded string: nil for 0, else a capped sub-slice.
func (r *recReader) bytes() []byte {
	n := r.uvarint()
	if n == 0 || r.bad {
		return nil
	}
	n--
	if n > uint64(len(r.b)) {
		r.bad, r.b = true, nil
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// facts are what the records say about themselves, checked against the header.
type facts struct {
	lastDelta                 uint64
	maxTS, maxExpiry          int64
	tombstones, expiry, never bool
}

// headerMode is what a recWalker does with the headers of a record.
type headerMode uint8

const (
	// skipHeaders checks and counts them without materialising them, so
	// that the walker allocates nothing.
	skipHeaders headerMode = iota
	// freshHeaders gives each record a Headers slice of its own.
	freshHeaders
	// reuseHeaders gives each record the walker's one Headers slice,
	// overwritten by the next record.
	reuseHeaders
)

// recWalker checks a records section against its batch header one record at
// a time; DecodeRecords, Scan and CheckProduce share it. kind is the
// sentinel its errors wrap: ErrCorrupt for our own data, ErrBadBatch for a
// client's.
type recWalker struct {
	r       recReader
	h       BatchHeader
	kind    error
	headers headerMode
	hdrs    []Header // reuseHeaders: the slice records share
	f       facts
	i, n    int
	// reserved says a header key seen so far starts with ReservedPrefix
	// (kept by skipHeaders only, for CheckProduceReport).
	reserved bool
}

func newRecWalker(raw []byte, h BatchHeader, kind error, headers headerMode) (recWalker, error) {
	n := int(h.RecordCount)
	if n > len(raw)/MinRecordSize {
		return recWalker{}, failf(kind, "%d records cannot fit in %d bytes", n, len(raw))
	}
	return recWalker{r: recReader{b: raw}, h: h, kind: kind, headers: headers, f: facts{maxTS: h.FirstTimestamp}, n: n}, nil
}

// more reports whether next has a record left to read.
func (w *recWalker) more() bool { return w.i < w.n }

// next reads the next record into rec, whose slices alias the records
// section, checks it and returns its number of headers. rec.Headers is
// set as the walker's headerMode says.
func (w *recWalker) next(rec *Record) (nHeaders int, err error) {
	r, h, i := &w.r, &w.h, w.i
	w.i++
	delta := r.uvarint()
	tsDelta := r.varint()
	expiry := r.uvarint()
	*rec = Record{
		Offset:    h.BaseOffset + delta,
		Timestamp: int64(uint64(h.FirstTimestamp) + uint64(tsDelta)),
		Expiry:    int64(expiry),
		Key:       r.bytes(),
		Value:     r.bytes(),
	}
	nh := r.uvarint()
	if r.bad {
		return 0, failf(w.kind, "record %d truncated", i)
	}
	switch {
	case i == 0 && (delta != 0 || tsDelta != 0):
		return 0, failf(w.kind, "first record has offset delta %d, timestamp delta %d", delta, tsDelta)
	case i > 0 && delta <= w.f.lastDelta:
		return 0, failf(w.kind, "record %d offset delta %d not increasing (previous %d)", i, delta, w.f.lastDelta)
	case delta > uint64(h.LastOffsetDelta):
		return 0, failf(w.kind, "record %d offset delta %d beyond last %d", i, delta, h.LastOffsetDelta)
	case expiry > 1<<63-1:
		return 0, failf(w.kind, "record %d expiry overflows", i)
	case nh > uint64(len(r.b)/2): // a header takes at least 2 bytes
		return 0, failf(w.kind, "record %d claims %d headers", i, nh)
	}
	if nh > 0 {
		switch w.headers {
		case skipHeaders:
			for j := uint64(0); j < nh; j++ {
				if k := r.bytes(); !w.reserved && isReserved(k) {
					w.reserved = true
				}
				r.bytes()
			}
		case freshHeaders:
			rec.Headers = make([]Header, nh)
		case reuseHeaders:
			w.hdrs = slices.Grow(w.hdrs[:0], int(nh))[:nh]
			rec.Headers = w.hdrs
		}
		for j := range rec.Headers {
			rec.Headers[j] = Header{Key: r.bytes(), Value: r.bytes()}
		}
		if r.bad {
			return 0, failf(w.kind, "record %d headers truncated", i)
		}
	}
	w.f.note(delta, rec)
	return int(nh), nil
}

// finish checks, after the last record, that nothing trails the records and
// that they agree with the header.
func (w *recWalker) finish() error {
	if len(w.r.b) != 0 {
		return failf(w.kind, "%d trailing bytes after %d records", len(w.r.b), w.n)
	}
	return checkFacts(w.h, w.f, w.kind)
}

func parseRecords(raw []byte, h BatchHeader, dst []Record) ([]Record, error) {
	w, err := newRecWalker(raw, h, ErrCorrupt, freshHeaders)
	if err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, w.n)
	for w.more() {
		dst = dst[:len(dst)+1] // Grow made room
		if _, err := w.next(&dst[len(dst)-1]); err != nil {
			return dst[:len(dst)-1], err
		}
	}
	return dst, w.finish()
}

func (f *facts) note(delta uint64, rec *Record) {
	f.lastDelta = delta
	f.maxTS = max(f.maxTS, rec.Timestamp)
	f.tombstones = f.tombstones || rec.Value == nil
	if rec.Expiry == 0 {
		f.never = true
	} else {
		f.expiry = true
		f.maxExpiry = max(f.maxExpiry, rec.Expiry)
	}
}

func checkFacts(h BatchHeader, f facts, kind error) error {
	maxExpiry := f.maxExpiry
	if f.never {
		maxExpiry = 0
	}
	switch {
	case f.lastDelta != uint64(h.LastOffsetDelta):
		return failf(kind, "last offset delta %d, header says %d", f.lastDelta, h.LastOffsetDelta)
	case f.maxTS != h.MaxTimestamp:
		return failf(kind, "max timestamp %d, header says %d", f.maxTS, h.MaxTimestamp)
	case maxExpiry != h.MaxExpiry:
		return failf(kind, "max expiry %d, header says %d", maxExpiry, h.MaxExpiry)
	case f.tombstones != h.HasTombstones() || f.expiry != h.HasExpiry():
		return failf(kind, "flags %#x disagree with records (tombstones %v, expiry %v)", h.Flags, f.tombstones, f.expiry)
	}
	return nil
}

// isReserved says a header key starts with ReservedPrefix.
func isReserved(key []byte) bool {
	return len(key) >= len(ReservedPrefix) && string(key[:len(ReservedPrefix)]) == ReservedPrefix
}
