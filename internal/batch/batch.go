package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
)

// Batch header layout (little-endian); see the package doc for the diagram.
const (
	offMagic     = 0
	offVersion   = 1
	offCRC       = 2
	offBase      = 6
	offLength    = 14
	offFlags     = 18
	offLastDelta = 20
	offCount     = 24
	offFirstTS   = 28
	offMaxTS     = 36
	offMaxExpiry = 44
	offRawLength = 52

	// HeaderSize is the size of a batch header in bytes.
	HeaderSize = 56
	// crcStart is where the CRC coverage begins: everything after the CRC field.
	crcStart = offBase
)

const (
	// Magic is the first byte of every batch. It is never zero, so a
	// zero-filled tail left by a crash is rejected at its first byte.
	Magic = 0x4D // 'M'
	// Version is the batch format version this package writes and reads.
	Version = 1
	// MaxBatchSize bounds both a stored batch and its uncompressed records
	// section. It caps what a decoder allocates for hostile input.
	MaxBatchSize = 32 << 20
)

// Flag bits of BatchHeader.Flags.
const (
	flagCodecMask = 0x7
	// FlagTombstones is set when some record has a nil Value.
	FlagTombstones = 1 << 3
	// FlagExpiry is set when some record has a non-zero Expiry.
	FlagExpiry = 1 << 4
	flagsKnown = flagCodecMask | FlagTombstones | FlagExpiry
)

// MinRecordSize is the smallest encoding of a record: offset delta,
// timestamp delta, expiry, key marker, value marker, header count. No
// records section holds more than its length / MinRecordSize records.
const MinRecordSize = 6

// Errors. Decoders wrap ErrCorrupt for every inconsistency they find.
var (
	ErrCorrupt    = errors.New("corrupt")
	ErrShortBatch = errors.New("short batch")
	ErrBadVersion = errors.New("unknown batch magic or version")
	// ErrInvalid reports records that cannot be encoded.
	ErrInvalid = errors.New("invalid records")
	// ErrTooLarge reports records that do not fit in one batch
	// (MaxBatchSize); it wraps ErrInvalid.
	ErrTooLarge = fmt.Errorf("%w: too large for one batch", ErrInvalid)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a record header. nil and empty Key or Value are distinct.
type Header struct{ Key, Value []byte }

// Record is one record of a batch.
type Record struct {
	Offset    uint64 // absolute; set by decode; ignored by EncodeBatch (consecutive from base)
	Timestamp int64  // client ms
	Expiry    int64  // absolute unix ms after which the record is invisible; 0 = never
	Key       []byte // nil = no key; []byte{} = empty key
	Value     []byte // nil = tombstone
	Headers   []Header
}

// Codec is the compression of a batch's records section.
type Codec uint8

// Codecs.
const (
	CodecNone Codec = 0
	CodecZstd Codec = 1
	CodecS2   Codec = 2
	CodecLZ4  Codec = 3
)

func (c Codec) valid() bool { return c <= CodecLZ4 }

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecZstd:
		return "zstd"
	case CodecS2:
		return "s2"
	case CodecLZ4:
		return "lz4"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// BatchHeader is the decoded fixed header of a batch.
type BatchHeader struct {
	BaseOffset      uint64
	LastOffsetDelta uint32
	RecordCount     uint32
	FirstTimestamp  int64
	MaxTimestamp    int64
	// MaxExpiry is when every record of the batch has expired; 0 when some
	// record never expires.
	MaxExpiry int64
	Flags     uint16
	Length    int // total bytes of the batch
	RawLength int // bytes of the uncompressed records section
}

// LastOffset is the offset of the batch's last record.
func (h BatchHeader) LastOffset() uint64 { return h.BaseOffset + uint64(h.LastOffsetDelta) }

// Codec is the compression of the records section.
func (h BatchHeader) Codec() Codec { return Codec(h.Flags & flagCodecMask) }

// HasTombstones reports whether some record has a nil Value.
func (h BatchHeader) HasTombstones() bool { return h.Flags&FlagTombstones != 0 }

// HasExpiry reports whether some record carries an expiry.
func (h BatchHeader) HasExpiry() bool { return h.Flags&FlagExpiry != 0 }

// failf builds an error wrapping kind: ErrCorrupt when our own data is bad,
// ErrBadBatch when a client's batch is.
func failf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}

func corruptf(format string, args ...any) error { return failf(ErrCorrupt, format, args...) }

// ParseHeader decodes the fixed header at the start of b. It needs only
// HeaderSize bytes and checks magic, version, length bounds and the
// internal consistency of the fields, not the CRC: it is cheap enough to
// walk a file by.
func ParseHeader(b []byte) (BatchHeader, error) {
	if len(b) < HeaderSize {
		return BatchHeader{}, ErrShortBatch
	}
	if b[offMagic] != Magic || b[offVersion] != Version {
		return BatchHeader{}, fmt.Errorf("%w: magic %#x version %d", ErrBadVersion, b[offMagic], b[offVersion])
	}
	h := decodeHeader(b)
	return h, h.check(ErrCorrupt)
}

// decodeHeader reads the fields of the header at the start of b, which
// holds at least HeaderSize bytes, checking nothing.
func decodeHeader(b []byte) BatchHeader {
	le := binary.LittleEndian
	return BatchHeader{
		BaseOffset:      le.Uint64(b[offBase:]),
		Length:          int(le.Uint32(b[offLength:])),
		Flags:           le.Uint16(b[offFlags:]),
		LastOffsetDelta: le.Uint32(b[offLastDelta:]),
		RecordCount:     le.Uint32(b[offCount:]),
		FirstTimestamp:  int64(le.Uint64(b[offFirstTS:])),
		MaxTimestamp:    int64(le.Uint64(b[offMaxTS:])),
		MaxExpiry:       int64(le.Uint64(b[offMaxExpiry:])),
		RawLength:       int(le.Uint32(b[offRawLength:])),
	}
}

// check checks the internal consistency of the header fields; its errors
// wrap kind.
func (h BatchHeader) check(kind error) error {
	switch {
	case h.Length < HeaderSize || h.Length > MaxBatchSize:
		return failf(kind, "batch length %d outside %d..%d", h.Length, HeaderSize, MaxBatchSize)
	case h.RawLength > MaxBatchSize:
		return failf(kind, "raw length %d above %d", h.RawLength, MaxBatchSize)
	case h.Flags&^flagsKnown != 0 || !h.Codec().valid():
		return failf(kind, "unknown flags or codec in %#x", h.Flags)
	case h.RecordCount == 0:
		return failf(kind, "record count 0")
	case uint64(h.RecordCount) > uint64(h.LastOffsetDelta)+1:
		return failf(kind, "record count %d but offsets span %d", h.RecordCount, uint64(h.LastOffsetDelta)+1)
	case h.BaseOffset >= math.MaxUint64-uint64(h.LastOffsetDelta):
		return failf(kind, "offsets overflow") // LastOffset()+1 must fit
	case h.MaxTimestamp < h.FirstTimestamp:
		return failf(kind, "max timestamp %d before first %d", h.MaxTimestamp, h.FirstTimestamp)
	case h.MaxExpiry < 0:
		return failf(kind, "negative max expiry %d", h.MaxExpiry)
	}
	return nil
}

// Verify checks the CRC32C of the batch at the start of b.
func Verify(b []byte) error {
	h, err := ParseHeader(b)
	if err != nil {
		return err
	}
	if len(b) < h.Length {
		return ErrShortBatch
	}
	want := binary.LittleEndian.Uint32(b[offCRC:])
	if got := crc32.Checksum(b[crcStart:h.Length], castagnoli); got != want {
		return corruptf("crc %#08x, header says %#08x", got, want)
	}
	return nil
}

// Rebase moves the whole batch at the start of b to base offset base in
// place — record offsets are stored as deltas, so only the header changes
// — and recomputes the CRC. A primary can so assign offsets to a batch
// encoded before it knew them. The batch must be valid (Verify).
func Rebase(b []byte, base uint64) error {
	if err := Verify(b); err != nil {
		return err
	}
	h, _ := ParseHeader(b)
	if base >= math.MaxUint64-uint64(h.LastOffsetDelta) {
		return fmt.Errorf("%w: rebasing to %d overflows offsets", ErrInvalid, base)
	}
	binary.LittleEndian.PutUint64(b[offBase:], base)
	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:h.Length], castagnoli))
	return nil
}

// Restamp is Rebase for a batch already verified (by CheckProduce or
// Verify) and not changed since: it skips checking the CRC again before
// writing the new base offset and CRC.
func Restamp(b []byte, base uint64) error {
	h, err := ParseHeader(b)
	if err != nil {
		return err
	}
	if len(b) < h.Length {
		return fmt.Errorf("%w: %d of %d bytes", ErrShortBatch, len(b), h.Length)
	}
	if base >= math.MaxUint64-uint64(h.LastOffsetDelta) {
		return fmt.Errorf("%w: rebasing to %d overflows offsets", ErrInvalid, base)
	}
	binary.LittleEndian.PutUint64(b[offBase:], base)
	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:h.Length], castagnoli))
	return nil
}

// SplitBatches splits concatenated batches (a Read result) into one slice
// per batch. It checks framing, not CRCs.
func SplitBatches(buf []byte) ([][]byte, error) {
	var out [][]byte
	for len(buf) > 0 {
		h, err := ParseHeader(buf)
		if err != nil {
			return out, err
		}
		if len(buf) < h.Length {
			return out, ErrShortBatch
		}
		out = append(out, buf[:h.Length:h.Length])
		buf = buf[h.Length:]
	}
	return out, nil
}

// EncodeBatch appends one batch holding recs, at consecutive offsets from
// base, to dst.
func EncodeBatch(dst []byte, base uint64, recs []Record, codec Codec) ([]byte, error) {
	if uint64(len(recs)) > math.MaxUint32 || (len(recs) > 0 && base >= math.MaxUint64-uint64(len(recs)-1)) {
		return dst, fmt.Errorf("%w: offsets overflow", ErrInvalid)
	}
	return encode(dst, base, func(i int) uint64 { return base + uint64(i) }, recs, codec)
}

// EncodeBatchAt appends one batch holding recs at their own Offsets, which
// must be strictly increasing (holes allowed), to dst. The base offset is
// recs[0].Offset.
func EncodeBatchAt(dst []byte, recs []Record, codec Codec) ([]byte, error) {
	for i := 1; i < len(recs); i++ {
		if recs[i].Offset <= recs[i-1].Offset {
			return dst, fmt.Errorf("%w: offsets not strictly increasing at record %d", ErrInvalid, i)
		}
	}
	if len(recs) == 0 {
		return dst, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	return encode(dst, recs[0].Offset, func(i int) uint64 { return recs[i].Offset }, recs, codec)
}

// summary is what the header says about the records.
type summary struct {
	lastDelta                 uint64
	firstTS, maxTS, maxExpiry int64
	flags                     uint16
}

func summarize(base uint64, off func(int) uint64, recs []Record, codec Codec) (summary, error) {
	s := summary{firstTS: recs[0].Timestamp, maxTS: recs[0].Timestamp, flags: uint16(codec)}
	never := false
	for i := range recs {
		r := &recs[i]
		if r.Expiry < 0 {
			return s, fmt.Errorf("%w: negative expiry at record %d", ErrInvalid, i)
		}
		s.maxTS = max(s.maxTS, r.Timestamp)
		if r.Value == nil {
			s.flags |= FlagTombstones
		}
		if r.Expiry == 0 {
			never = true
		} else {
			s.flags |= FlagExpiry
			s.maxExpiry = max(s.maxExpiry, r.Expiry)
		}
	}
	if never {
		s.maxExpiry = 0
	}
	s.lastDelta = off(len(recs)-1) - base
	if s.lastDelta > math.MaxUint32 {
		return s, fmt.Errorf("%w: offset span %d exceeds 2^32-1", ErrInvalid, s.lastDelta)
	}
	if base >= math.MaxUint64-s.lastDelta {
		return s, fmt.Errorf("%w: last offset must be below 2^64-1", ErrInvalid)
	}
	return s, nil
}

func encode(dst []byte, base uint64, off func(int) uint64, recs []Record, codec Codec) ([]byte, error) {
	if len(recs) == 0 {
		return dst, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	if !codec.valid() {
		return dst, fmt.Errorf("%w: codec %d", ErrInvalid, codec)
	}
	sum, err := summarize(base, off, recs, codec)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	var rawLen int
	if codec == CodecNone {
		dst = appendRecords(dst, base, sum.firstTS, off, recs)
		rawLen = len(dst) - start - HeaderSize
	} else {
		raw := appendRecords(getScratch(0), base, sum.firstTS, off, recs)
		rawLen = len(raw)
		dst, err = compress(dst, raw, codec)
		putScratch(raw)
		if err != nil {
			return dst[:start], err
		}
	}
	length := len(dst) - start
	if length > MaxBatchSize || rawLen > MaxBatchSize {
		return dst[:start], tooLarge(length, rawLen)
	}
	putHeader(dst[start:], base, length, rawLen, uint32(len(recs)), sum)
	return dst, nil
}

// putHeader fills the header at the start of b (the whole batch) and its CRC.
func putHeader(b []byte, base uint64, length, rawLen int, count uint32, s summary) {
	le := binary.LittleEndian
	b[offMagic] = Magic
	b[offVersion] = Version
	le.PutUint64(b[offBase:], base)
	le.PutUint32(b[offLength:], uint32(length))
	le.PutUint16(b[offFlags:], s.flags)
	le.PutUint32(b[offLastDelta:], uint32(s.lastDelta))
	le.PutUint32(b[offCount:], count)
	le.PutUint64(b[offFirstTS:], uint64(s.firstTS))
	le.PutUint64(b[offMaxTS:], uint64(s.maxTS))
	le.PutUint64(b[offMaxExpiry:], uint64(s.maxExpiry))
	le.PutUint32(b[offRawLength:], uint32(rawLen))
	le.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:length], castagnoli))
}

// tooLarge is the error for a batch beyond MaxBatchSize.
func tooLarge(length, rawLen int) error {
	return fmt.Errorf("%w: batch of %d bytes (%d raw) exceeds %d", ErrTooLarge, length, rawLen, MaxBatchSize)
}

// appendRecords appends the uncompressed records section, through a
// Builder writing into dst, so that a record's layout is written down once
// (Builder.add). encode has checked the records already.
func appendRecords(dst []byte, base uint64, firstTS int64, off func(int) uint64, recs []Record) []byte {
	w := Builder{buf: dst, open: true, sum: summary{firstTS: firstTS}}
	for i := range recs {
		r := &recs[i]
		w.add(off(i)-base, r.Timestamp, r.Expiry, r.Key, r.Value, len(r.Headers))
		for j := range r.Headers {
			w.AddHeader(r.Headers[j].Key, r.Headers[j].Value)
		}
	}
	return w.buf
}

// appendBytes writes len+1 then the bytes, or 0 for nil, so nil and empty
// stay distinct.
func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

// appendString is appendBytes for a field given as a string (never nil).
func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s))+1)
	return append(dst, s...)
}

// FieldSize is the encoded size of a key, value or header field of n
// bytes. A nil field takes one byte, as an empty one does.
func FieldSize(n int) int { return uvarintLen(uint64(n)+1) + n }

// RecordSize bounds the encoded size of a record, wherever it stands in a
// batch, whose key, value and header fields take fields bytes in all (the
// sum of their FieldSize) and which has the given expiry and number of
// headers. The offset and timestamp deltas are counted at their largest.
func RecordSize(expiry int64, headers, fields int) int {
	return 2*binary.MaxVarintLen64 + uvarintLen(uint64(expiry)) + uvarintLen(uint64(headers)) + fields
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
