// Package logstore is the durable Raft log of every group on a node: one
// write-ahead log shared by all groups, with one write and one fsync per
// Save however many groups it carries. Each group reads its log through a
// GroupStorage, which implements raft.Storage.
//
// # Use
//
// The multi-raft host collects the Ready of every group in a processing
// cycle into one Save (an Update per group: snapshot, entries, hard
// state), then sends the messages that needed them. After the state
// machine snapshots a group at index i it calls SetSnapshot (the snapshot
// at i) and then Compact (drop entries up to an index at or before i).
// RemoveGroup drops a group that left this node. Each of these is durable
// when it returns and visible through Storage at the same moment, never
// before: a reader cannot see a write that a crash could take back.
//
// The semantics are raft.MemoryStorage's: Update.Snapshot is
// ApplySnapshot, Update.Entries is Append (a conflicting suffix is
// replaced), SetSnapshot is CreateSnapshot, Compact is Compact. Where
// MemoryStorage would panic (a gap in the entries, a compaction past the
// last index) the store refuses with ErrInvalid instead; it also refuses
// a compaction past the snapshot, which would strand a lagging follower,
// and a local snapshot whose term is not the log's at its index. A
// refused write changes nothing, on disk or in memory. Entries passed to
// Save are kept, not copied: like raft, the store never changes them, and
// neither may the caller.
//
// # Files
//
//	raftlog-<seq>       the log; <seq> counts files (20 digits)
//	raftlog-<seq>.tmp   a file being started; removed by Open
//
// A record is framed as in internal/metastore: a little-endian u32
// payload length, a little-endian u32 CRC32C of the payload, the payload.
// A payload is a little-endian u64 group id, a kind byte and a body:
//
//	header     (group 0) format u32, seq u64, dump length u64
//	reset      dummy index u64, dummy term u64, snapshot (protobuf):
//	           replaces the group's log (a leader's snapshot, or a dump)
//	entries    uvarint count, then per entry uvarint length + protobuf
//	hardstate  protobuf
//	snapshot   protobuf: a snapshot the state machine took locally
//	compact    index u64
//	remove     empty
//	commit     (group 0) empty: ends a batch
//
// Every write is one batch: its records, then a commit record. Replay
// applies a batch only once it reads its commit, so a Save is atomic
// across a crash: it is recovered whole or not at all.
//
// A file starts with a header and a dump: every group's live state (a
// reset record, its entries, its hard state) as one batch. So each file
// stands alone, and the newest one is the whole log.
//
// # Rotation
//
// Before a write, once the active file has passed Options.FileBytes and
// holds at least as many appended bytes as dumped ones, the store writes
// the next file under its .tmp name, fsyncs it, renames it, fsyncs the
// directory, then appends there and deletes the older files. A file with
// its final name therefore always holds its whole dump. A failure before
// the rename refuses that write and leaves the store as it was; a
// failure after it fails the store.
//
// # Recovery
//
// Open reads every file in order and checks it; the state is the newest
// file's. Older files exist only after a crash during a rotation, and
// must be whole: any damage in them is ErrCorrupt. In the newest file, a
// batch without its commit, or a damaged record with no well-formed
// record anywhere after it, is a torn tail and is cut off; damage followed
// by a well-formed record, or a file that does not hold its whole dump, is
// ErrCorrupt. Open refuses corruption and leaves every file as it is.
// The one loss this cannot tell from a torn write is damage inside the
// last batch, which is cut like a torn one.
//
// A killed process can leave its last batches, or a rotation's rename,
// only in the page cache. Open serves them, so it first makes them
// durable: it cuts the tail, fsyncs the newest file and the directory
// (and the directory's parent), every time, and only then deletes older
// files.
//
// # Failures and bounds
//
// A failed write or fsync fails the store: every later write returns
// ErrFailed, since after a failed fsync Linux may drop the dirty pages
// and report the next fsync clean. Readers keep the state of the last
// successful write; reopening recovers what the disk holds.
//
// Options bound the entry bytes of one Save, one snapshot's data, the
// live bytes and the groups held in memory (ErrTooLarge, ErrFull), and
// the file size. The live state (a dummy entry, the entries after it, the
// newest snapshot and the hard state of each group) is held in memory,
// which suits metadata logs that compaction keeps short.
//
// Writers are serialised; readers run concurrently with them and never
// wait for the disk. Only one Store may use a directory at a time;
// nothing enforces it.
package logstore
