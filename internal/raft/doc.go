// Package raft is the multi-raft host: it runs every metadata Raft group a
// node replicates (the vnodes and the root group) on go.etcd.io/raft/v3's
// RawNode, with one transport path, one durable log and one driver for all
// of them.
//
// A node hosts many small groups (8 vnodes × 3 replicas spread over the
// cluster by default, tested to 256 per host), and most are idle most of
// the time. Running each as its own raft instance, with its own
// connections, heartbeats and fsyncs, would make the idle cost and the
// fsync rate grow with the group count. The host shares everything that
// can be shared:
//
//   - Batching per node pair. Process collects the Readies of every group
//     and sends one frame per destination node per cycle carrying the
//     messages of all groups. Frames per node pair per tick therefore do
//     not grow with the group count (TestHeartbeatsCoalesced).
//   - Coalesced heartbeats. Heartbeats and heartbeat responses, which are
//     most of an idle group's traffic, travel inside that frame as compact
//     records (group, term, commit) and are expanded back into raft
//     messages at the receiver, as CockroachDB does. Heartbeats that carry
//     a ReadIndex context travel whole, since the record drops the context.
//   - One fsync per cycle. The entries, hard states and received snapshots
//     of every group in the cycle are handed to LogStore.Save together, so
//     a cycle costs one fsync whether it touched one group or all of them.
//     The etcd Ready contract is kept synchronously: Save returns before any
//     message of the cycle is sent, then committed entries are applied and
//     each RawNode is advanced. (AsyncStorageWrites would pipeline the
//     fsync with the next cycle; metadata traffic is light enough that the
//     simpler contract wins.)
//
// Idle groups are not quiesced. RawNode.TickQuiesced is deprecated in v3.7,
// and quiescing safely needs node liveness to wake followers of a dead
// leader; with coalescing an idle group costs a few bytes per heartbeat
// inside frames that are sent anyway: about 120 bytes/s per group across
// three hosts, and 2.8 ms of CPU per second per host at 64 groups (13 ms at
// 256), measured by BenchmarkIdleTick over an in-memory network.
//
// The core (Tick, Receive, Process) has no goroutine and no clock: tests
// drive it by hand, deterministically. Run drives it in production from one
// goroutine on an internal/clock timer. Callers' Propose, ReadBarrier,
// ChangeReplicas and TransferLeadership go through a mutex shared with
// the cycle, so a
// StateMachine, which runs inside the cycle, must not call the Host.
// Leadership alone takes no lock: each cycle publishes every group's
// leader and term, so callers that only route by leadership never wait
// on a cycle held in a slow fsync.
//
// Proposals are made only at a group's leader (DisableProposalForwarding);
// elsewhere they return a NotLeaderError with the leader as a hint. An
// entry's data is an envelope (host incarnation, sequence, payload) that
// matches the applied entry to its waiter, which receives the state
// machine's result. Requests never hang: leadership loss, a group's
// removal, a tick timeout or the host stopping fail them, with errors that
// say whether the outcome is unknown. Every table has a bound: groups,
// requests in flight per group, frame size, received frames waiting,
// entries per received message. Only the message types raft sends between
// replicas are stepped from a frame; a proposal never enters from a peer.
//
// A fault in one group stops that group on this node, not the node: when
// raft panics (its log contradicts what the leader knows of it, typically
// a replica that lost its log and rejoined under its old node id) or a
// committed entry cannot be read by this build (an unknown envelope
// version: skipping it would let replicas diverge), the group's requests
// fail with ErrGroupFailed, Status reports the reason, and the node's
// other groups keep running. A replica change is refused, retriable,
// while raft would silently drop it (another is unapplied, or a new
// leader has not applied its earlier entries).
//
// Snapshots are taken every Options.SnapshotEvery applied entries and after
// every replica change (raft ignores a snapshot whose configuration does
// not name the receiver), and the log is compacted behind them, keeping
// Options.CompactMargin entries. A lagging follower receives the snapshot
// whole in one MsgSnap inside a frame, so a state machine's snapshot must
// fit in Options.MaxFrameBytes (16 MiB by default); metadata snapshots are
// far smaller. A replica that joins a group (AddGroup) starts empty and is
// filled from a snapshot, since every group is bootstrapped from an
// index-1 snapshot rather than from configuration entries.
//
// A host reopened over the same LogStore recovers every group: the state
// machine is restored from the latest snapshot and the stored committed
// entries after it are applied again.
package raft
