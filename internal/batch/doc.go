// Package batch is the batch format of docs/storage-format.md, which is
// both the storage format and, with wire v2, part of the client protocol.
// The node (internal/storage/segment, internal/broker) and pkg/client share
// this one implementation: encoding (EncodeBatch, EncodeBatchAt, and
// Builder, which encodes records as they arrive), decoding (ParseHeader,
// Verify, DecodeRecords, Scan, SplitBatches), the checks of a producer's
// batch (CheckProduce), Rebase and Restamp, and the codecs. It does no I/O
// and imports no other package of the module.
//
// # Format
//
// A batch is the unit of storage, replication and transfer: records with
// increasing offsets (holes allowed), one header, one checksum. Format v1,
// little-endian:
//
//	 0       1       2               6                              14
//	+-------+-------+---------------+-------------------------------+
//	| magic |version|    CRC32C     |          base offset          |
//	| 0x4D  |  1    |      u32      |              u64              |
//	+-------+-------+---------------+-------------------------------+
//	14              18      20              24              28
//	+---------------+-------+---------------+---------------+
//	| batch length  | flags |last off delta | record count  |
//	|  u32 (total)  |  u16  |      u32      |      u32      |
//	+---------------+-------+---------------+---------------+
//	28                              36                              44
//	+-------------------------------+-------------------------------+
//	|   first timestamp (i64, ms)   |    max timestamp (i64, ms)    |
//	+-------------------------------+-------------------------------+
//	44                              52              56
//	+-------------------------------+---------------+--------------
//	|     max expiry (i64, ms)      |  raw length   | records ...
//	+-------------------------------+---------------+--------------
//
// The CRC32C (Castagnoli) covers bytes 6 up to the batch length: everything
// after the CRC field, so the base offset and the length are protected too.
// Magic and version come first so that a reader can reject a zero-filled
// tail at its first byte and so that a future version can change the rest.
// Flags: bits 0-2 codec (0 none, 1 zstd, 2 s2, 3 lz4), bit 3 tombstones
// present, bit 4 some record has an expiry; other bits must be zero. Max
// expiry is the time after which every record has expired, 0 when some
// record never expires. Raw length is the size of the uncompressed records
// section; with a codec the section is compressed as a whole and stored in
// its place.
//
// Each record in the records section is:
//
//	offset delta     uvarint  offset - base (0 for the first record)
//	timestamp delta  varint   timestamp - first timestamp (wrapping)
//	expiry           uvarint  absolute unix ms; 0 = never
//	key              uvarint len+1 then bytes; 0 = no key (nil)
//	value            uvarint len+1 then bytes; 0 = tombstone (nil)
//	header count     uvarint
//	headers          each: key, value as len+1 encoded bytes
//
// Encoding len+1 keeps nil and empty distinct. Decoders check every count
// and length against the bytes that remain and every header field against
// the records, bound decompression by the raw length (itself bounded by
// MaxBatchSize), and never panic.
package batch
