// Package sim is a deterministic simulation of a cluster's replicated
// segments and their control plane. Several nodes run the real state
// machines (replication.Primary, replication.Follower,
// replication.FailoverEnd, metadata.State, placement) in one goroutine,
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
//     then applies the seals it missed.
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
//     over: hold the range, fence every copy, seal at FailoverEnd of the
//     answers (W6), release the hold. Every node applies a seal to its
//     copy (Follower.Truncate, cut, seal record) when it sees it.
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
// prefix of the final log), S1 (every batch read back verifies), S2
// (sealed copies are byte-identical and end at their seal), C1 (the
// metadata invariants after every command), and at the end: no
// acknowledged record lost, none twice, per-key order as acknowledged,
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
// # Not simulated
//
// Healing: a copy left behind at a seal stays unsealed (counted in
// Stats.CopiesBehind); reads go to a complete copy. Splits, merges,
// retention, consumer groups, disk faults other than crashes (bit flips,
// full disks), clock skew, and the peer transport's batching are out of
// scope.
//
// # Determinism and replay
//
// Run(seed, cfg) is a function of its arguments: its Result.Digest hashes
// every step. A failing seed prints its replay command,
//
//	go test ./internal/sim -run TestSimSeeds -sim.seed=N -v
//
// and a long run is
//
//	go test ./internal/sim -run TestSimSeeds -sim.seeds=5000 -timeout 30m
package sim
