package segment

import (
	"fmt"
	"hash/crc32"

	"github.com/malachi-log/malachi/internal/batch"
)

// The batch format lives in internal/batch; these are its names under this
// package, for the storage layer and its callers. The types are aliases and
// the errors the same values, so a segment.Record is a batch.Record and
// errors.Is(err, segment.ErrCorrupt) holds for batch.ErrCorrupt.

type (
	Record        = batch.Record
	Header        = batch.Header
	Codec         = batch.Codec
	BatchHeader   = batch.BatchHeader
	ProduceLimits = batch.ProduceLimits
)

const (
	HeaderSize     = batch.HeaderSize
	Magic          = batch.Magic
	Version        = batch.Version
	MaxBatchSize   = batch.MaxBatchSize
	FlagTombstones = batch.FlagTombstones
	FlagExpiry     = batch.FlagExpiry

	CodecNone = batch.CodecNone
	CodecZstd = batch.CodecZstd
	CodecS2   = batch.CodecS2
	CodecLZ4  = batch.CodecLZ4
)

// ErrCorrupt is also what this package wraps for damage it finds in segment
// files, sidecars and indexes.
var (
	ErrCorrupt    = batch.ErrCorrupt
	ErrShortBatch = batch.ErrShortBatch
	ErrBadVersion = batch.ErrBadVersion
	ErrInvalid    = batch.ErrInvalid
	ErrBadBatch   = batch.ErrBadBatch
)

// ParseHeader is batch.ParseHeader.
func ParseHeader(b []byte) (BatchHeader, error) { return batch.ParseHeader(b) }

// Verify is batch.Verify.
func Verify(b []byte) error { return batch.Verify(b) }

// Rebase is batch.Rebase.
func Rebase(b []byte, base uint64) error { return batch.Rebase(b, base) }

// Restamp is batch.Restamp.
func Restamp(b []byte, base uint64) error { return batch.Restamp(b, base) }

// SplitBatches is batch.SplitBatches.
func SplitBatches(buf []byte) ([][]byte, error) { return batch.SplitBatches(buf) }

// EncodeBatch is batch.EncodeBatch.
func EncodeBatch(dst []byte, base uint64, recs []Record, codec Codec) ([]byte, error) {
	return batch.EncodeBatch(dst, base, recs, codec)
}

// EncodeBatchAt is batch.EncodeBatchAt.
func EncodeBatchAt(dst []byte, recs []Record, codec Codec) ([]byte, error) {
	return batch.EncodeBatchAt(dst, recs, codec)
}

// DecodeRecords is batch.DecodeRecords.
func DecodeRecords(b []byte, dst []Record) ([]Record, error) { return batch.DecodeRecords(b, dst) }

// CheckProduce is batch.CheckProduce.
func CheckProduce(b []byte, lim ProduceLimits, inside func(key []byte) bool) (BatchHeader, bool, error) {
	return batch.CheckProduce(b, lim, inside)
}

// castagnoli is the CRC32C table of the segment file header, the seal
// footer and the index file (batches checksum themselves in package batch).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
