package segment

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

func parseRecords(raw []byte, h BatchHeader, dst []Record) ([]Record, error) {
	n := int(h.RecordCount)
	if n > len(raw)/minRecordSize {
		return dst, corruptf("%d records cannot fit in %d bytes", n, len(raw))
	}
	dst = slices.Grow(dst, n)
	r := recReader{b: raw}
	f := facts{maxTS: h.FirstTimestamp}
	for i := 0; i < n; i++ {
		rec, err := parseRecord(&r, h, i, &f)
		if err != nil {
			return dst, err
		}
		dst = append(dst, rec)
	}
	if len(r.b) != 0 {
		return dst, corruptf("%d trailing bytes after %d records", len(r.b), n)
	}
	return dst, checkFacts(h, f)
}

func parseRecord(r *recReader, h BatchHeader, i int, f *facts) (Record, error) {
	delta := r.uvarint()
	tsDelta := r.varint()
	expiry := r.uvarint()
	rec := Record{
		Offset:    h.BaseOffset + delta,
		Timestamp: int64(uint64(h.FirstTimestamp) + uint64(tsDelta)),
		Expiry:    int64(expiry),
		Key:       r.bytes(),
		Value:     r.bytes(),
	}
	nh := r.uvarint()
	if r.bad {
		return rec, corruptf("record %d truncated", i)
	}
	switch {
	case i == 0 && (delta != 0 || tsDelta != 0):
		return rec, corruptf("first record has offset delta %d, timestamp delta %d", delta, tsDelta)
	case i > 0 && delta <= f.lastDelta:
		return rec, corruptf("record %d offset delta %d not increasing", i, delta)
	case delta > uint64(h.LastOffsetDelta):
		return rec, corruptf("record %d offset delta %d beyond last %d", i, delta, h.LastOffsetDelta)
	case expiry > 1<<63-1:
		return rec, corruptf("record %d expiry overflows", i)
	case nh > uint64(len(r.b)/2):
		return rec, corruptf("record %d claims %d headers", i, nh)
	}
	if nh > 0 {
		rec.Headers = make([]Header, nh)
		for j := range rec.Headers {
			rec.Headers[j] = Header{Key: r.bytes(), Value: r.bytes()}
		}
		if r.bad {
			return rec, corruptf("record %d headers truncated", i)
		}
	}
	f.note(delta, rec)
	return rec, nil
}

func (f *facts) note(delta uint64, rec Record) {
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

func checkFacts(h BatchHeader, f facts) error {
	maxExpiry := f.maxExpiry
	if f.never {
		maxExpiry = 0
	}
	switch {
	case f.lastDelta != uint64(h.LastOffsetDelta):
		return corruptf("last offset delta %d, header says %d", f.lastDelta, h.LastOffsetDelta)
	case f.maxTS != h.MaxTimestamp:
		return corruptf("max timestamp %d, header says %d", f.maxTS, h.MaxTimestamp)
	case maxExpiry != h.MaxExpiry:
		return corruptf("max expiry %d, header says %d", maxExpiry, h.MaxExpiry)
	case f.tombstones != h.HasTombstones() || f.expiry != h.HasExpiry():
		return corruptf("flags %#x disagree with records", h.Flags)
	}
	return nil
}
