package client

import (
	"errors"
	"fmt"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
)

// Wire v2 carries records in the storage batch encoding of
// docs/storage-format.md, which internal/batch implements for the node and
// the client alike. This file holds only what is the client's: its Codec
// names, and the mapping between its Record and the format's.

// Codec is the compression of the batches a Producer builds (wire v2).
type Codec uint8

// Codecs. Their values are the codec field of the storage batch encoding.
const (
	// CompressionNone sends records uncompressed (the default).
	CompressionNone = Codec(batchfmt.CodecNone)
	// CompressionZstd compresses each batch with zstd: the smallest
	// batches, for the most CPU.
	CompressionZstd = Codec(batchfmt.CodecZstd)
	// CompressionS2 compresses each batch with s2 (a faster Snappy): less
	// reduction than zstd at a fraction of its cost.
	CompressionS2 = Codec(batchfmt.CodecS2)
	// CompressionLZ4 compresses each batch with lz4 (one block): about
	// s2's trade-off.
	CompressionLZ4 = Codec(batchfmt.CodecLZ4)
)

func (c Codec) valid() bool { return c <= CompressionLZ4 }

// String returns "none", "zstd", "s2" or "lz4".
func (c Codec) String() string { return batchfmt.Codec(c).String() }

const (
	defaultNodeBytes = 1 << 20 // max_batch_bytes of a node that reports none
	defaultNodeRecs  = 1 << 16 // max_batch_records likewise
	// Bounds of one produce_batches request that api_versions does not
	// report (docs/wire.md): a node refuses more batches, more raw bytes,
	// or a batch claiming to inflate more than maxCompressionRatio times
	// its compressed size, as invalid_batch.
	maxRequestBatches   = 4096
	maxRequestRawBytes  = 16 << 20
	maxCompressionRatio = 1024
)

// recordSize bounds the encoded size of r in a batch's records section,
// as addRecord encodes it: used to decide whether r fits before encoding
// it.
func recordSize(r *Record) int {
	fields := batchfmt.FieldSize(len(r.Key)) + batchfmt.FieldSize(len(r.Value))
	for i := range r.Headers {
		fields += batchfmt.FieldSize(len(r.Headers[i].Key)) + batchfmt.FieldSize(len(r.Headers[i].Value))
	}
	return batchfmt.RecordSize(0, len(r.Headers), fields)
}

// addRecord encodes r into b at the next offset, with timestamp ts (unix
// ms, >= 0) and no expiry. The value is never a tombstone: as on wire v1,
// a nil Value is sent as empty. Header keys are always present, possibly
// empty.
func addRecord(b *batchfmt.Builder, r *Record, ts int64) {
	value := r.Value
	if value == nil {
		value = []byte{}
	}
	b.Add(ts, 0, r.Key, value, len(r.Headers))
	for i := range r.Headers {
		b.AddHeaderString(r.Headers[i].Key, r.Headers[i].Value)
	}
}

// finishBatch returns b's batch, at base offset 0, compressed with codec
// where that pays and a node accepts it, and empties b. Release it with
// batchfmt.Release once it is no longer needed.
func finishBatch(b *batchfmt.Builder, codec Codec) ([]byte, error) {
	out, err := b.Finish(batchfmt.Codec(codec), maxCompressionRatio)
	if errors.Is(err, batchfmt.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", ErrRequestTooLarge, err)
	}
	if err != nil {
		return nil, fmt.Errorf("malachi: %w", err)
	}
	return out, nil
}

// errBadBatch wraps every defect decodeBatch finds.
var errBadBatch = errors.New("bad batch")

// decodeBatch checks the batch b, which must be exactly one batch, as the
// storage format's decoding rules say, and appends its records to dst,
// each marked with rangeID. Byte slices alias b, or one fresh buffer for a
// compressed batch. It never panics and allocates no more than the input
// justifies. On error dst is returned unchanged in length.
func decodeBatch(b []byte, rangeID uint64, dst []Record) ([]Record, error) {
	h, err := batchfmt.ParseHeader(b)
	if err != nil {
		return dst, fmt.Errorf("%w: %w", errBadBatch, err)
	}
	if h.Length != len(b) {
		return dst, fmt.Errorf("%w: length field %d, %d bytes received", errBadBatch, h.Length, len(b))
	}
	orig := len(dst)
	err = batchfmt.Scan(b, func(r *batchfmt.Record) {
		rec := Record{Key: r.Key, Value: r.Value, Range: rangeID}
		if rec.Value == nil {
			rec.Value = []byte{} // records read back always have a value
		}
		if r.Timestamp != 0 {
			rec.Timestamp = time.UnixMilli(r.Timestamp)
		}
		if r.Expiry != 0 {
			rec.Expiry = time.UnixMilli(r.Expiry)
		}
		if len(r.Headers) > 0 {
			rec.Headers = make([]Header, len(r.Headers))
			for j, hd := range r.Headers {
				rec.Headers[j] = Header{Key: string(hd.Key), Value: hd.Value}
			}
		}
		dst = append(dst, rec)
	})
	if err != nil {
		return dst[:orig], fmt.Errorf("%w: %w", errBadBatch, err)
	}
	return dst, nil
}
