// Package storage is a node's directory of segments: it opens and
// recovers them, appends with group commit, reads, seals, verifies and
// deletes. The bytes of one segment — batch format, sparse index, footer —
// belong to package segment.
//
// # Files
//
// Each segment id has, in Config.Dir, <id:020d>.log (file header and
// batches), and once sealed <id>.seal (the footer, with its own CRC) and
// <id>.idx (the sparse index, a cache rebuilt when missing). Sidecars are
// written as <name>.tmp, fsynced and renamed; the directory is fsynced
// after every create, seal and delete. docs/storage-format.md has the bytes.
//
// # Durability contract
//
//   - An append is acknowledged (done(nil)) only after the fdatasync that
//     covers it (the journal's, or without it the segment file's) has
//     returned. No path acknowledges without it.
//   - Batches of one segment reach the file, and are acknowledged, in the
//     order AppendAsync accepted them.
//   - Read never returns a byte that is not yet durable: it is bounded by
//     the durable end of the last successful sync. After Open everything
//     recovered has been fsynced, so it counts as durable.
//   - Create, Seal and Delete return after the directory entry change is
//     durable.
//   - A Create of an id whose Delete or Quarantine is still removing or
//     moving the old copy's files waits for it to finish, so the old
//     copy's removal never takes a file of the new copy (its .log, or a
//     fence marker written meanwhile).
//   - A torn tail of an active segment — what a crash leaves of appends
//     never acknowledged — is truncated at Open. Everything acknowledged is
//     before it. Appends queued but not acknowledged when the process died
//     may or may not survive, always whole and in order.
//   - Sealed segments are never modified. Damage is reported (ErrCorrupt,
//     IsCorrupt) by Open (Info.Damage), Read and Verify, and the bytes are
//     kept for repair from a healthy replica.
//
// # Group commit and the node journal
//
// One commit goroutine per Store, started by Open and ended by Close,
// takes everything queued as a round. With the node journal (the default)
// it appends the round to the journal in one write, writes each segment's
// share while the journal's fdatasync runs, publishes the batches to
// readers once it returned, and fires the callbacks in queue order: one
// fsync per round however many segments it touched. A checkpoint goroutine
// fsyncs the segment files of each full journal file and then recycles it;
// Open replays what is left (replay.go, journal.go). With Config.NoJournal
// a round instead fdatasyncs each touched file once (files in parallel, so
// the filesystem can share a journal commit). While one round syncs, the
// next accumulates: the more concurrent appenders, the more batches share
// an fsync. Queued-but-unacknowledged bytes are bounded by
// MaxPendingBytes; AppendAsync blocks (respecting its context) beyond it.
//
// # Failures: fail-stop per store
//
// A failed write or fdatasync fails the callbacks of the batches not known
// durable in that round and puts the whole Store into a failed state:
// every later AppendAsync, Create and Seal returns an error wrapping
// ErrFailed; reads of durable data still work. After a failed fsync the
// kernel may have dropped the dirty pages, so the file's tail is unknown
// until it is reread, and a failing disk rarely fails one file: the node
// should close the store and reopen it, which runs recovery and trusts
// only what is on disk. Batches of other files in the same round whose
// fsync succeeded are acknowledged normally — they are durable.
//
// Running out of space is the one exception (space.go): free space below
// Config.MinFreeBytes, or ENOSPC or EDQUOT on a write (the journal, a
// segment file, a create, a seal, a journal switch), refuses appends and
// creates with ErrNoSpace (DiskState DiskFull) until CheckSpace finds
// room again; a round already durable in the journal waits to be written
// rather than refused; refused batches are never acknowledged and nothing
// acknowledged is touched. A batch neither acknowledged nor refused (it
// waited in the journal when the store closed) is answered
// ErrOutcomeUnknown, never ErrNoSpace. A node whose journal holds batches
// its files lack opens full on a disk still full, and replays them once
// CheckSpace finds room (replay_wait.go).
//
// # Fencing
//
// Seal first fences the segment (later appends get ErrSealed), queues a
// barrier behind the segment's appends and waits for it, then writes the
// index and the footer. The footer records the segment's end explicitly,
// optionally an end beyond the last batch (SealWith), never base + count.
//
// # Replica copies
//
// A follower's copy of a replicated segment takes the primary's batches
// verbatim and only at exactly its end (AppendAt; a refusal is an EndError
// carrying the copy's end), answers a fence with its fsynced end (Fence,
// Ends), cuts an unacknowledged suffix back to a batch boundary (Truncate,
// durable and crash-safe in both journal modes: the journal records the
// cut so a replay never appends a cut batch again), and is sealed at
// exactly the control plane's end (SealOptions.Exact, cutting first only
// with TruncateAbove), so copies holding the same batches have identical
// footers. A sealed copy is never cut. copy.go has the details.
package storage
