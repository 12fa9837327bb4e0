// Package metastore is the single-node durable home of the metadata state
// machine: a command log plus snapshots in one directory, behind vfs.FS.
// Later, Raft's log takes the place of this one; the state machine does not
// change.
//
// # Files
//
//	log-<index>        commands, appended; <index> is the number of commands
//	                   applied before its first one (20 digits)
//	snapshot-<index>   the state after <index> commands
//	snapshot-<index>.tmp   a snapshot being written; removed by Open
//
// A log record is a little-endian u32 payload length, a little-endian u32
// CRC32C of the payload, and the payload: the JSON of one metadata.Command.
// A snapshot file is one such record whose payload is the JSON envelope
// {"format":1,"index":N,"state":<metadata.State.Snapshot()>}.
//
// # Durability
//
// Apply runs the command on the head state under a mutex, so log order is
// apply order. A refused command returns at once and is never logged. An
// accepted one is queued; the Store's committer goroutine writes everything
// queued with one write and one fsync (group commit: commands that arrive
// during an fsync share the next one), then answers the callers. Nothing is
// acknowledged before its fsync.
//
// Readers never see a command that is not durable. The store keeps two
// copies of the state: the head, which validates and answers commands, and
// the view, which View exposes and to which the committer applies each batch
// after its fsync and before answering its callers. So a reader cannot act
// on metadata (say, a freshly opened segment) that a crash could take back,
// and a caller sees its own write in View once Apply returns. The price is
// applying every command twice and holding the state twice.
//
// If a log write or fsync fails, the store fails stop: that Apply and every
// later one return ErrFailed. The head already holds commands the disk may
// hold fully, partly or not at all, and after a failed fsync Linux may drop
// the dirty pages and report the next fsync clean; carrying on could
// acknowledge commands built on state the disk lacks. Reopening replays
// exactly what the disk holds. View keeps serving the durable state.
//
// # Snapshots
//
// Every Options.SnapshotEvery commands (default 10000), and on Snapshot,
// the view is written to snapshot-<index>.tmp, fsynced, renamed and the
// directory fsynced; then log-<index> is created and takes the appends. The
// two newest snapshots and every log holding a command from the older one
// on are kept, so a damaged newest snapshot falls back to the previous one
// plus logs. A log's name says where it starts, not where it ends, so a log
// is removed only once the next log starts at or before the older kept
// snapshot. A snapshot Open found damaged does not count as one of the two.
//
// # Recovery
//
// Open loads the newest snapshot that decodes and passes the state
// machine's invariant check, then replays the logs after it, skipping
// records the snapshot already holds (a crash between a snapshot's rename
// and the new log leaves the old log covering it; Open then creates the new
// log itself). Each log must start no later than where the state stands, or
// the store refuses to open. In the last log, a short record, a zero length
// or a CRC mismatch with no well-formed record anywhere after it is a torn
// tail: it is truncated. Damage followed by a well-formed record is
// corruption (ErrCorrupt): truncating would drop acknowledged commands, so
// Open refuses and leaves the files alone. The one loss this cannot tell
// from a torn write is damage inside the very last record, which is cut
// like a torn one. A logged command that the state machine refuses on
// replay is also ErrCorrupt.
//
// Everything Open replays is durable before it returns, because View
// serves it at once and new commands build on it. After a kill -9 the last
// log's tail, the entry of a log created just before it, or a snapshot's
// rename may still be only in the page cache, so Open fsyncs the last log
// (cut or not), the directory, and the directory's parent (the directory's
// own entry), every time.
//
// Only one Store may use a directory at a time; nothing enforces it.
package metastore
