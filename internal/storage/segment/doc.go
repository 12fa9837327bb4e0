// Package segment holds one segment's bytes: the .log file of batches with
// its sparse offset index, and the seal footer.
//
// The batch format itself (encoding, CRC, codecs, the checks of a
// producer's batch) lives in internal/batch, which pkg/client shares;
// batch.go here re-exports its names (types, constants, errors and
// functions) so that the storage layer's callers need not import both
// packages. The error sentinels are the same values: ErrCorrupt is
// batch.ErrCorrupt, so errors.Is matches either name.
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
// loss could take back. PlanCut and ApplyCut cut an active segment back to
// a batch boundary: the kept batches are reread to rebuild the index,
// counts and content hash, and the file is truncated and fsynced while
// readers are held off. A failed write or sync is sticky: the segment takes
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
