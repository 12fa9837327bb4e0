// Package replication holds the per-segment replication state machines:
// the Primary, which assigns offsets and moves the commit watermark, the
// Follower, which keeps a byte-identical copy, and FailoverEnd, which
// decides where a segment whose primary failed is sealed. It also encodes
// the messages they exchange.
//
// The package is pure: no I/O, no goroutines, no clock, no locks. Inputs
// are method calls (time is the now argument, in milliseconds by
// convention); outputs are returned values: messages to send, batches to
// write, store reads to make, produces to acknowledge. The broker owns the
// goroutines, the store and the transport (internal/peer), and serialises
// the calls on each state machine.
//
// # The protocol
//
// A segment has a replica set, the primary first. The primary appends each
// produced batch at the next offset (W2), writes it to its store and sends
// it to every follower in an Append, which also carries the commit
// watermark. A follower accepts batches only at exactly the offset it
// expects, writes them, and once its store has fsynced them sends an Ack
// of its fsynced end. The watermark is the highest end fsynced on a quorum
// (a majority) of the replica set, the primary's own fsync counted as one
// vote; a produce is acknowledged only when the watermark passes its end
// (W1).
//
//	client        primary P             follower F2          follower F3
//	  |  produce     |                       |                    |
//	  |------------->| Append(b) -> base 10  |                    |
//	  |              | store.AppendAsync     |                    |
//	  |              |--Append[10,13) wm=10->|                    |
//	  |              |--Append[10,13) wm=10--------------------->| (lost)
//	  |              |                       | store write, fsync |
//	  |              |<------Ack(13)---------|                    |
//	  |              | LocalSynced(13)       |                    |
//	  |              | quorum {P, F2}: wm=13 |                    |
//	  |<--acked------| Committed [10,13)     |                    |
//	  |              |--Append[13,13) wm=13->|                    |
//	  |              |  ... F3 silent for ResendAfter: Tick ...   |
//	  |              |--Append[10,13) wm=13--------------------->|
//	  |              |<--------------------------------Ack(13)----|
//
// Rules, and why each exists:
//
//   - Only the primary assigns offsets, and it stamps them into the batch
//     before anyone stores it (W2): every copy then holds the same bytes at
//     the same offsets, so any copy can serve reads, be sealed or heal
//     another, and a sealed segment has one content hash.
//   - A follower accepts only at its expected offset. A message starting
//     above it is answered Behind(has), and the primary sends again from
//     has; the part of a message it already has is skipped, and a message
//     it wholly has is answered with an Ack of its fsynced end, not written
//     again. Messages may be lost, repeated or reordered: a copy is always
//     a prefix of the primary's bytes, and every resend is safe.
//   - Messages that overtake one another draw one Behind each, all naming
//     the same gap; the first resend fills it. So after resending from an
//     offset, the primary answers no Behind at or above it for
//     ResendAfter (a lost resend is Tick's): a reordered window costs one
//     more window, not one per message.
//   - A Behind below the follower's ack resets that follower's vote to
//     has. Either it is older than the ack (reordered), and the follower,
//     which wholly has what is resent, answers with an Ack of its fsynced
//     end that restores the vote; or the copy came back with less than
//     it acked (a replaced disk), and it must catch up from has, and its
//     vote must not count the bytes it lost. The watermark never moves
//     back. (An incarnation number in Ack and Behind would tell the two
//     apart and save the resend, at the cost of one more field every
//     caller must keep across restarts.)
//   - Any quorum commits: the primary's own fsync is one vote, not a
//     required one, so the watermark is the second of three fsyncs. The
//     node's shell (internal/replica) answers a produce only once the
//     primary's own copy is durable too: its store serves fsynced bytes
//     only, so answering earlier would let a read through the primary,
//     made right after the answer, miss the record. Answering on the
//     watermark alone was measured and gained nothing beyond noise on one
//     shared disk (docs/perf.md).
//   - The watermark counts fsyncs, never writes, and only grows (W1, R1).
//     Followers learn it from every Append; reads on any node stop at the
//     watermark that node learned, so a reader never sees a record that a
//     failover could still drop (R1, W6). A restarted copy forgets it
//     unless the caller kept it and restarts the copy with
//     RestoreFollower; NewFollower starts it at the base.
//   - Bounded (B1): the primary holds at most MaxRetainedBytes of batches;
//     an append past that is refused with ErrBackpressure (retriable) and a
//     batch larger than the window with ErrTooLarge. Only batches that are
//     committed and locally fsynced are dropped from memory, so a follower
//     that falls behind them is caught up through a Read output: the caller
//     reads [From, To) from its store and hands the bytes to ReadDone. A
//     follower has at most one Read outstanding; an ack or Behind that
//     moves it to where memory serves gives the read up, and a read it
//     moved past while the read ran is shipped from where it now stands.
//     At most MaxInflightBytes are sent to a follower and not yet acked: a
//     message goes only if it fits the room left, except that a message
//     may always go to a follower with nothing in flight, so a batch
//     larger than the window still moves. An Append carries at most
//     MaxMessageBytes of batches (one batch always fits), and Append
//     refuses with ErrTooLarge a batch that one message could not carry
//     within the transport's frame (Config.MaxFrameBytes, internal/peer's
//     16 MiB by default), since no follower could ever receive it.
//   - Tick sends again, from its last ack, to a follower that lacks
//     something and was neither sent to nor heard from for ResendAfter.
//     A watermark-only Append is not answered, so a follower that already
//     has every batch is sent the last watermark once more after a quiet
//     ResendAfter; a follower that misses both learns it with the next
//     append. The clock may step back: the primary then counts
//     ResendAfter from the step, so resends are not held back for as long
//     as the step.
//
// # Rolls: fencing the primary
//
// Primary.Fence latches the segment: every later Append is refused with a
// *SealedError carrying the end, the successor's base. It answers the end
// of everything appended. Appends made before the fence are not lost:
// the primary keeps shipping them and they commit as a quorum fsyncs
// them, each released in Output.Committed as usual; Drained reports when
// all are committed, and that is when the caller records the seal, with
// exactly the end the fence answered (W4; after the seal the range's next
// offset is set to it). If the primary dies first, the segment is still
// active and fails over as below; the caller fails the produces still
// waiting (retriable), and the records among them that no quorum fsynced
// may be dropped by the failover seal, which W6 allows because none was
// acknowledged.
//
// # Failover: fencing the survivors
//
// When the primary dies, its active segment is sealed from fence answers
// of the other replicas. Follower.Fence latches the copy (nothing is
// accepted after it, W4) and answers its fsynced end, never its appended
// end, because:
//
//   - the answer must survive a crash of the answering node: a seal above
//     every surviving copy would name records nobody holds;
//   - it is enough: every acknowledged record was fsynced by a quorum, and
//     a replica only acks what it fsynced.
//
// A fenced copy also sends no Ack, even for an fsync that completes after
// the fence, so its answer bounds its votes. FailoverEnd waits for
// answers from AnswersNeeded = RF - quorum + 1 replicas: any such set
// meets every quorum, so for each acknowledged record one answer is at or
// above its end, and the seal, the highest answer, keeps every ack (W6).
// This holds only for the quorum the Primary commits on, the majority:
// FailoverEnd refuses any other, as a larger one would ask for too few
// answers.
// The replicas left unfenced number at most quorum - 1, so not even a
// primary that is in fact alive can gather a quorum above the seal
// afterwards. FailoverEnd also names the Source, a replica holding the
// seal end, and the replicas Behind it, which catch up from the source.
// The failed primary's own Fence answer (everything appended, fsynced or
// not) does not count: a primary node that comes back runs its copy as a
// Follower over its recovered store and answers like one (that is how a
// segment with RF 1 fails over). A primary that is in fact alive and is
// asked answers with Primary.FenceAnswer, which latches it and says its
// Role; FailoverEnd never counts such an answer and lists its node as
// Unknown, so a live primary's unacknowledged suffix cannot raise the
// seal.
//
// Once the control plane records the seal, each copy applies it with
// Follower.Truncate: a copy holding more (an unacknowledged suffix that
// reached its store) is cut at the seal, one holding less reports what it
// is missing. A seal below the watermark the copy learned would cut
// acknowledged records; Truncate refuses it and leaves the bytes alone
// (W6, S4). A copy is sealed once (S2): Truncate remembers the seal it
// applied, answers the same seal again, and refuses another with
// ErrSealConflict. That memory, like the fence, lasts as long as the
// Follower; after a restart the store's own seal record is what holds.
//
// A fence lives in memory: a fenced follower that restarts must be fenced
// again (the control plane knows the segment is failing over) before it
// acks anything. Its new answer can only be higher.
//
// # Messages
//
// Every message starts with Version (1) and a Kind byte; integers are
// unsigned varints, an Append's batches are a byte string (length,
// bytes) of at most MaxAppendBytes, and a role is one byte (0 follower,
// 1 primary):
//
//	append        segment, base, end, watermark, batches
//	ack           segment, end (fsynced)
//	behind        segment, has
//	fence         segment
//	fence-answer  segment, end, role[, 1 when Unknown]
//
// Decode refuses an unknown version or kind, truncated input, trailing
// bytes, a byte string longer than the bytes left or than MaxAppendBytes,
// an Append ending below its base, and an unknown role. Batches are checked for framing and
// offsets here (each starts where the last ended, from Base to End); their
// CRCs are checked by the store when it appends them (S1).
//
// # Tests
//
// Table tests cover each transition. TestModel runs a primary and its
// followers over a lossy, reordering, duplicating network with follower
// crashes (keeping or losing the learned watermark; in runs ending in a
// roll, losing the disk) and a final roll or failover in which the live
// old primary may be asked too, for many seeds; a failing seed
// prints the command that replays it (-model.seed=N). FuzzDecode runs its
// corpus in every test run; search further with
//
//	go test ./internal/replication -run '^$' -fuzz FuzzDecode -fuzztime 60s
package replication
