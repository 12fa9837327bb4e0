package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// head is the write head of one active range: its active segment and the
// next offset to assign. Offsets are assigned and batches enqueued to the
// segment store under mu, so the order on disk is the order of assignment.
// The fsync wait happens outside mu: group commit coalesces the waits.
type head struct {
	mu       sync.Mutex
	rangeID  uint64
	topicID  uint64
	segment  uint64 // active segment id; 0 = none open yet
	repl     bool   // the active segment is replicated: appends go through the replica host
	next     uint64 // next offset to assign
	bytes    int64  // bytes enqueued to the active segment
	openedAt time.Time
	// rollBytes is the size at which the active segment rolls, read from
	// the topic's policy when the segment became this head's (so a
	// policy change applies from the next segment): 0 = the node's
	// SegmentMaxBytes, < 0 = the policy turned the size roll off.
	rollBytes int64
	// written and activeBytes are read by the range coordinator without
	// the head lock: bytes enqueued ever, and bytes in the active segment.
	written     atomic.Int64
	activeBytes atomic.Int64
	// retired is set once the range is sealed (split, merge, delete): a
	// produce that finds it re-routes through fresh metadata.
	retired bool
	// ready is set by reconcileLocked once the fields above reflect the
	// metadata and the store, and cleared by any failure that may have left
	// them behind (a half-done open or roll), so the next user finishes it.
	ready bool
	// fwd queues the produces this node forwards to the node writing the
	// range, when that is another node (cluster_forward.go).
	fwd fwdQueue
	// prepared is set once openHeads readied this head: an unready head
	// it already tried (one another node writes stays unready) is left to
	// the appends, so no request pays for it twice.
	prepared bool
}

// errRetired tells the router a range stopped taking writes under it.
var errRetired = errors.New("broker: range retired")

// maxRouteAttempts bounds re-routing when ranges keep changing under a
// produce (a split racing it). Each attempt follows a committed metadata
// change, so running out means something is wrong, not just busy.
const maxRouteAttempts = 16

// Record is a record as the broker receives it from a producer.
type Record = segment.Record

// ProduceAsync routes records by key to their ranges, assigns offsets and
// enqueues one batch per range. Each record's expiry is set from its TTL
// and the node clock (ttl.go); the records' Expiry fields and headers are
// changed in place. It returns once every batch is enqueued,
// so calls made one after another keep their order per key; done is then
// called once, with the number of records, after every batch is durable
// (or with the first error). done must not block.
func (b *Broker) ProduceAsync(ctx context.Context, topic string, recs []Record, done func(int, error)) error {
	if b.closed.Load() {
		return ErrShuttingDown
	}
	if len(recs) == 0 {
		done(0, nil)
		return nil
	}
	// Stamped once, here at the front door: the expiry travels with the
	// records wherever they are forwarded or re-routed (ttl.go).
	recs = stampRecords(recs, b.defaultTTLByName(topic), b.nowMs())
	ctx, span := b.cfg.Tracer.Start(ctx, tracing.SpanBrokerProduce, trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrTopic.String(topic), tracing.AttrRecords.Int(len(recs)))
		done = endWith(span, done)
	}
	wait := newProduceWait(len(recs), done)
	if err := b.routeInto(ctx, topic, recs, wait, true); err != nil {
		tracing.End(span, err)
		return err
	}
	wait.sealed()
	return nil
}

// endWith is done, ending span with its outcome first.
func endWith(span trace.Span, done func(int, error)) func(int, error) {
	return func(n int, err error) {
		tracing.End(span, err)
		done(n, err)
	}
}

// Tracer is the node's tracer (off when nil), for the client server's
// spans.
func (b *Broker) Tracer() *tracing.Tracer { return b.cfg.Tracer }

// routeInto routes records to their ranges and enqueues them on wait,
// re-routing what a split or merge retired under it. A routing failure
// before anything was enqueued is returned when first is set (the caller
// then reports it and wait is untouched); any other failure goes to wait.
// The caller seals wait.
func (b *Broker) routeInto(ctx context.Context, topic string, pending []Record, wait *produceWait, first bool) error {
	return b.routeAfter(ctx, topic, pending, wait, first, 0)
}

// routeAfter is routeInto for records that a forward queue routes again
// (after is that queue's place; 0 for a produce): records whose key a
// younger forward queue of a retired range still holds go behind it
// (cluster_forward.go), so they keep their order per key.
func (b *Broker) routeAfter(ctx context.Context, topic string, pending []Record, wait *produceWait, first bool, after uint64) error {
	tokens := 0
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == maxRouteAttempts {
			wait.setErr(ErrRetry)
			return nil
		}
		groups, topicID, err := b.route(topic, pending)
		if err != nil {
			if tokens == 0 && first {
				return err
			}
			wait.setErr(err)
			return nil
		}
		pending = pending[:0:0]
		if len(groups) > 1 {
			b.openHeads(topicID, groupRanges(groups))
		}
		for _, g := range groups {
			tokens++
			recs := b.queueBehind(ctx, topic, topicID, g, wait, after)
			if len(recs) == 0 {
				continue
			}
			rctx, span := b.cfg.Tracer.Start(ctx, tracing.SpanRoute, trace.SpanKindInternal)
			if span.IsRecording() {
				span.SetAttributes(tracing.AttrRange.Int64(int64(g.rangeID)), tracing.AttrRecords.Int(len(recs)))
			}
			err := b.appendToRange(rctx, topic, topicID, g.rangeID, recs, wait)
			if errors.Is(err, errRetired) {
				span.AddEvent("range retired: routed again") // not a failure of the produce
				span.End()
			} else {
				tracing.End(span, err)
			}
			if errors.Is(err, errRetired) {
				pending = append(pending, recs...) // nothing was enqueued for them
				continue
			}
			if err != nil {
				wait.setErr(err)
			}
		}
	}
	return nil
}

// Produce is ProduceAsync followed by the wait for durability.
func (b *Broker) Produce(ctx context.Context, topic string, recs []Record) (int, error) {
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	if err := b.ProduceAsync(ctx, topic, recs, func(n int, err error) { ch <- result{n, err} }); err != nil {
		return 0, err
	}
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

type rangeGroup struct {
	rangeID uint64
	span    keyspace.Span // the range's keys
	bits    uint8         // the topic's keyspace bits
	recs    []Record
}

// route groups records by the active range that owns their key, keeping
// their relative order. Records without a key go round-robin across ranges.
func (b *Broker) route(topic string, recs []Record) ([]rangeGroup, uint64, error) {
	var (
		groups  []rangeGroup
		topicID uint64
		err     error
	)
	err = metadata.ErrNoSuchTopic
	_ = b.plane.ViewTopicName(topic, func(st *metadata.State) {
		t, ok := st.TopicHeader(topic)
		if !ok {
			return
		}
		err = nil
		topicID = t.ID
		ranges := st.ActiveRanges(t.ID)
		if len(ranges) == 0 {
			err = ErrRetry
			return
		}
		if len(ranges) == 1 {
			groups = []rangeGroup{{rangeID: ranges[0].ID, span: spanOf(ranges[0]), bits: t.Bits, recs: recs}}
			return
		}
		index := make(map[uint64]int, len(ranges))
		for _, r := range recs {
			var rg metadata.Range
			if r.Key == nil {
				rg = ranges[b.keyless.Add(1)%uint64(len(ranges))]
			} else {
				pos := keyspace.Position(r.Key, t.Bits)
				found, ok := st.ActiveRangeFor(t.ID, pos)
				if !ok {
					err = fmt.Errorf("broker: no active range covers position %d of %q", pos, topic)
					return
				}
				rg = found
			}
			i, ok := index[rg.ID]
			if !ok {
				i = len(groups)
				index[rg.ID] = i
				groups = append(groups, rangeGroup{rangeID: rg.ID, span: spanOf(rg), bits: t.Bits})
			}
			groups[i].recs = append(groups[i].recs, r)
		}
	})
	return groups, topicID, err
}

func spanOf(r metadata.Range) keyspace.Span { return keyspace.Span{Start: r.Start, End: r.End} }

// Stored batches are cut at these sizes: a fetch page (at most 1000
// records on wire v1) then decodes about one batch rather than a client's
// whole 10,000-record request, and a read of one batch stays small.
const (
	maxBatchRecords = 512
	maxBatchBytes   = 256 << 10
)

// maxHeadRepairs bounds how often one append reconciles its head after
// finding it half rolled; each repair is a committed metadata change, so
// running out means something is wrong, not just busy.
const maxHeadRepairs = 4

// appendToRange encodes recs as batches at the range's next offsets and
// enqueues them; wait receives one part per enqueued batch, after the
// fsync that covers it. When another node writes the range, the records
// are queued for it instead (forwardRecordsLocked), in the same order.
func (b *Broker) appendToRange(ctx context.Context, topic string, topicID, rangeID uint64, recs []Record, wait *produceWait) error {
	h := b.headFor(topicID, rangeID)
	h.mu.Lock()
	defer h.mu.Unlock()
	notify := b.watchFor(topicID)
	enqueued, repairs := 0, 0
	for len(recs) > 0 {
		if h.fwd.busy {
			return b.forwardRecordsLocked(ctx, h, 0, topic, recs, wait, false)
		}
		err := b.writableLocked(h)
		if err == nil {
			var n int
			n, err = b.enqueueLocked(ctx, h, recs, wait, notify)
			recs = recs[n:]
			enqueued += n
		}
		node, remote := isNotOwner(err)
		if errors.Is(err, metadata.ErrActiveSegmentExists) {
			b.catchUpUnlocked(h) // another node opened the range's segment first
		}
		switch {
		case err == nil:
		case remote && b.data != nil:
			return b.forwardRecordsLocked(ctx, h, node, topic, recs, wait, false)
		case errors.Is(err, errRetired) && enqueued > 0:
			// Part of the group is in: re-routing all of it would
			// duplicate that part, so the produce fails instead.
			return ErrRetry
		case errors.Is(err, errRetired):
			return err
		case !h.ready && repairs < maxHeadRepairs:
			repairs++ // a half-done roll or open: reconcile and go on
		default:
			return err
		}
	}
	return nil
}

// writableLocked readies h and opens a segment if it has none.
//
// REQUIRES: h.mu held.
func (b *Broker) writableLocked(h *head) error {
	if err := b.readyLocked(h); err != nil {
		return err
	}
	if h.retired {
		return errRetired
	}
	if h.segment == 0 {
		return b.openSegmentLocked(h)
	}
	return nil
}

// enqueueLocked encodes one stored batch from the front of recs and
// enqueues it, rolling the segment once it is full. It returns how many
// records it enqueued. A segment that refuses the append because it was
// sealed or found damaged under the head marks the head unready.
//
// REQUIRES: h.mu held, h writable.
func (b *Broker) enqueueLocked(ctx context.Context, h *head, recs []Record, wait *produceWait, notify *watch) (int, error) {
	n := chunkLen(recs)
	batch, err := segment.EncodeBatch(nil, h.next, recs[:n], b.cfg.Codec)
	if err != nil {
		return 0, err
	}
	if err := b.enqueueBatchLocked(ctx, h, batch, n, wait, notify); err != nil {
		return 0, err
	}
	return n, nil
}

// enqueueBatchLocked enqueues an encoded batch of n records whose base is
// h.next, and rolls the segment once it is full.
//
// REQUIRES: h.mu held, h writable.
func (b *Broker) enqueueBatchLocked(ctx context.Context, h *head, batch []byte, n int, wait *produceWait, notify *watch) error {
	if h.repl {
		return b.replicateBatchLocked(ctx, h, batch, n, wait)
	}
	wait.add()
	topicID, rangeID, end := h.topicID, h.rangeID, h.next+uint64(n)
	_, span := b.cfg.Tracer.Start(ctx, tracing.SpanFsync, trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrSegment.Int64(int64(h.segment)), tracing.AttrRecords.Int(n), tracing.AttrBytes.Int(len(batch)))
	}
	err := b.store.AppendAsync(ctx, storage.SegmentID(h.segment), batch, func(err error) {
		tracing.End(span, err)
		if err == nil {
			notify.fire()
			if b.data != nil {
				b.data.appended(topicID, rangeID, end)
			}
		}
		wait.part(retryWhenFull(err))
	})
	if err != nil {
		tracing.End(span, err)
		wait.part(nil)
		if errors.Is(err, storage.ErrSealed) || storage.IsCorrupt(err) || errors.Is(err, storage.ErrNotFound) {
			h.ready = false
		}
		return fmt.Errorf("broker: append: %w", retryWhenFull(err))
	}
	h.next += uint64(n)
	b.appendedLocked(h, len(batch))
	return nil
}

// replicateBatchLocked is enqueueBatchLocked for a replicated segment:
// the replica host stamps the batch at the primary's next offset (W2),
// ships it and appends it here, and the produce is answered once a
// quorum fsynced it (W1). Readers wake on the watermark (onCommit).
//
// REQUIRES: h.mu held, h writable, h.repl.
func (b *Broker) replicateBatchLocked(ctx context.Context, h *head, batch []byte, n int, wait *produceWait) error {
	wait.add()
	// replicate covers stamping and shipping the batch (the followers'
	// spans are its children); commit, the wait for the quorum's fsync.
	_, commit := b.cfg.Tracer.Start(ctx, tracing.SpanCommit, trace.SpanKindInternal)
	rctx, ship := b.cfg.Tracer.Start(ctx, tracing.SpanReplicate, trace.SpanKindProducer)
	if ship.IsRecording() {
		attrs := []attribute.KeyValue{tracing.AttrSegment.Int64(int64(h.segment)), tracing.AttrRecords.Int(n), tracing.AttrBytes.Int(len(batch))}
		ship.SetAttributes(attrs...)
		commit.SetAttributes(attrs...)
	}
	base, err := b.replicas().Append(rctx, h.segment, batch, func(err error) {
		err = replicaDoneError(err)
		tracing.End(commit, err)
		wait.part(err)
	})
	tracing.End(ship, err)
	if err != nil {
		tracing.End(commit, err)
		wait.part(nil)
		unready, err := replicaAppendError(h.segment, err)
		if unready {
			h.ready = false
		}
		return err
	}
	h.next = base + uint64(n)
	b.appendedLocked(h, len(batch))
	return nil
}

// rollLimit is the active segment's size roll bound, 0 for none.
func (h *head) rollLimit(node int64) int64 {
	switch {
	case h.rollBytes == 0:
		return node
	case h.rollBytes < 0:
		return 0
	}
	return h.rollBytes
}

// appendedLocked counts an appended batch and rolls the segment once it
// is full.
//
// REQUIRES: h.mu held.
func (b *Broker) appendedLocked(h *head, size int) {
	h.bytes += int64(size)
	h.written.Add(int64(size))
	h.activeBytes.Store(h.bytes)
	if limit := h.rollLimit(b.cfg.SegmentMaxBytes); limit > 0 && h.bytes >= limit {
		if err := b.rollLocked(h); err != nil {
			// The batch is enqueued and will be acked on its own; a failed
			// roll leaves the head unready, and the next use finishes it.
			b.log.Warn("segment roll failed", "range", h.rangeID, "segment", h.segment, "err", err)
		}
	}
}

// chunkLen is how many of recs go in the next stored batch.
func chunkLen(recs []Record) int {
	size := 0
	for i := range recs {
		size += len(recs[i].Key) + len(recs[i].Value) + 16
		if i+1 >= maxBatchRecords || (i > 0 && size >= maxBatchBytes) {
			return i + 1
		}
	}
	return len(recs)
}

// produceWait joins the per-range acknowledgements of one produce into one
// callback. Parts may finish before all are added, so the callback waits
// for sealed() too.
type produceWait struct {
	n       int
	done    func(int, error)
	pending atomic.Int64 // parts outstanding + 1 until sealed
	mu      sync.Mutex
	err     error
}

func newProduceWait(n int, done func(int, error)) *produceWait {
	w := &produceWait{n: n, done: done}
	w.pending.Store(1)
	return w
}

func (w *produceWait) add() { w.pending.Add(1) }

func (w *produceWait) part(err error) {
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	if w.pending.Add(-1) == 0 {
		w.finish()
	}
}

// setErr records a failure of the produce without ending the wait.
func (w *produceWait) setErr(err error) {
	w.add()
	w.part(err)
}

// fail records a failure and ends the wait: no more parts will be added.
func (w *produceWait) fail(err error) {
	w.setErr(err)
	w.sealed()
}

func (w *produceWait) sealed() {
	if w.pending.Add(-1) == 0 {
		w.finish()
	}
}

func (w *produceWait) finish() {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		w.done(0, err)
		return
	}
	w.done(w.n, nil)
}

// retryWhenFull makes a full disk's refusal retriable: the store keeps
// nothing it refused, the node rolls its ranges to other nodes, and space
// may come back, so the client should try again rather than give up on
// an internal error.
func retryWhenFull(err error) error {
	if err != nil && errors.Is(err, storage.ErrNoSpace) && !errors.Is(err, ErrRetry) {
		return fmt.Errorf("%w: %w", ErrRetry, err)
	}
	return err
}
