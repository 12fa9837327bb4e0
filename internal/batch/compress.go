package batch

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// The zstd encoder and decoder are safe for concurrent EncodeAll/DecodeAll
// and expensive to build, so one of each serves the process.
var (
	zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	})
	// zstdCapDecoder decodes into the capacity of the buffer it is given
	// and no further: a frame declaring more content is refused before
	// decoding, and one that does not declare its size is stopped at the
	// first block that overruns. It serves CheckProduce, which must refuse
	// a compression bomb without inflating it.
	zstdCapDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxBatchSize),
			zstd.WithDecodeAllCapLimit(true))
	})
)

// Scratch buffers are pooled by size class: class k keeps buffers of at
// least 1<<k bytes, so a request for n bytes is served from the class of n
// rounded up to a power of two and never has to grow. One pool of mixed
// sizes handed a producer building many small batches buffers too small for
// the next, and each growth cost a fresh allocation, its zeroing and its
// page faults: at 1,024 ranges that was a third of the client's CPU.
const (
	minScratchShift = 10 // 1 KiB: smaller buffers are not worth a pool
	maxScratchShift = 22 // 4 MiB: larger ones are not kept (not pinned)
)

var (
	scratchPools [maxScratchShift - minScratchShift + 1]sync.Pool
	// scratchBoxes recycles the pointers the pools hold buffers by, so
	// that handing a buffer back allocates nothing.
	scratchBoxes = sync.Pool{New: func() any { return new([]byte) }}
)

// getScratch returns an empty buffer of capacity n or more.
func getScratch(n int) []byte {
	k := max(bits.Len(uint(max(n, 1)-1)), minScratchShift)
	if k > maxScratchShift {
		return make([]byte, 0, n)
	}
	if p, ok := scratchPools[k-minScratchShift].Get().(*[]byte); ok {
		b := (*p)[:0]
		*p = nil
		scratchBoxes.Put(p)
		return b
	}
	return make([]byte, 0, 1<<k)
}

// putScratch hands b back for reuse; its bytes must be used no more.
func putScratch(b []byte) {
	c := cap(b)
	if c < 1<<minScratchShift || c > 1<<maxScratchShift {
		return
	}
	p := scratchBoxes.Get().(*[]byte)
	*p = b[:0]
	scratchPools[bits.Len(uint(c))-1-minScratchShift].Put(p)
}

// compress appends raw compressed with codec to dst.
func compress(dst, raw []byte, codec Codec) ([]byte, error) {
	switch codec {
	case CodecZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return dst, err
		}
		return enc.EncodeAll(raw, dst), nil
	case CodecS2:
		n := s2.MaxEncodedLen(len(raw))
		if n < 0 {
			return dst, fmt.Errorf("%w: records section too large for s2", ErrInvalid)
		}
		start := len(dst)
		dst = append(dst, make([]byte, n)...)
		out := s2.Encode(dst[start:], raw)
		return dst[:start+len(out)], nil
	case CodecLZ4:
		// One lz4 block; the batch header's raw length is its size.
		start := len(dst)
		dst = append(dst, make([]byte, lz4.CompressBlockBound(len(raw)))...)
		var c lz4.Compressor
		n, err := c.CompressBlock(raw, dst[start:])
		if err != nil {
			return dst[:start], fmt.Errorf("%w: lz4: %v", ErrInvalid, err)
		}
		if n == 0 && len(raw) > 0 {
			return dst[:start], fmt.Errorf("%w: lz4 could not compress %d bytes", ErrInvalid, len(raw))
		}
		return dst[:start+n], nil
	}
	return dst, fmt.Errorf("%w: codec %d", ErrInvalid, codec)
}

// decompress returns the records section of a batch whose header is h. A
// codec stream that claims or produces any length other than the header's
// RawLength (bounded by MaxBatchSize) is corrupt. s2 allocates the length
// its block header claims once that matches RawLength; zstd allocates as it
// produces output.
func decompress(body []byte, h BatchHeader) ([]byte, error) {
	switch h.Codec() {
	case CodecNone:
		if len(body) != h.RawLength {
			return nil, corruptf("records section is %d bytes, header says %d", len(body), h.RawLength)
		}
		return body, nil
	case CodecZstd:
		// The CRC has matched, so RawLength (at most MaxBatchSize) is what
		// the writer declared: sizing the output to it saves the copies of
		// growing it, and the cap stops a stream that would inflate
		// further at its first block past it.
		dec, err := zstdCapDecoder()
		if err != nil {
			return nil, err
		}
		out, err := dec.DecodeAll(body, make([]byte, 0, h.RawLength))
		if err != nil {
			return nil, corruptf("zstd: %v", err)
		}
		if len(out) != h.RawLength {
			return nil, corruptf("zstd produced %d bytes, header says %d", len(out), h.RawLength)
		}
		return out, nil
	case CodecS2:
		n, err := s2.DecodedLen(body)
		if err != nil || n != h.RawLength {
			return nil, corruptf("s2 length %d (%v), header says %d", n, err, h.RawLength)
		}
		out, err := s2.Decode(make([]byte, n), body)
		if err != nil {
			return nil, corruptf("s2: %v", err)
		}
		return out, nil
	case CodecLZ4:
		return decompressLZ4(make([]byte, h.RawLength), body, ErrCorrupt)
	}
	return nil, corruptf("codec %d", h.Codec())
}

// decompressBounded decompresses body, the records section of a batch whose
// header is h, into buf (whose capacity must be at least h.RawLength) and
// returns the result, which is exactly h.RawLength bytes. It never inflates
// more than h.RawLength bytes plus, for zstd, one block (128 KiB): s2 is
// refused when its block claims another length, zstd when its frame
// declares more or its output overruns. Errors wrap kind.
func decompressBounded(buf, body []byte, h BatchHeader, kind error) ([]byte, error) {
	n := h.RawLength
	switch h.Codec() {
	case CodecZstd:
		dec, err := zstdCapDecoder()
		if err != nil {
			return nil, err
		}
		out, err := dec.DecodeAll(body, buf[:0:n])
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			return nil, failf(kind, "zstd section inflates beyond raw length %d", n)
		}
		if err != nil {
			return nil, failf(kind, "zstd: %v", err)
		}
		if len(out) != n {
			return nil, failf(kind, "zstd produced %d bytes, raw length is %d", len(out), n)
		}
		return out, nil
	case CodecS2:
		m, err := s2.DecodedLen(body)
		if err != nil {
			return nil, failf(kind, "s2: %v", err)
		}
		if m != n {
			return nil, failf(kind, "s2 block claims %d bytes, raw length is %d", m, n)
		}
		out, err := s2.Decode(buf[:n], body)
		if err != nil {
			return nil, failf(kind, "s2: %v", err)
		}
		return out, nil
	case CodecLZ4:
		return decompressLZ4(buf[:n], body, kind)
	}
	return nil, failf(kind, "codec %v is not compressed", h.Codec())
}

// decompressLZ4 decodes one lz4 block into out, whose length is the raw
// length: a block cannot write past it, so the allocation is the declared
// length and no more, and one that decodes to any other length is refused.
func decompressLZ4(out, body []byte, kind error) ([]byte, error) {
	n, err := lz4.UncompressBlock(body, out)
	if err != nil {
		return nil, failf(kind, "lz4: %v", err)
	}
	if n != len(out) {
		return nil, failf(kind, "lz4 produced %d bytes, raw length is %d", n, len(out))
	}
	return out, nil
}
