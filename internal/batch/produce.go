package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ProduceLimits bound a batch a client built. Every limit applies as
// written: the zero value refuses every batch (a raw length or record count
// above 0), so a caller that forgets a field fails closed. MaxHeaders 0
// refuses records that carry headers.
type ProduceLimits struct {
	MaxRawBytes int  // uncompressed records section (declared raw length); refuse above
	MaxRecords  int  // records in the batch
	MaxHeaders  int  // headers per record
	AllowExpiry bool // per-record expiry accepted (false until TTL ships)
}

// ErrBadBatch is wrapped by every refusal of CheckProduce (distinct from
// ErrCorrupt, which means our own disk data is bad).
var ErrBadBatch = errors.New("invalid batch")

func badf(format string, args ...any) error { return failf(ErrBadBatch, format, args...) }

// CheckProduce validates a client-built batch b, which must be exactly one
// batch (len(b) equals its length field), without materialising records,
// so that the broker can rebase it (Rebase) and append the bytes as
// received. Beyond the decoding rules (see docs/storage-format.md) it
// requires: record count equal to the offset span (a producer's batch has
// no holes; the base offset's value is ignored, since the broker rewrites
// it, as long as the span fits after it as the decoding rules require), a
// first timestamp and record timestamps >= 0, raw length <= MaxRawBytes,
// record count <= MaxRecords, headers per record <= MaxHeaders, and no
// expiry (flag, max expiry or record expiry) unless AllowExpiry. A
// compressed section is inflated into pooled scratch of the declared raw
// length and no further, so a compression bomb is refused, never inflated.
//
// For every record with a non-nil key it calls inside(key) (unless inside
// is nil), and keysInside is false if any call returned false; validation
// goes on regardless, so a nil error with keysInside false means a valid
// batch with keys outside. inside may be called for keys of a batch that is
// then refused. On error h is zero and keysInside false; every error wraps
// ErrBadBatch (and ErrBadVersion for an unknown magic or version), never
// ErrCorrupt.
//
// It does not allocate per record, and for an uncompressed batch it does
// not allocate at all unless it refuses it.
func CheckProduce(b []byte, lim ProduceLimits, inside func(key []byte) bool) (h BatchHeader, keysInside bool, err error) {
	r, err := CheckProduceReport(b, lim, inside)
	return r.Header, r.KeysInside, err
}

// ReservedPrefix starts the header keys the node owns (a record's TTL,
// the expiry the node stamped): a batch carrying one cannot be stored as
// the producer built it.
const ReservedPrefix = "malachi."

// ProduceReport is what CheckProduceReport learns of a valid batch.
type ProduceReport struct {
	Header BatchHeader
	// KeysInside is CheckProduce's keysInside.
	KeysInside bool
	// Reserved says some record carries a header whose key starts with
	// ReservedPrefix.
	Reserved bool
}

// CheckProduceReport is CheckProduce that also reports whether some record
// carries a reserved header, found while the records are walked anyway
// (a prefix compare per header key, no allocation).
func CheckProduceReport(b []byte, lim ProduceLimits, inside func(key []byte) bool) (rep ProduceReport, err error) {
	h, raw, scratch, err := checkProduceHeader(b, lim)
	if err != nil {
		return ProduceReport{}, err
	}
	if scratch != nil {
		defer putScratch(scratch)
	}
	w, err := newRecWalker(raw, h, ErrBadBatch, skipHeaders)
	if err != nil {
		return ProduceReport{}, err
	}
	keysInside := true
	var rec Record // a view: its slices alias raw
	for w.more() {
		i := w.i
		nh, err := w.next(&rec)
		if err != nil {
			return ProduceReport{}, err
		}
		switch {
		case rec.Timestamp < 0:
			return ProduceReport{}, badf("record %d timestamp %d is negative", i, rec.Timestamp)
		case rec.Expiry != 0 && !lim.AllowExpiry:
			return ProduceReport{}, badf("record %d has an expiry, which is not accepted", i)
		case nh > lim.MaxHeaders:
			return ProduceReport{}, badf("record %d has %d headers, above limit %d", i, nh, lim.MaxHeaders)
		}
		if rec.Key != nil && inside != nil && !inside(rec.Key) {
			keysInside = false
		}
	}
	if err := w.finish(); err != nil {
		return ProduceReport{}, err
	}
	return ProduceReport{Header: h, KeysInside: keysInside, Reserved: w.reserved}, nil
}

// checkProduceHeader checks everything CheckProduce can check before the
// record walk and returns the header and the uncompressed records section.
// When that section was inflated, scratch is the pooled buffer holding it,
// to be returned with putScratch once the section is no longer used.
func checkProduceHeader(b []byte, lim ProduceLimits) (h BatchHeader, raw, scratch []byte, err error) {
	if len(b) < HeaderSize {
		return h, nil, nil, badf("%d bytes, shorter than the %d-byte batch header", len(b), HeaderSize)
	}
	if b[offMagic] != Magic || b[offVersion] != Version {
		return h, nil, nil, fmt.Errorf("%w: %w: magic %#x version %d", ErrBadBatch, ErrBadVersion, b[offMagic], b[offVersion])
	}
	h = decodeHeader(b)
	if h.Length != len(b) {
		return h, nil, nil, badf("batch length field says %d bytes but %d were sent", h.Length, len(b))
	}
	// The base offset's value is the broker's to rewrite, but the header
	// must still leave room for the span after it: the batch as sent must
	// pass Verify, Rebase and DecodeRecords.
	if err := h.check(ErrBadBatch); err != nil {
		return h, nil, nil, err
	}
	if got, want := crc32.Checksum(b[crcStart:], castagnoli), binary.LittleEndian.Uint32(b[offCRC:]); got != want {
		return h, nil, nil, badf("crc mismatch: computed %#08x, header says %#08x", got, want)
	}
	switch span := uint64(h.LastOffsetDelta) + 1; {
	case uint64(h.RecordCount) != span:
		return h, nil, nil, badf("record count %d but offsets span %d", h.RecordCount, span)
	case h.FirstTimestamp < 0:
		return h, nil, nil, badf("first timestamp %d is negative", h.FirstTimestamp)
	case h.RawLength > lim.MaxRawBytes:
		return h, nil, nil, badf("raw length %d above limit %d", h.RawLength, lim.MaxRawBytes)
	case int64(h.RecordCount) > int64(lim.MaxRecords):
		return h, nil, nil, badf("record count %d above limit %d", h.RecordCount, lim.MaxRecords)
	case !lim.AllowExpiry && (h.HasExpiry() || h.MaxExpiry != 0):
		return h, nil, nil, badf("per-record expiry is not accepted (flags %#x, max expiry %d)", h.Flags, h.MaxExpiry)
	case int(h.RecordCount) > h.RawLength/MinRecordSize:
		// Refused before inflating anything.
		return h, nil, nil, badf("%d records cannot fit in raw length %d", h.RecordCount, h.RawLength)
	}
	body := b[HeaderSize:]
	if h.Codec() == CodecNone {
		if len(body) != h.RawLength {
			return h, nil, nil, badf("records section is %d bytes, raw length says %d", len(body), h.RawLength)
		}
		return h, body, nil, nil
	}
	// RawLength is at most lim.MaxRawBytes here, so the scratch is bounded
	// by the limit rather than by what the stream would inflate to.
	scratch = getScratch(h.RawLength)
	raw, err = decompressBounded(scratch, body, h, ErrBadBatch)
	if err != nil {
		putScratch(scratch)
		return h, nil, nil, err
	}
	return h, raw, scratch, nil
}
