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
// for longer is dead and its copies no longer count; so is a node the
// control plane records as removed (Input.Removed), at once: an
// operator's removal is final, and waiting would only leave its segments
// short. A node membership simply does not know is neither: its copies
// count, as if it went down within the grace. When fewer copies
// count than the segment's factor, Plan answers a task: a source (a live,
// undamaged holder, verified ones first) and new targets chosen by
// placement.Replace, which keeps every counted copy and honours the
// spread and skew constraints. A target never has a full or failing disk
// and is never down. It holds no copy of the segment, unless the nodes
// without one cannot make up the factor: then a damaged holder may be a
// target too, to rebuild its own copy (Assignment.Rebuild), since when
// every live node holds a copy, some damaged, nothing else could bring
// the segment back to its factor. Bounds on tasks in flight per node and in total keep
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
// that second command is recorded.
//
// A holder rebuilding its damaged copy sets that copy aside (it counts
// for nothing and is never served), fills and verifies a fresh one, and
// only then sends a first command that takes it off the list: the
// metadata clears a damage mark only when its holder leaves the list.
// The healthy source stays listed, so no serving copy is lost. The second
// command adds it back with the other targets, and the drops follow as
// above. Until its leave is recorded the list names the holder, so its
// copy is never cleaned up; the next rebuild sets it aside again.
//
// A failure before anything was
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
