// Package replica runs the replication state machines of
// internal/replication for one node: the Primary of every active segment
// the node leads and the Follower of every copy it keeps for another
// node's segment, over the peer transport (peer.ChannelReplication) and
// the node's segment store.
//
// A Host is the I/O shell; the protocol, and why each rule holds, is in
// internal/replication's package documentation. What the shell adds:
//
//   - Primary side. Append restamps the produced batch (W2), ships it to
//     the followers and appends it to the local store; the store's fsync
//     callback reports LocalSynced, a follower's Ack reports its fsync,
//     and a produce's done runs once the commit watermark passes its end
//     (W1). Reads the Primary asks for (a follower behind what memory
//     holds) run on the host's loop, never on the store's commit path.
//   - Follower side. The first Append of a segment creates the copy at the
//     segment's base, only when the control plane (Config.Lookup) lists
//     this node in its replica set and names the sender as primary; each
//     accepted batch goes to AppendAtAsync, and the fsync callback sends
//     the Ack. The watermark a copy learns bounds the reads it serves (R1).
//   - Rolls. Fence latches a primary and waits until everything appended
//     is committed, answering the end the seal must record (W4). SealCopy
//     applies the control plane's seal to a copy: exact, cut above it
//     (the seal says that suffix was never acknowledged), or left unsealed
//     and reported when the copy is behind.
//   - Failover. FenceCopies fences the surviving replicas of a segment
//     whose primary failed and decides the seal with
//     replication.FailoverEnd (W6). A live primary asked to fence latches
//     itself and refuses to answer: its answer must not count. Once
//     enough replicas answered it waits a few ticks for the rest, and
//     seals at the end a quorum of the answers holds (quorumEnd), not
//     the highest: a tail only the failed primary fsynced was never
//     acknowledged, and sealing it in would leave the sealed segment on
//     that one copy, the others behind it and never served. A copy the
//     fence itself created (the node held none: never reached, or back on
//     an empty disk) answers flagged Unknown and does not count there.
//
// Goroutines: one, Run, owned by the caller, which handles incoming
// messages, resends on ticks and catch-up reads, and exits with its
// context. Transport handlers only decode and queue (bounded: a full
// inbox drops, and the primary's resends cover the loss); store
// callbacks only update state and send.
//
// Bounds (B1): at most Config.MaxSegments segments are tracked (Open and
// a new copy are refused past it); a primary holds at most
// replication.Config.MaxRetainedBytes of batches, past which Append
// answers ErrBackpressure (retriable: followers or the local disk are
// behind); the inbox holds at most Config.Inbox messages and
// Config.InboxBytes of them (Dropped counts what it refused).
//
// Ownership: Append copies the batch it is given. The primary keeps it
// until every follower acked it, past the produce's answer, and the
// caller's buffer may be a client server's pooled request frame.
package replica
