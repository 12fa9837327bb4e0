// Package sim is a deterministic simulation of a cluster's replicated
// segments and their control plane. Several nodes run the real state
// machines (replication.Primary, replication.Follower,
// replication.FailoverEnd, metadata.State, placement, and internal/heal's
// PlanHeals, Task, Verify, Scrubber and Bucket) in one goroutine,
// over a simulated network, disk and clock driven by one seeded PRNG, and
// checkers named by the ids of cluster-invariants.md watch every step.
//
// # What is simulated
//
//   - Network: every message is an event a seeded delay away; some are
//     held twenty times longer. Replication messages may be dropped,
//     duplicated and reordered (the protocol resends them); produce
//     requests and replies are lost only with a node or a partition.
//     Partitions cut one pair of nodes, one node from all others and the
//     control plane, or one node from the control plane alone.
//   - Disk: each node's store is a vfs.MemFS. A copy is a file of
//     checksummed batches, written at once and fsynced by a group commit
//     a seeded delay later; a seal cuts the copy, fsyncs it and writes a
//     seal record atomically. A crash is kill -9 (MemFS.Clone: unsynced
//     writes survive in the kernel) or a power loss (MemFS.PowerLoss:
//     unsynced writes are lost, the last maybe torn); a restart recovers
//     each copy batch by batch, checking CRCs and cutting a torn tail,
//     then applies the seals it missed. Disk faults, each a share of the
//     fault events (Config.FlipRate, FullRate, FsyncRate): one bit flipped
//     in the middle of a sealed copy at rest, in a segment that keeps two
//     other untouched copies; a full disk for a while, every write needing
//     space answering ENOSPC (one disk at a time); a failed fsync. A failed
//     write or fsync fails its copy: its unsynced tail is cut (the kernel
//     may have dropped it), it takes no more appends and acks nothing
//     above its last good fsync; a primary's failed copy fails its segment
//     over. A node with a full disk opens no segment and is placed on
//     none; a seal it cannot record waits for space.
//   - Permanent loss (Config.LossRate): a node dies and never returns, at
//     most one a run and only with five nodes or more; the heal planner
//     calls it dead DeadAfter ms after membership does.
//   - Control plane: one metadata.State, every command applied at the
//     moment it is called, in the run's one order of events: open_segment
//     with the replica set, seal_segment with the fence's answer (which
//     sets the range's next offset, W4), hold_range around a failover.
//     Its unavailability is a fault: produces then get the retriable
//     metadata_unavailable. It is not Raft: elections, stale leaders and
//     lagging views are not simulated.
//   - Nodes, as the broker wires them: a produce reaches any node, which
//     reads the range's head from the control plane (W5), opens the next
//     segment with itself as primary when there is none (HRW over the
//     nodes membership calls live, refused without a quorum of them), or
//     forwards to the primary. The primary acknowledges only what its
//     Output.Committed releases (W1). It rolls by size (fence, drain,
//     seal at exactly the fence's end). A node whose forward times out,
//     that finds the primary dead in membership, that restarted and lost
//     the primary it led, or whose roll does not drain fails the segment
//     over: hold the range, fence every copy, wait FenceGrace for every
//     answer once FailoverEnd decides, seal at the end a quorum of the
//     answers holds (quorumEnd, the node's rule, W6), release the hold. Every node applies a seal to its
//     copy (Follower.Truncate, cut, seal record) when it sees it.
//   - Repair, as the broker's heal and scrub loops: every HealEvery ms each
//     node plans with heal.PlanHeals from the control plane and
//     membership. A target fills its copy from the planned source over
//     the network in chunks (paced by the source's heal.Bucket), checks
//     every batch on write (S1), seals at the seal's end, verifies with
//     heal.Verify (against the records, bytes and content hash a roll
//     records; a failover's seal records only its end) and only then
//     records itself with a conditional set_segment_replicas, each step
//     driven by a heal.Task; a copy that does not verify tells its source,
//     which verifies its own at once. The lowest live node records the
//     drops of dead and damaged holders. A damaged holder the plan names
//     to rebuild sets its copy aside (only while the list records it
//     damaged, S4), fills a fresh one, leaves the list and rejoins it. A
//     heal.Scrubber per node verifies each listed sealed copy about every
//     ScrubEvery ms. A copy a scrub, a
//     read or a restart finds damaged, or left missing or behind its seal,
//     is recorded with mark_copy_damaged and never served; every node
//     deletes its copies the list no longer names (S4).
//   - Clients: producers with their own keys, one produce in flight each,
//     through different home nodes. A refusal that says the batch was not
//     appended sends it again; an unknown outcome gives it up.
//
// # Checkers
//
// W1 (a released produce is on a quorum's fsynced disk, byte for byte),
// W3 (a range's segments tile its offsets), W4 (a seal equals its fence's
// answer, the next offset is set to it, nothing is written to a fenced
// copy), W6 (no seal cuts a released produce, none is released above a
// seal), R1 (watermarks never move back, no copy learns one above any
// primary's, no read returns a record above the commit, every read is a
// prefix of the final log), S1 (every batch a reader gets verifies;
// damage found in a copy has a flip to explain it), S2 (every sealed copy
// holds the bytes of the first one sealed and ends at the seal), S3 (a
// heal records only a sealed copy holding exactly the segment's bytes),
// S4 (no copy is deleted while the list names it), C1 (the metadata
// invariants after every command), and at the end, once the world has
// quiesced for at most Config.Quiesce ms: every sealed segment back to its
// factor ("factor": min(factor, nodes not lost) listed copies, each on a
// live node, sealed, undamaged and byte-identical, none recorded damaged),
// no acknowledged record lost, none twice, per-key order as acknowledged,
// every node reads the same history, every range can still be written
// (liveness). A violation names its invariant.
//
// # Rules that differ from internal/replica's
//
// Two rules are stricter here than in the node today, each behind a
// switch that restores the node's rule and a scenario test showing what
// it does: a replica with no copy answers a failover's fence with the
// segment's base instead of not answering (Config.NoFenceWithoutCopy:
// the segment could never fail over), and a follower records its fence
// on disk before answering (Config.VolatileFence: a copy restarted
// before the seal acks the old primary above it, losing acknowledged
// records, W6).
//
// A third rule of internal/replica was found wrong here and fixed in
// both: a failover sealed at the highest fence answer as soon as enough
// replicas answered. The failed primary's own copy, restarted, may hold
// an fsynced tail nobody acked; sealed there, the segment's sealed bytes
// lie on that copy alone, the followers' copies are behind (never served,
// never healed from), and losing that node for good loses acknowledged
// records. Config.SealAtHighestAnswer brings the old rule back and
// TestSimFailoverSealsOnQuorum shows the loss.
//
// Each new protection has a Bug that switches it off and a test that
// requires its checker to fire: BugTrustFailedFsync and
// BugIgnoreWriteError (W1), BugServeDamaged (S1), BugRecordUnverified
// (S3), BugNoHeal (factor).
//
// # Not simulated
//
// Scrubs and verification take no simulated time (the scrub rate is not
// simulated, the interval is); membership knows at once whose disk is
// full; damage marks are not kept in the store, so a restarted node finds
// a damaged copy again by scrubbing or reading it. Failing reads, latent
// sector errors, splits, merges, retention, consumer groups, clock skew,
// and the peer transport's batching are out of scope.
//
// # Determinism and replay
//
// Run(seed, cfg) is a function of its arguments: its Result.Digest hashes
// every step. A failing seed prints its replay command,
//
//	go test ./internal/sim -run TestSimSeeds -sim.seed=N -v
//
// (-sim.trace prints every traced step, and every control-plane command,
// to stderr), and a long run is
//
//	go test ./internal/sim -run TestSimSeeds -sim.seeds=5000 -timeout 30m
package sim
