// Package heal decides how a cluster repairs its sealed segments: which
// under-replicated segments to copy where (Plan), when a copy may be
// recorded and an old one dropped (Task), how fast repair and scrub
// traffic may go (Bucket), which local copy to re-verify next (Scrubber),
// and whether a copy matches its seal (Verify). It is pure: no I/O, no
// goroutines, no clock, no locks. Time is an input in unix milliseconds,
// as in the metadata commands, and the same inputs always give the same
// answers, so a plan can be replayed and tested without a cluster.
//
// # Planning
//
// A sealed segment counts the copies that can still serve it: those on
// live nodes that no scrub found damaged, and those on nodes that went
// down less than the dead-after grace ago (they may come back; healing
// around a restart would copy whole segments for nothing). A node down
// for longer is dead and its copies no longer count. When fewer copies
// count than the segment's factor, Plan answers a task: a source (a live,
// undamaged holder, verified ones first) and new targets chosen by
// placement.Replace, which keeps every counted copy and honours the
// spread and skew constraints. A target never already holds the segment
// (damaged copies included), never has a full or failing disk and is
// never down. Bounds on tasks in flight per node and in total keep
// repair from starving produce; a segment already healing is not
// planned again, and a segment that cannot be healed is reported with a
// reason rather than skipped in silence.
//
// # Add before remove (S3, S4)
//
// A Task runs
//
//	placed → filling → verified → recorded → done
//	   └──────────┴──────────┴─────────┴→ failed (reason)
//
// The new replica list (the old one plus the targets) is submitted only
// once every target reported a copy that Verify found whole against the
// seal's end, record count, bytes and content hash. Copies being replaced
// (on dead nodes, or damaged) leave the list only in a second command,
// after the first is recorded; a damaged file may be deleted only after
// that second command is recorded. A failure before anything was
// submitted lets the targets' partial copies be deleted (no metadata ever
// named them); a submit whose answer never came leaves them in place,
// since the control plane may have recorded them. A segment whose only
// copies are damaged has no healthy source: it is reported and its copies
// kept, never dropped.
//
// # Pace
//
// Bucket is a token bucket in bytes per second with a burst bound;
// repair and scrub reads each take from one before reading a chunk.
// Scrubber spreads each copy's verification over the scrub interval
// (the first one at a point fixed by the segment id, so that a node that
// restarts does not verify everything at once) and says when the
// configured rate cannot verify every copy within the interval.
package heal
