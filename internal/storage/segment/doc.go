// Package segment holds one segment's bytes: the batch format, its CRC,
// the .log file with its sparse offset index, and the seal footer.
//
// # Batches
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
// Flags: bits 0-2 codec (0 none, 1 zstd, 2 s2), bit 3 tombstones present,
// bit 4 some record has an expiry; other bits must be zero. Max expiry is
// the time after which every record has expired, 0 when some record never
// expires. Raw length is the size of the uncompressed records section; with
// a codec the section is compressed as a whole and stored in its place.
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
//
// # Segment files
//
// A segment is a .log file: a 32-byte file header (magic "MLOG", version,
// segment id, base offset, CRC32C) followed by batches. The segment's end
// offset is tracked explicitly (the last offset + 1 of the last batch, or
// an explicit end given at seal), never computed as base + count: offsets
// may have holes. Appends name their offsets; a batch whose base is below
// the end is refused with ErrOffsetRegression.
//
// A sparse in-memory index maps base offsets to file positions: the first
// batch, then one batch every IndexIntervalBytes. It is built while
// appending and rebuilt on open by scanning; at seal it is persisted as an
// .idx file, which is only a cache: when missing or inconsistent it is
// rebuilt from batch headers.
//
// At seal a .seal sidecar (80 bytes, its own CRC) records base, end,
// record count, batch bytes, content hash (xxhash64 of the batch bytes,
// i.e. the .log after its file header), max expiry, max timestamp and
// generation.
//
// # Durability
//
// Append writes without syncing; Sync fdatasyncs and only then advances the
// durable end that Read is bounded by, so a reader never sees bytes a power
// loss could take back. A failed write or sync is sticky: the segment takes
// no more writes, because after a failed fsync the state of the file's
// tail is unknown until recovery rereads it.
//
// Recover (active segments) verifies every batch and truncates a torn tail
// — a short or invalid batch with nothing valid after it — and fsyncs what
// remains. An invalid batch followed by a valid one is damage, not a torn
// append, and is reported (ErrCorrupt) without truncating. OpenSealed
// trusts a sealed segment's structure and never modifies it; damage shows
// up as ErrCorrupt from Read and Verify.
package segment
