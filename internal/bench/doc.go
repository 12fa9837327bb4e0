// Package bench is the workload engine behind `malachi bench`: it drives a
// node through the public client (pkg/client), measures throughput and
// latency, and reports them as text or JSON.
//
// # Workloads
//
//   - produce: P producers, each on its own connection, write Records
//     records of Size bytes to a topic (created if absent, with Ranges
//     ranges). With Sync each record is one request and the producer waits
//     for its ack before the next; otherwise a client.Producer batches
//     records (Batch records at most, lingering Linger) and keeps several
//     requests in flight. Latency is from the record's origin (below) to
//     its ack, which the broker sends only once the record is durable. In
//     closed loop an async producer counts and times acks per produce
//     request instead (client.ProducerOptions.OnBatch, no promise per
//     record), because per-record promises and clock reads would cost the
//     client more CPU than producing the records: every record counts
//     with its request's latency, measured from the moment the request's
//     first record was handed to the client (FromBatch), which bounds each
//     record's own from above.
//   - consume: C consumers read the topic. Via "fetch" each consumer reads
//     the whole topic with its own cursor (fan-out: C×Records deliveries)
//     and latency is the round trip of each non-empty fetch. A fetch
//     consumer reads through a client.Fetcher: the next fetch goes out as
//     soon as the cursor at the head of the previous answer has arrived,
//     before the rest of that page, and up to two pages are read ahead of
//     the worker, which walks each (client.BatchPage.Each, without
//     building a client.Record per record) and releases it once counted.
//     With wire v1 the pages come one fetch at a time. Via "group"
//     the consumers are members of one fresh group fed by push
//     subscriptions with a credit window, and count Records deliveries
//     between them (redeliveries after a rebalance count, a surplus past
//     Records does not); a stream that breaks is reopened from the group's
//     commit. There is no request to time, so no latency is reported.
//   - e2e: consumers start first, then producers; every value carries its
//     origin time in its first 8 bytes (big-endian Unix nanoseconds) and
//     latency is receipt time minus that origin. Producer and consumer
//     share the process and so the clock. Records stamped before the run
//     began (left by earlier runs) are read but not counted.
//   - meta (RunMeta, its own MetaConfig): the metadata path. Count topics
//     are created, each is described, and each gets a first group
//     position (a commit, always a write), one operation at a time per
//     worker, each timed from request to answer. With Vnodes the names are
//     picked (by hashing, not by asking) so that every topic maps to one
//     vnode of the ring, and a run talks to one Raft group: through its
//     leader or through a follower that forwards.
//
// # Wire versions
//
// The Dialer decides the wire version (client.WithWireVersion); the run
// reports what the connections negotiated (Result.Wire). With wire v2 an
// async producer's batches travel in the storage encoding, compressed as
// Config.Compression says, and a fetch consumer reads whole stored
// batches per fetch (up to MaxBytes) instead of up to PageMax records; a
// sync producer sends each record as a one-record batch.
//
// # Closed and open loop
//
// Closed loop (Rate 0) sends as fast as acks and the client's buffers
// allow: a record is sent when the previous work lets it, and its latency
// is measured from the moment it was actually sent (sync), or its produce
// request's first record was (async). This finds maximum
// throughput, but its latency figures hide stalls: while the broker is
// stuck, the load generator is stuck too and simply stops sending, so the
// records that a real client would have sent during the stall, and that
// would have waited, are never measured. This is coordinated omission.
//
// Open loop (Rate R records/s in all) fixes a schedule up front: record i
// of a producer is due at start + i/(R/P), whatever happened before, and
// its latency is measured from that due time, not from when it could be
// sent. After a stall the backlog is sent at once and every record of it
// carries the time it waited to be sent. This is the correction for
// coordinated omission: the histogram then describes what clients
// arriving at rate R would see. When the broker cannot keep up with R the
// latencies grow without bound, which is the truthful answer. Producers
// are staggered by 1/R so that P producers do not send in bursts of P.
//
// # Histograms
//
// Latencies are recorded in microseconds into HDR histograms (3
// significant digits, 1 µs to 1 h; larger values are clamped), one per
// worker so that workers never wait on each other's lock, and merged at
// the end.
// Percentiles are p50, p90, p99, p99.9 and max. Throughput counts value
// bytes only (not keys or headers), in MB of 10^6 bytes.
package bench
