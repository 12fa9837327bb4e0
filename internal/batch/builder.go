package batch

import (
	"encoding/binary"
	"fmt"
)

// Builder encodes one batch record by record, as the records arrive, at
// consecutive offsets from 0: the records section grows behind room left
// for the header, which Finish fills in. Each record's bytes are copied as
// it is added, so the caller's buffers are free once Add returns. Encoding
// as records arrive costs a producer a fraction of keeping copies of them
// and calling EncodeBatch at send time, and the result is the same bytes.
//
// The zero Builder is empty and ready; Finish leaves it so. A Builder is not
// safe for concurrent use.
type Builder struct {
	buf     []byte // HeaderSize bytes of room, then the records section
	open    bool   // buf holds the room for the header (or is appendRecords' dst)
	owned   bool   // buf is a scratch buffer: it grows through the pools
	n       int    // records added
	pending int    // headers the last record still expects
	sum     summary
	never   bool  // some record never expires
	err     error // the first misuse, returned by Finish
}

// Len is the number of records added since the last Finish.
func (b *Builder) Len() int { return b.n }

// RawLen is the size of the records section so far.
func (b *Builder) RawLen() int { return max(len(b.buf)-HeaderSize, 0) }

// Add encodes a record at the next offset: timestamp ts (unix ms), expiry
// (absolute unix ms, >= 0; 0 = never), key (nil: no key) and value (nil:
// tombstone). The record has headers headers, to be added in order with
// AddHeader or AddHeaderString before the next Add or Finish.
func (b *Builder) Add(ts, expiry int64, key, value []byte, headers int) {
	b.add(uint64(b.n), ts, expiry, key, value, headers)
}

// add encodes a record at offset base + delta up to its header count; its
// headers follow. It is the one place that knows a record's layout:
// EncodeBatch writes its records through it too (appendRecords).
func (b *Builder) add(delta uint64, ts, expiry int64, key, value []byte, headers int) {
	if !b.open {
		b.start(ts)
	}
	if b.pending != 0 || expiry < 0 || headers < 0 {
		b.misuse(expiry, headers)
		headers = max(headers, 0)
	}
	if b.owned {
		b.reserve(RecordSize(expiry, headers, FieldSize(len(key))+FieldSize(len(value))))
	}
	buf := binary.AppendUvarint(b.buf, delta)
	// Wrapping subtraction: the delta round-trips for any pair of int64s.
	buf = binary.AppendVarint(buf, int64(uint64(ts)-uint64(b.sum.firstTS)))
	buf = binary.AppendUvarint(buf, uint64(expiry))
	buf = appendBytes(buf, key)
	buf = appendBytes(buf, value)
	b.buf = binary.AppendUvarint(buf, uint64(headers))
	b.pending = headers
	b.sum.maxTS = max(b.sum.maxTS, ts)
	if value != nil && expiry == 0 {
		b.never = true // the common case, kept short
	} else {
		b.note(value == nil, expiry)
	}
	b.n++
}

// note adds a tombstone or a record's expiry to the header's summary.
func (b *Builder) note(tombstone bool, expiry int64) {
	if tombstone {
		b.sum.flags |= FlagTombstones
	}
	if expiry == 0 {
		b.never = true
	} else {
		b.sum.flags |= FlagExpiry
		b.sum.maxExpiry = max(b.sum.maxExpiry, expiry)
	}
}

// start makes room for the header of a batch whose first record has
// timestamp ts.
func (b *Builder) start(ts int64) {
	if cap(b.buf) == 0 {
		b.buf, b.owned = getScratch(0), true
	}
	b.buf = append(b.buf[:0], make([]byte, HeaderSize)...)
	b.open = true
	b.sum = summary{firstTS: ts, maxTS: ts}
}

// Grow makes room for n more bytes of records (and the header, before the
// first record), so that records adding up to n bytes are added without
// growing the buffer. A producer that knows how large a batch will likely
// get saves the growth steps.
func (b *Builder) Grow(n int) {
	need := n
	if !b.open {
		need += HeaderSize
	}
	if n <= 0 || cap(b.buf)-len(b.buf) >= need {
		return
	}
	if !b.owned && cap(b.buf) == 0 {
		b.buf, b.owned = getScratch(need), true
		return
	}
	b.reserve(need)
}

// reserve makes room for n more bytes in a scratch buffer: a larger one
// from the pools takes the bytes so far, and the old one goes back.
func (b *Builder) reserve(n int) {
	if cap(b.buf)-len(b.buf) >= n {
		return
	}
	nb := append(getScratch(max(2*cap(b.buf), len(b.buf)+n)), b.buf...)
	putScratch(b.buf)
	b.buf = nb
}

// misuse records why Add's arguments, or the previous record's headers,
// are wrong, unless something was already.
func (b *Builder) misuse(expiry int64, headers int) {
	switch {
	case b.err != nil:
	case b.pending != 0:
		b.err = fmt.Errorf("%w: record %d is missing %d headers", ErrInvalid, b.n-1, b.pending)
	case expiry < 0:
		b.err = fmt.Errorf("%w: negative expiry at record %d", ErrInvalid, b.n)
	case headers < 0:
		b.err = fmt.Errorf("%w: %d headers at record %d", ErrInvalid, headers, b.n)
	}
}

// AddHeader adds the next header of the record Add began; nil and empty
// key or value stay distinct.
func (b *Builder) AddHeader(key, value []byte) {
	if b.header() {
		if b.owned {
			b.reserve(FieldSize(len(key)) + FieldSize(len(value)))
		}
		b.buf = appendBytes(b.buf, key)
		b.buf = appendBytes(b.buf, value)
	}
}

// AddHeaderString is AddHeader for a key given as a string.
func (b *Builder) AddHeaderString(key string, value []byte) {
	if b.header() {
		if b.owned {
			b.reserve(FieldSize(len(key)) + FieldSize(len(value)))
		}
		b.buf = appendString(b.buf, key)
		b.buf = appendBytes(b.buf, value)
	}
}

// header counts a header off the last record's, reporting whether it had
// one left.
func (b *Builder) header() bool {
	if b.pending == 0 {
		if b.err == nil {
			b.err = fmt.Errorf("%w: more headers than declared at record %d", ErrInvalid, b.n-1)
		}
		return false
	}
	b.pending--
	return true
}

// AddRecord adds r (its Offset aside: offsets are consecutive) with its
// headers.
func (b *Builder) AddRecord(r *Record) {
	b.Add(r.Timestamp, r.Expiry, r.Key, r.Value, len(r.Headers))
	for i := range r.Headers {
		b.AddHeader(r.Headers[i].Key, r.Headers[i].Value)
	}
}

// Finish returns the batch of the records added, at base offset 0, and
// empties b. With a codec other than CodecNone the records section is
// compressed, unless compressing fails, does not shrink it, or shrinks it
// more than maxRatio times (when maxRatio > 0; a node may refuse a batch
// that claims to inflate more): then the batch goes uncompressed, which its
// header says. The batch is in a buffer b owned; hand it to Release once
// nothing uses it.
//
// Errors wrap ErrInvalid: no records, a record whose header count
// disagrees with the headers added, a negative expiry, an unknown codec,
// or a batch beyond MaxBatchSize (ErrTooLarge).
func (b *Builder) Finish(codec Codec, maxRatio int) ([]byte, error) {
	out, n, sum := b.buf, b.n, b.sum
	if b.never {
		sum.maxExpiry = 0
	}
	err := b.err
	switch {
	case err != nil:
	case n == 0:
		err = fmt.Errorf("%w: empty batch", ErrInvalid)
	case b.pending != 0:
		err = fmt.Errorf("%w: record %d is missing %d headers", ErrInvalid, n-1, b.pending)
	case !codec.valid():
		err = fmt.Errorf("%w: codec %d", ErrInvalid, codec)
	}
	*b = Builder{}
	if err != nil {
		Release(out)
		return nil, err
	}
	rawLen := len(out) - HeaderSize
	if codec != CodecNone {
		c, err := compress(getScratch(HeaderSize + rawLen/2 + 64)[:HeaderSize], out[HeaderSize:], codec)
		// (rawLen-1)/maxRatio < m is rawLen <= maxRatio*m, without overflow.
		if m := len(c) - HeaderSize; err == nil && m > 0 && m < rawLen && (maxRatio <= 0 || (rawLen-1)/maxRatio < m) {
			Release(out)
			out = c
		} else {
			Release(c)
			codec = CodecNone
		}
	}
	if len(out) > MaxBatchSize || rawLen > MaxBatchSize {
		Release(out)
		return nil, tooLarge(len(out), rawLen)
	}
	sum.lastDelta = uint64(n - 1)
	sum.flags |= uint16(codec)
	putHeader(out, 0, len(out), rawLen, uint32(n), sum)
	return out, nil
}

// Release hands back the buffer of a batch Finish returned, once nothing
// uses it (nor any record decoded from it), for a later Builder to reuse.
// Any byte slice may be released; nil is ignored.
func Release(b []byte) {
	if cap(b) > 0 {
		putScratch(b[:0])
	}
}
