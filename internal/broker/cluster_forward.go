package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Forwarded produces. A range's write head on a node that does not hold
// the range's active segment keeps a queue of the produces it forwards
// (fwdQueue), in the order they reached the head. One goroutine per range
// with a queue sends them, as many as fit one peer frame in one call, one
// call at a time: the owner then appends them in that order, so produces
// sent one after another through one node keep their order per key, as
// they do when appended locally. While a range's queue is busy every
// produce for it through this node joins the queue, even one this node
// could append itself (the head moved here): the queue's goroutine
// appends those locally, in turn.
//
// A range split or merged while its queue holds produces keeps the queue
// until it drains: the goroutine routes what the owner refuses as retired
// again, to the ranges that took over. Until then, a produce for one of
// its keys does not go to the new range directly (it would overtake the
// queued ones): it joins the old queue, marked to be routed again in
// turn (queueBehind). Queues are ordered by when they became busy (seq);
// records routed again out of one queue go behind a younger queue that
// holds their keys, if any, so a key's records pass every queue that
// holds some of them, oldest first.

// maxForwardHops bounds how often one forwarded call follows a moved head
// (a roll whose successor another node opened) before giving up.
const maxForwardHops = 4

// fwdQueue is a head's queue of forwarded produces.
//
// Guarded by the head's mu.
type fwdQueue struct {
	items []*fwdItem
	busy  bool   // a goroutine is sending the queue
	node  uint64 // where the range was last found written
	seq   uint64 // while busy: its place among the topic's queues
}

// fwdItem is one produce's batches for one range, encoded with base
// offset 0 (the owner assigns offsets).
type fwdItem struct {
	topic   string
	batches [][]byte
	records int
	bytes   int
	wire    int    // what the batches add to an append message
	node    uint64 // the node its bytes are reserved against
	// reroute marks records of a younger range queued behind this one's
	// produces: they are routed again in turn, never sent for this range.
	reroute bool
	wait    *produceWait
	// sc is the span of the produce's route through this node, the
	// parent (or a link) of the forward that carries it.
	sc trace.SpanContext
}

// queueEntry is a busy forward queue as the data plane lists it.
type queueEntry struct {
	h    *head
	seq  uint64
	span keyspace.Span // the range's keys
}

// isNotOwner reports an error of a head whose active segment is on
// another node, and that node.
func isNotOwner(err error) (uint64, bool) {
	var e *NotOwnerError
	if errors.As(err, &e) {
		return nodeOfName(e.Node), true
	}
	return 0, false
}

// encodeForward cuts recs into batches at base 0 as the local path would.
func (b *Broker) encodeForward(recs []Record) ([][]byte, int, error) {
	var out [][]byte
	size := 0
	for len(recs) > 0 {
		n := chunkLen(recs)
		batch, err := segment.EncodeBatch(nil, 0, recs[:n], b.cfg.Codec)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, batch)
		size += len(batch)
		recs = recs[n:]
	}
	return out, size, nil
}

// newFwdItem makes the queue item of a produce's batches for one range.
func newFwdItem(topic string, batches [][]byte, records, size int, wait *produceWait) *fwdItem {
	wire := 0
	for _, batch := range batches {
		wire += dataplane.AppendBatchBytes(len(batch))
	}
	return &fwdItem{topic: topic, batches: batches, records: records, bytes: size, wire: wire, wait: wait}
}

// newTracedFwdItem is newFwdItem for a produce whose span ctx carries:
// the forward continues its trace.
func newTracedFwdItem(ctx context.Context, topic string, batches [][]byte, records, size int, wait *produceWait) *fwdItem {
	it := newFwdItem(topic, batches, records, size, wait)
	it.sc = trace.SpanContextFromContext(ctx)
	return it
}

// untraced is ctx without its span's context, for a call to another node
// that records no span of its own (reads, group calls): its frame goes
// without a trace context, as it did before tracing. Only produces'
// forwards and replication carry one (docs/operations.md, "Traces").
func untraced(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}

// forwardLocked queues a produce's batches on h and starts the queue's
// goroutine if none runs. node is where the metadata says the head is. A
// produce that one call between nodes could not carry is refused here,
// before anything is queued.
//
// REQUIRES: h.mu held.
func (b *Broker) forwardLocked(h *head, node uint64, it *fwdItem) error {
	if b.data == nil {
		return fmt.Errorf("broker: range %d is written by another node", h.rangeID)
	}
	if !it.reroute && dataplane.AppendHeaderBytes+it.wire > maxCallBytes {
		return fmt.Errorf("%w: %d bytes of records for range %d, which another node writes; one call between nodes carries at most %d",
			ErrTooLarge, it.bytes, h.rangeID, maxCallBytes)
	}
	if b.cluster != nil {
		// A produce that would wait behind the range's failover answers
		// now (C3); the client sends it again once the range has a head.
		if err := b.cluster.failovers.failing(h.rangeID); err != nil {
			return err
		}
	}
	if node == 0 {
		node = h.fwd.node
	}
	h.fwd.node = node
	if err := b.data.reserveForward(node, it.bytes); err != nil {
		return err
	}
	if !h.fwd.busy {
		if err := b.data.startForwarder(func() { b.runForward(h) }); err != nil {
			b.data.releaseForward(node, it.bytes)
			return err
		}
		h.fwd.busy = true
		h.fwd.seq = b.data.addQueue(h, b.spanOfRange(h.rangeID))
	}
	it.node = node
	it.wait.add()
	h.fwd.items = append(h.fwd.items, it)
	return nil
}

// forwardRecordsLocked queues records for the node writing h's range, or
// (reroute) to be routed again once what h's queue holds is through.
// ctx's span, if any, is the produce's: the forward continues its trace.
//
// REQUIRES: h.mu held.
func (b *Broker) forwardRecordsLocked(ctx context.Context, h *head, node uint64, topic string, recs []Record, wait *produceWait, reroute bool) error {
	batches, size, err := b.encodeForward(recs)
	if err != nil {
		return err
	}
	it := newTracedFwdItem(ctx, topic, batches, len(recs), size, wait)
	it.reroute = reroute
	if err := b.forwardLocked(h, node, it); err != nil {
		return err
	}
	// The node is known once queued: a busy queue's, when node was 0.
	if span := trace.SpanFromContext(ctx); span.IsRecording() && !reroute {
		span.SetAttributes(tracing.AttrForwarded.Bool(true), tracing.AttrPeer.Int64(int64(it.node)))
	}
	return nil
}

// spanOfRange is the keys of a range, empty when the metadata does not
// know it.
func (b *Broker) spanOfRange(rangeID uint64) keyspace.Span {
	var span keyspace.Span
	_ = b.plane.ViewID(rangeID, func(st *metadata.State) {
		if r, ok := st.Range(rangeID); ok {
			span = keyspace.Span{Start: r.Start, End: r.End}
		}
	})
	return span
}

// queueBehind queues the records of g whose key a forward queue of
// another range of the topic, younger than after (0: any), holds
// produces for, at the end of the oldest such queue, to be routed again
// in turn. It returns the records left for g's range, in their order;
// records without a key have no order to keep and are left.
//
// ctx's span, if any, is the produce's: records queued behind keep it.
func (b *Broker) queueBehind(ctx context.Context, topic string, topicID uint64, g rangeGroup, wait *produceWait, after uint64) []Record {
	recs := g.recs
	if b.data == nil {
		return recs
	}
	for attempt := 0; attempt < maxRouteAttempts; attempt++ {
		queues := b.data.queuesOver(topicID, g.rangeID, g.span, after)
		if len(queues) == 0 {
			return recs
		}
		parts := make([][]Record, len(queues))
		var left []Record
		for _, r := range recs {
			i := -1
			if r.Key != nil {
				pos := keyspace.Position(r.Key, g.bits)
				i = slices.IndexFunc(queues, func(q queueEntry) bool { return q.span.Contains(pos) })
			}
			if i < 0 {
				left = append(left, r)
			} else {
				parts[i] = append(parts[i], r)
			}
		}
		// A queue that drained meanwhile handed its records on: those of
		// its part look again.
		var missed []Record
		for i, q := range queues {
			if len(parts[i]) > 0 && !b.joinQueue(ctx, q, topic, parts[i], wait) {
				missed = append(missed, parts[i]...)
			}
		}
		if len(missed) == 0 {
			return left
		}
		recs = append(left, missed...)
	}
	return recs
}

// joinQueue queues recs at the end of q's queue, to be routed again, if
// q is still busy.
func (b *Broker) joinQueue(ctx context.Context, q queueEntry, topic string, recs []Record, wait *produceWait) bool {
	h := q.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fwd.busy || h.fwd.seq != q.seq {
		return false
	}
	if err := b.forwardRecordsLocked(ctx, h, 0, topic, recs, wait, true); err != nil {
		wait.setErr(err)
	}
	return true
}

// runForward sends h's queue until it is empty. It is owned by the head's
// queue (busy) and exits when the queue drains; every call it makes is
// bounded by CallTimeout and ends when the data plane closes, whose
// close waits for it. Items marked reroute are routed again in their
// turn, after what was queued before them has its outcome.
func (b *Broker) runForward(h *head) {
	for {
		h.mu.Lock()
		items, seq := h.fwd.items, h.fwd.seq
		h.fwd.items = nil
		if len(items) == 0 {
			h.fwd.busy = false
			b.data.dropQueue(h)
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for len(items) > 0 {
			n := 1
			if items[0].reroute {
				b.rerouteItems(b.data.ctx, items[:1], seq)
			} else {
				for n < len(items) && !items[n].reroute {
					n++
				}
				b.sendForward(h, seq, items[:n])
			}
			for _, it := range items[:n] {
				b.data.releaseForward(it.node, it.bytes)
			}
			items = items[n:]
		}
	}
}

// sendForward delivers items to the node writing h's range, following the
// head when it moved, or appends them here when this node writes it now.
// Every item's wait receives its outcome. seq is h's queue's place.
//
// A produce waits here at most one failover attempt (MetadataTimeout)
// when gossip declares the head's node dead, or one call (CallTimeout)
// when the node does not answer; a range that cannot fail over answers
// at once, with the reason its last attempt failed, until it is tried
// again (failoverRuns.begin). A node that did not answer is failed over
// only once the items it took have their answer.
func (b *Broker) sendForward(h *head, seq uint64, items []*fwdItem) {
	ctx := b.data.ctx
	hint, lost := uint64(0), uint64(0)
	var err error
	defer func() {
		if lost != 0 {
			_, _ = b.failoverFrom(h, lost) // the next items find the range moved, or answer why not
		}
	}()
	for hop := 0; hop < maxForwardHops; hop++ {
		node := hint
		if node == 0 {
			var local bool
			if node, local, err = b.headNode(h); err != nil {
				break
			}
			if local {
				if items, err = b.appendItemsHere(ctx, h, seq, items); err == nil || len(items) == 0 {
					return
				}
				if n, ok := isNotOwner(err); ok {
					node, err = n, nil
				} else {
					break
				}
			}
		}
		if b.nodeDead(node) {
			changed, ferr := b.failoverFrom(h, node)
			if changed {
				hint = 0 // its primary is dead and the range failed over: look again
				continue
			}
			if ferr != nil {
				err = ferr // nothing was sent: the range has no live head yet
				break
			}
		}
		var moved uint64
		items, moved, err = b.forwardTo(ctx, node, h, seq, items)
		if errors.Is(err, ErrUnreachable) || errors.Is(err, ErrShuttingDown) {
			// The items may or may not be stored there: they fail
			// (retriable), and the range fails over for the next ones
			// (a node shutting down leads nothing much longer).
			lost = node
		}
		if err != nil || len(items) == 0 {
			break
		}
		if hint = moved; hint == 0 {
			b.catchUpRange(h.rangeID) // the head moved: learn where
		}
	}
	if len(items) == 0 {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: the head of range %d kept moving", ErrRetry, h.rangeID)
	}
	for _, it := range items {
		it.wait.part(err)
	}
}

// headNode says where h's range is written: another node, or here (also
// when it has no active segment: this node opens one).
func (b *Broker) headNode(h *head) (uint64, bool, error) {
	v := b.viewRange(h.rangeID)
	if v.retired || !v.hasActive || b.writesHere(v.active) {
		return 0, true, nil
	}
	if n := primaryOf(v.active); n != 0 {
		return n, false, nil
	}
	return 0, false, fmt.Errorf("broker: segment %d of range %d names no node", v.active.ID, h.rangeID)
}

// appendItemsHere appends queued items through this node's head, in
// order. It returns the items not appended and why: a head that moved to
// another node (a NotOwnerError) leaves the rest to forward. A retired
// range's items are routed again, behind queues younger than seq.
func (b *Broker) appendItemsHere(ctx context.Context, h *head, seq uint64, items []*fwdItem) ([]*fwdItem, error) {
	h.mu.Lock()
	notify := b.watchFor(h.topicID)
	var err error
	i := 0
	for ; i < len(items); i++ {
		it := items[i]
		var stored int
		stored, err = b.appendBatchesLocked(ctx, h, it.batches, it.wait, notify, nil)
		if err == nil {
			it.wait.part(nil)
			continue
		}
		if stored > 0 {
			it.wait.part(fmt.Errorf("%w: range %d changed during a produce", ErrRetry, h.rangeID))
			err = nil
			continue
		}
		break
	}
	h.mu.Unlock()
	rest := items[i:]
	if errors.Is(err, errRetired) {
		b.rerouteItems(ctx, rest, seq)
		return nil, nil
	}
	if _, ok := isNotOwner(err); ok || err == nil {
		return rest, err
	}
	for _, it := range rest {
		it.wait.part(err)
	}
	return nil, nil
}

// appendBatchesLocked stamps and enqueues batches through h, opening or
// repairing its segment as needed, and returns how many it enqueued. Each
// stored batch's base goes to bases when it is not nil. It releases h.mu
// while it waits for the metadata to catch up.
//
// REQUIRES: h.mu held.
func (b *Broker) appendBatchesLocked(ctx context.Context, h *head, batches [][]byte, wait *produceWait, notify *watch, bases *[]uint64) (int, error) {
	for i, batch := range batches {
		hdr, err := segment.ParseHeader(batch)
		if err != nil {
			return i, fmt.Errorf("%w: %v", ErrInvalidBatch, err)
		}
		for repairs := 0; ; repairs++ {
			err = b.writableLocked(h)
			if err == nil {
				// Rebase checks the batch's checksum before stamping it
				// (S1): it crossed a network since it was checked.
				if err = segment.Rebase(batch, h.next); err != nil {
					return i, fmt.Errorf("%w: %v", ErrInvalidBatch, err)
				}
				base := h.next
				if err = b.enqueueBatchLocked(ctx, h, batch, int(hdr.RecordCount), wait, notify); err == nil && bases != nil {
					*bases = append(*bases, base)
				}
			}
			if err == nil || errors.Is(err, errRetired) || h.ready || repairs >= maxHeadRepairs {
				break
			}
			if errors.Is(err, metadata.ErrActiveSegmentExists) {
				b.catchUpUnlocked(h)
			}
		}
		if err != nil {
			return i, err
		}
	}
	return len(batches), nil
}

// forwardTo sends items to node, in calls that each fit one peer frame,
// one after another. It returns the items left to deliver with the node
// the head moved to (0: ask the metadata), or the error that ends them
// all. Items the owner stored or refused get their outcome here; a
// retired range's are routed again, behind queues younger than seq.
func (b *Broker) forwardTo(ctx context.Context, node uint64, h *head, seq uint64, items []*fwdItem) ([]*fwdItem, uint64, error) {
	for len(items) > 0 {
		n := callLen(items)
		rest, r, err := b.tracedForwardCall(ctx, node, h, items[:n])
		left := append(rest, items[n:]...)
		if err != nil {
			return left, 0, err
		}
		if r != nil {
			switch r.Status {
			case dataplane.StatusNotHere:
				return left, r.Node, nil
			case dataplane.StatusRetired:
				// Route again only once this node's metadata agrees that
				// the range is retired: routing on a view that is behind
				// would pick the same range and go round.
				b.catchUpRange(h.rangeID)
				if !b.viewRange(h.rangeID).retired {
					return left, 0, fmt.Errorf("%w: node-%d retired range %d, which this node's metadata has not caught up with", ErrRetry, node, h.rangeID)
				}
				b.rerouteItems(ctx, left, seq)
				return nil, 0, nil
			}
		}
		items = left
	}
	return nil, 0, nil
}

// callLen is how many of items, at least one, go in the next call: as
// many as fit one peer frame. forwardLocked refused any item that would
// not fit alone.
func callLen(items []*fwdItem) int {
	size := dataplane.AppendHeaderBytes
	for i, it := range items {
		if size += it.wire; i > 0 && size > maxCallBytes {
			return i
		}
	}
	return len(items)
}

// tracedForwardCall is forwardCall in a span of its own: the child of
// the first sampled item's produce, linked to the others' (one call
// carries several produces), whose context the call carries to node.
func (b *Broker) tracedForwardCall(ctx context.Context, node uint64, h *head, items []*fwdItem) ([]*fwdItem, *dataplane.Refusal, error) {
	if !b.cfg.Tracer.On() {
		return b.forwardCall(ctx, node, h, items)
	}
	parent := -1
	var links []trace.Link
	for i, it := range items {
		switch {
		case !it.sc.IsValid():
		case parent < 0 && it.sc.IsSampled():
			parent = i
		default:
			links = append(links, trace.Link{SpanContext: it.sc})
		}
	}
	if parent < 0 {
		return b.forwardCall(ctx, node, h, items) // no produce of the call is traced
	}
	ctx, span := b.cfg.Tracer.StartLinked(trace.ContextWithSpanContext(ctx, items[parent].sc), tracing.SpanForward, trace.SpanKindClient, links)
	records := 0
	for _, it := range items {
		records += it.records
	}
	span.SetAttributes(tracing.AttrRange.Int64(int64(h.rangeID)), tracing.AttrPeer.Int64(int64(node)), tracing.AttrRecords.Int(records))
	rest, r, err := b.forwardCall(ctx, node, h, items)
	if err == nil && r != nil {
		span.AddEvent("refused", trace.WithAttributes(attribute.Int("malachi.status", int(r.Status)), attribute.String("malachi.reason", r.Reason)))
	}
	tracing.End(span, err)
	return rest, r, err
}

// forwardCall sends items to node in one call. Items the owner stored
// are acknowledged; one it stopped in the middle of fails as a local
// produce cut by a split does, and one whose batch it refused as invalid
// fails alone. It returns the items not stored, in order, with the
// refusal of a range not written there or retired, or the error that
// ends them all; with neither, the rest may be sent again.
func (b *Broker) forwardCall(ctx context.Context, node uint64, h *head, items []*fwdItem) ([]*fwdItem, *dataplane.Refusal, error) {
	req := dataplane.Append{Topic: h.topicID, Range: h.rangeID}
	for _, it := range items {
		req.Batches = append(req.Batches, it.batches...)
	}
	resp, err := b.data.call(ctx, node, req.Encode())
	if err != nil {
		return items, nil, err
	}
	_, err = dataplane.DecodeAppendAnswer(resp)
	if err == nil {
		for _, it := range items {
			it.wait.part(nil)
		}
		return nil, nil, nil
	}
	var r *dataplane.Refusal
	if !errors.As(err, &r) {
		return items, nil, fmt.Errorf("broker: node-%d answered a forwarded produce: %w", node, err)
	}
	stored, cut := int(r.Stored), 0
	for cut < len(items) && stored >= len(items[cut].batches) {
		stored -= len(items[cut].batches)
		items[cut].wait.part(nil)
		cut++
	}
	rest := slices.Clone(items[cut:])
	if len(rest) > 0 {
		switch {
		case r.Status == dataplane.StatusRefused && r.Reason == ErrInvalidBatch.Error():
			// The refusal is of this item's bytes: the items after it
			// are sent again.
			rest[0].wait.part(remoteError(node, r))
			return rest[1:], nil, nil
		case stored > 0:
			rest[0].wait.part(fmt.Errorf("%w: range %d changed during a produce", ErrRetry, h.rangeID))
			rest = rest[1:]
		}
	}
	switch r.Status {
	case dataplane.StatusNotHere, dataplane.StatusRetired:
		return rest, r, nil
	}
	return rest, nil, remoteError(node, r)
}

// catchUpRange lets this node's replica of a range's metadata group apply
// what the group has committed: a node told that another opened the
// range's segment, or that the head moved, may not have applied that yet
// (W5: a replica may be behind, and must then look again, not guess).
func (b *Broker) catchUpRange(rangeID uint64) {
	if b.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(b.life, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	_ = b.plane.Barrier(ctx, uint64(metadata.ShardOf(rangeID)))
}

// catchUpUnlocked is catchUpRange with h.mu released meanwhile: the wait
// may last MetadataTimeout, and produces and reads of the range must not
// wait behind it. The caller looks at h again afterwards.
//
// REQUIRES: h.mu held.
func (b *Broker) catchUpUnlocked(h *head) {
	h.mu.Unlock()
	defer h.mu.Lock()
	b.catchUpRange(h.rangeID)
}

// rerouteItems routes the records of items whose range was retired
// through fresh metadata, as a local produce that finds its range split,
// behind the forward queues younger than after that hold their keys.
func (b *Broker) rerouteItems(ctx context.Context, items []*fwdItem, after uint64) {
	for _, it := range items {
		var recs []Record
		var err error
		for _, batch := range it.batches {
			if recs, err = segment.DecodeRecords(batch, recs); err != nil {
				break
			}
		}
		if err != nil {
			it.wait.part(fmt.Errorf("%w: %v", ErrInvalidBatch, err))
			continue
		}
		rctx := ctx
		if it.sc.IsValid() { // the produce's trace goes on through its new route
			rctx = trace.ContextWithSpanContext(ctx, it.sc)
		}
		_ = b.routeAfter(rctx, it.topic, recs, it.wait, false, after)
		it.wait.part(nil)
	}
}

// serveAppend appends another node's forwarded batches through this
// node's head of the range, and answers once they are durable here. Its
// span continues the forwarding node's trace (ctx carries it).
func (d *dataPlane) serveAppend(ctx context.Context, from uint64, req []byte) (_ []byte, err error) {
	ctx, span := d.b.cfg.Tracer.Start(ctx, tracing.SpanAppend, trace.SpanKindServer)
	defer func() { tracing.End(span, err) }()
	m, err := dataplane.DecodeAppend(req)
	if err != nil {
		return nil, err
	}
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrRange.Int64(int64(m.Range)), tracing.AttrPeer.Int64(int64(from)), tracing.AttrBatches.Int(len(m.Batches)))
	}
	b := d.b
	if t := b.topicOfID(m.Range); t != m.Topic {
		// This node does not know the range: it cannot be writing it.
		return (&dataplane.Refusal{Status: dataplane.StatusNotHere, Reason: ErrRetry.Error(),
			Message: fmt.Sprintf("range %d of topic %d is unknown on node-%d", m.Range, m.Topic, d.self)}).Encode(), nil
	}
	done := make(chan error, 1)
	records := 0
	for _, batch := range m.Batches {
		if h, err := segment.ParseHeader(batch); err == nil {
			records += int(h.RecordCount)
		}
	}
	wait := newProduceWait(records, func(_ int, err error) { done <- err })
	h := b.headFor(m.Topic, m.Range)
	h.mu.Lock()
	var bases []uint64
	stored := 0
	if h.fwd.busy {
		// This node forwards the range itself: it is not its head.
		err = &NotOwnerError{Node: clusterNodeName(0)}
	} else {
		stored, err = b.appendBatchesLocked(ctx, h, m.Batches, wait, b.watchFor(m.Topic), &bases)
	}
	h.mu.Unlock()
	wait.sealed()
	if err != nil {
		return d.refuseAppend(stored, m.Range, err, done), nil
	}
	select {
	case err := <-done:
		if err != nil {
			return refusal(dataplane.StatusRefused, err, "append to range %d on node-%d: %v", m.Range, d.self, err), nil
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return (&dataplane.AppendAnswer{Bases: bases}).Encode(), nil
}

// refuseAppend answers an append that stopped after stored batches; those
// are answered only once durable, so the caller acknowledges them safely.
func (d *dataPlane) refuseAppend(stored int, rangeID uint64, err error, done <-chan error) []byte {
	r := &dataplane.Refusal{Status: dataplane.StatusRefused, Stored: uint64(stored), Reason: reasonOf(err), Message: err.Error()}
	if stored > 0 {
		if derr := <-done; derr != nil {
			r.Stored = 0
			r.Reason, r.Message = reasonOf(derr), derr.Error()
			return r.Encode()
		}
	}
	if n, ok := isNotOwner(err); ok {
		r.Status, r.Node = dataplane.StatusNotHere, n
		r.Message = fmt.Sprintf("range %d is not written on node-%d", rangeID, d.self)
	} else if errors.Is(err, errRetired) {
		r.Status, r.Reason = dataplane.StatusRetired, "sealed"
	}
	return r.Encode()
}
