package batch

import (
	"encoding/binary"
	"fmt"

	"github.com/malachi-log/malachi/internal/slab"
)

// Builder encodes one batch record by record, as the records arrive, at
// consecutive offsets from 0: the records section grows behind room left
// for the header, which Finish fills in. Each record's bytes are copied as
// it is added, so the caller's buffers are free once Add returns. Encoding
// as records arrive costs a producer a fraction of keeping copies of them
// and calling EncodeBatch at send time, and the result is the same bytes.
//
// A Builder is contiguous, the zero Builder's mode: the batch grows in one
// buffer, and Finish returns that buffer. Or it is chunked (Chunked): the
// records section is written into a list of pooled chunks, the first
// FirstChunkSize bytes and each later one twice the one before up to
// maxChunkSize; FinishTo copies the batch into the caller's buffer,
// handing the chunks back, and AppendBatch copies it there as often as
// asked, keeping them. A producer that fills many batches at once (one per
// range of a topic, say) thus writes each record into a small buffer,
// recently used and likely cached, rather than into one of many large,
// partly filled ones, and a batch of a few records holds one small chunk.
// Both modes, and Finish, FinishTo and AppendBatch, write the same bytes
// for the same records.
//
// The zero Builder is empty and ready; Finish, FinishTo and Reset leave it
// so, in the mode it was in. A Builder is not safe for concurrent use.
type Builder struct {
	// buf is, contiguous: HeaderSize bytes of room, then the records
	// section; chunked: the chunk records are written to, behind chunks.
	buf     []byte
	chunks  [][]byte // chunked: the full chunks, in order
	prev    int      // chunked: the bytes in chunks
	chunked bool
	open    bool // a record was added (contiguous: buf holds the header room)
	owned   bool // buf is a scratch buffer: it grows through the pools
	n       int  // records added
	pending int  // headers the last record still expects
	sum     summary
	never   bool  // some record never expires
	err     error // the first misuse, returned by Finish
}

// Chunk sizes of a chunked Builder. The first is the smallest pooled
// scratch size: a batch of a few records holds no more. Each later one
// doubles, so that the room a batch holds unused is at most about what it
// has filled, up to maxChunkSize, which keeps the buffer a record lands in
// small.
const (
	FirstChunkSize = 1 << minScratchShift
	maxChunkSize   = 16 << 10
)

// Len is the number of records added since the last Finish.
func (b *Builder) Len() int { return b.n }

// RawLen is the size of the records section so far.
func (b *Builder) RawLen() int {
	if b.chunked {
		return b.prev + len(b.buf)
	}
	return max(len(b.buf)-HeaderSize, 0)
}

// Chunked switches b, which must hold no records, to the chunked mode (see
// Builder); it stays chunked. On a Builder holding records it does nothing
// but make Finish fail. A chunked Builder's chunks come from internal/slab,
// whose memory is not collected: a chunked Builder that holds records
// must be finished (FinishTo, Finish) or Reset before it is dropped, or its
// chunks stay taken for good.
func (b *Builder) Chunked() {
	if b.chunked {
		return
	}
	if b.open {
		if b.err == nil {
			b.err = fmt.Errorf("%w: Chunked after %d records", ErrInvalid, b.n)
		}
		return
	}
	b.Reset()
	b.chunked = true
}

// Reset empties b, handing its buffers back to the pools; records added
// since the last Finish are dropped. Its mode stays.
func (b *Builder) Reset() {
	switch {
	case b.chunked:
		putChunk(b.buf)
		for _, c := range b.chunks {
			putChunk(c)
		}
	case b.owned:
		putScratch(b.buf)
	}
	clear(b.chunks)
	*b = Builder{chunked: b.chunked, chunks: b.chunks[:0]}
}

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
	// Wrapping subtraction: the delta round-trips for any pair of int64s.
	tsDelta := int64(uint64(ts) - uint64(b.sum.firstTS))
	if b.chunked {
		var small [3 * binary.MaxVarintLen64]byte
		p := binary.AppendUvarint(small[:0], delta)
		p = binary.AppendVarint(p, tsDelta)
		put(b, binary.AppendUvarint(p, uint64(expiry)))
		putField(b, key)
		putField(b, value)
		put(b, binary.AppendUvarint(small[:0], uint64(headers)))
	} else {
		if b.owned {
			b.reserve(RecordSize(expiry, headers, FieldSize(len(key))+FieldSize(len(value))))
		}
		buf := binary.AppendUvarint(b.buf, delta)
		buf = binary.AppendVarint(buf, tsDelta)
		buf = binary.AppendUvarint(buf, uint64(expiry))
		buf = appendBytes(buf, key)
		buf = appendBytes(buf, value)
		b.buf = binary.AppendUvarint(buf, uint64(headers))
	}
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
// timestamp ts; chunked, it takes the first chunk, the header having no
// room in the chunks.
func (b *Builder) start(ts int64) {
	if cap(b.buf) == 0 {
		if b.chunked {
			b.buf = slab.Get(FirstChunkSize)
		} else {
			b.buf, b.owned = getScratch(FirstChunkSize), true
		}
	}
	if b.chunked {
		b.buf = b.buf[:0]
	} else {
		b.buf = append(b.buf[:0], make([]byte, HeaderSize)...)
	}
	b.open = true
	b.sum = summary{firstTS: ts, maxTS: ts}
}

// reserve makes room for n more bytes in a contiguous Builder's scratch
// buffer: a larger one from the pools takes the bytes so far, and the old
// one goes back.
func (b *Builder) reserve(n int) {
	if cap(b.buf)-len(b.buf) >= n {
		return
	}
	nb := append(getScratch(max(2*cap(b.buf), len(b.buf)+n)), b.buf...)
	putScratch(b.buf)
	b.buf = nb
}

// nextChunk ends the chunk records are written to, which is full, and
// takes the next.
func (b *Builder) nextChunk() {
	size := min(2*cap(b.buf), maxChunkSize)
	if len(b.buf) > 0 {
		if cap(b.chunks) == 0 {
			b.chunks = make([][]byte, 0, 8) // 64 KiB or so without growing
		}
		b.chunks = append(b.chunks, b.buf)
		b.prev += len(b.buf)
	} else {
		putChunk(b.buf)
	}
	b.buf = slab.Get(max(size, FirstChunkSize))
}

// putChunk hands back a chunk of a chunked Builder. Chunks come from the
// slab, from huge pages (see internal/slab for why), unless it had none to
// give: those go to the scratch pools. Slab memory is not collected, so
// every chunk taken must come back here, which Reset does.
func putChunk(c []byte) {
	if cap(c) > 0 && !slab.Put(c) {
		putScratch(c)
	}
}

// put writes p at the end of a chunked Builder's records section, filling
// the chunk and going on in the next: a record may span chunks, so every
// chunk but the last is full, and the memory a batch holds is its size
// rounded up to a chunk. (Records kept whole left a chunk of 16 KiB half
// empty for each record of 8 KiB or more.)
func put[T string | []byte](b *Builder, p T) {
	for {
		k := copy(b.buf[len(b.buf):cap(b.buf)], p)
		b.buf = b.buf[:len(b.buf)+k]
		p = p[k:]
		if len(p) == 0 {
			return
		}
		b.nextChunk()
	}
}

// putField is appendBytes for a chunked Builder.
func putField(b *Builder, f []byte) {
	var small [binary.MaxVarintLen64]byte
	if f == nil {
		put(b, small[:1]) // a nil field is 0
		return
	}
	put(b, binary.AppendUvarint(small[:0], uint64(len(f))+1))
	put(b, f)
}

// putStringField is appendString for a chunked Builder.
func putStringField(b *Builder, f string) {
	var small [binary.MaxVarintLen64]byte
	put(b, binary.AppendUvarint(small[:0], uint64(len(f))+1))
	put(b, f)
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
	switch {
	case !b.header():
	case b.chunked:
		putField(b, key)
		putField(b, value)
	default:
		if b.owned {
			b.reserve(FieldSize(len(key)) + FieldSize(len(value)))
		}
		b.buf = appendBytes(b.buf, key)
		b.buf = appendBytes(b.buf, value)
	}
}

// AddHeaderString is AddHeader for a key given as a string.
func (b *Builder) AddHeaderString(key string, value []byte) {
	switch {
	case !b.header():
	case b.chunked:
		putStringField(b, key)
		putField(b, value)
	default:
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
	if b.chunked {
		out, err := b.FinishTo(getScratch(HeaderSize+b.RawLen()), codec, maxRatio)
		if err != nil {
			Release(out)
			return nil, err
		}
		return out, nil
	}
	n, sum, err := b.end(codec)
	if err != nil {
		b.Reset()
		return nil, err
	}
	out := b.buf
	*b = Builder{}
	rawLen := len(out) - HeaderSize
	if codec != CodecNone {
		c, err := compress(getScratch(HeaderSize + rawLen/2 + 64)[:HeaderSize], out[HeaderSize:], codec)
		if err == nil && pays(len(c)-HeaderSize, rawLen, maxRatio) {
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
	sum.flags |= uint16(codec)
	putHeader(out, 0, len(out), rawLen, n, sum)
	return out, nil
}

// FinishTo is Finish, but appends the batch to dst, which it returns, and
// hands b's buffers back: a producer finishing many batches into one
// request writes each where it goes. On error dst is returned unchanged
// (in length) and b is empty too. Compressing goes through a scratch
// buffer, so that dst grows no further than the records section would.
func (b *Builder) FinishTo(dst []byte, codec Codec, maxRatio int) ([]byte, error) {
	n, sum, err := b.end(codec)
	if err != nil {
		b.Reset()
		return dst, err
	}
	start := len(dst)
	dst = b.appendRaw(append(dst, make([]byte, HeaderSize)...))
	b.Reset()
	body := start + HeaderSize
	rawLen := len(dst) - body
	if codec != CodecNone {
		c, err := compress(getScratch(rawLen/2+64), dst[body:], codec)
		if err == nil && pays(len(c), rawLen, maxRatio) {
			dst = append(dst[:body], c...)
		} else {
			codec = CodecNone
		}
		Release(c)
	}
	if length := len(dst) - start; length > MaxBatchSize || rawLen > MaxBatchSize {
		return dst[:start], tooLarge(length, rawLen)
	}
	sum.flags |= uint16(codec)
	putHeader(dst[start:], 0, len(dst)-start, rawLen, n, sum)
	return dst, nil
}

// Check reports why Finish would refuse b's batch with codec, but for its
// size once compressed: nil if it would not.
func (b *Builder) Check(codec Codec) error {
	_, _, err := b.end(codec)
	if length := HeaderSize + b.RawLen(); err == nil && length > MaxBatchSize {
		err = tooLarge(length, b.RawLen())
	}
	return err
}

// AppendBatch appends b's batch, uncompressed, to dst, as Finish would
// write it, and leaves b as it is. A producer that may have to send a batch
// again thus keeps it in b's chunks, and writes it straight into each
// request it sends rather than into a copy first. b must pass
// Check(CodecNone); a batch that does not is not appended.
func (b *Builder) AppendBatch(dst []byte) []byte {
	n, sum, err := b.end(CodecNone)
	if err != nil || HeaderSize+b.RawLen() > MaxBatchSize {
		return dst
	}
	start := len(dst)
	dst = b.appendRaw(append(dst, make([]byte, HeaderSize)...))
	putHeader(dst[start:], 0, len(dst)-start, len(dst)-start-HeaderSize, n, sum)
	return dst
}

// end checks that b holds a batch to finish with codec, and returns its
// record count and the header's summary but for the codec.
func (b *Builder) end(codec Codec) (uint32, summary, error) {
	n, sum := b.n, b.sum
	if b.never {
		sum.maxExpiry = 0
	}
	switch {
	case b.err != nil:
		return 0, sum, b.err
	case n == 0:
		return 0, sum, fmt.Errorf("%w: empty batch", ErrInvalid)
	case b.pending != 0:
		return 0, sum, fmt.Errorf("%w: record %d is missing %d headers", ErrInvalid, n-1, b.pending)
	case !codec.valid():
		return 0, sum, fmt.Errorf("%w: codec %d", ErrInvalid, codec)
	}
	sum.lastDelta = uint64(n - 1)
	return uint32(n), sum, nil
}

// appendRaw appends b's records section to dst.
func (b *Builder) appendRaw(dst []byte) []byte {
	if !b.chunked {
		return append(dst, b.buf[HeaderSize:]...)
	}
	for _, c := range b.chunks {
		dst = append(dst, c...)
	}
	return append(dst, b.buf...)
}

// pays reports whether a records section of rawLen bytes compressed to m
// bytes goes compressed: it shrank, and no more than maxRatio times (when
// maxRatio > 0).
func pays(m, rawLen, maxRatio int) bool {
	// (rawLen-1)/maxRatio < m is rawLen <= maxRatio*m, without overflow.
	return m > 0 && m < rawLen && (maxRatio <= 0 || (rawLen-1)/maxRatio < m)
}

// Buffer returns an empty buffer of capacity n or more, from the pools
// Release hands buffers back to: one to finish batches into (FinishTo).
func Buffer(n int) []byte { return getScratch(n) }

// Release hands back the buffer of a batch Finish returned, once nothing
// uses it (nor any record decoded from it), for a later Builder to reuse.
// Any byte slice may be released; nil is ignored.
func Release(b []byte) {
	if cap(b) > 0 {
		putScratch(b[:0])
	}
}
