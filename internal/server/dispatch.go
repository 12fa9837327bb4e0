package server

import (
	"context"
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/wire"
	"go.opentelemetry.io/otel/trace"
)

// Server clamps from wire v1: a request above a cap is clamped, not refused.
const (
	fetchMaxDefault = 100
	fetchMaxCap     = 1000
	waitCap         = 30 * time.Second
	windowDefault   = 100
	windowCap       = 10000
	pushMaxDefault  = 100
	pushMaxCap      = 1000
	producePerFrame = 1 << 20 // records in one produce request
)

func clamp(v uint32, def, cap int) int {
	if v == 0 {
		return def
	}
	return min(int(v), cap)
}

// dispatch runs one admitted request, which holds a slot: every path
// queues exactly one frame with it, or gives it back. Produce and subscribe
// are handled on the reader goroutine (their order matters); everything
// else runs on a request goroutine, so at most MaxInFlight run at once.
func (c *conn) dispatch(corr uint32, req wire.Request) {
	if !isAuth(req) && !c.checkIdentity(corr) {
		return // the identity was revoked: refused, and the connection closes
	}
	switch r := req.(type) {
	case *wire.ProduceRequest:
		c.produce(corr, r)
	case *wire.SubscribeRequest:
		c.subscribe(corr, r)
	case *wire.SubscribeBatchesRequest:
		c.subscribeBatches(corr, r)
	case *wire.StreamAckRequest:
		c.refuse(corr, "unexpected_frame")
	case *wire.AuthRequest, *wire.MTLSAuthRequest, *wire.TokenAuthRequest, *wire.SessionAuthRequest:
		c.reauth(corr, req)
	case *wire.FetchRequest:
		c.spawn(func() { c.fetchWithinBudget(corr, r) })
	case *wire.ProduceBatchesRequest:
		c.produceBatches(corr, r)
	case *wire.FetchBatchesRequest:
		c.spawn(func() { c.fetchBatchesWithinBudget(corr, r) })
	default:
		c.spawn(func() {
			resp, err := c.handle(req)
			c.s.traffic.other(err)
			c.answer(corr, resp, err)
		})
	}
}

// answer queues the answer of an admitted request on its slot.
func (c *conn) answer(corr uint32, resp wire.Response, err error) {
	if err != nil {
		c.refuse(corr, reason(err))
		return
	}
	c.queue(wire.AppendOKFrame(frameBuffer(resp), corr, resp))
}

// fetchWithinBudget runs a fetch once the largest answer it could give
// fits in the connection's byte budget, and queues the answer in place
// of the reservation. A fetch that cannot get room before the connection
// stops reading is refused: retry when the node drains (shutting_down),
// else the client has gone and the answer is not read anyway.
func (c *conn) fetchWithinBudget(corr uint32, r *wire.FetchRequest) {
	c.withinBudget(corr, func() outFrame {
		start := time.Now()
		resp, err := c.handle(r)
		c.s.traffic.fetched(start, resp, err)
		if err != nil {
			return bytesFrame(wire.AppendErrorFrame(nil, corr, reason(err)))
		}
		return bytesFrame(wire.AppendOKFrame(frameBuffer(resp), corr, resp))
	})
}

// withinBudget runs answer, which builds a fetch-shaped frame, once the
// largest such frame fits in the connection's byte budget, and queues the
// frame in place of the reservation.
func (c *conn) withinBudget(corr uint32, answer func() outFrame) {
	need := c.s.fetchReserve
	if !c.budget.reserve(c.reqCtx, c.draining, need) {
		reason := wire.ReasonRetry
		if c.isDraining() {
			reason = wire.ReasonShuttingDown
		}
		c.refuse(corr, reason)
		return
	}
	c.queueSettled(answer(), need, true)
}

// refuse queues an error answer of an admitted request on its slot.
func (c *conn) refuse(corr uint32, reason string) {
	c.queue(wire.AppendErrorFrame(nil, corr, reason))
}

// frameBuffer presizes the buffer of a fetch-shaped answer, which can be
// megabytes: growing it by doubling would copy and zero it several times.
func frameBuffer(resp wire.Response) []byte {
	fr, ok := resp.(*wire.FetchResponse)
	if !ok {
		return nil
	}
	n := 64
	if fr.NextCursor != nil {
		n += len(*fr.NextCursor)
	}
	for i := range fr.Records {
		n += fr.Records[i].Size()
	}
	return make([]byte, 0, n)
}

// produce submits inline so consecutive produces on this connection are
// enqueued in order; the answer goes out when the records are durable. The
// request's slot is held until then, so a connection has at most
// MaxInFlight produces waiting for durability or for the client to read
// their answers.
func (c *conn) produce(corr uint32, r *wire.ProduceRequest) {
	start, t := time.Now(), c.s.traffic
	if r.Topic == nil {
		t.done(&t.produce, OpProduce, start, 0, 0, metadata.ErrNoSuchTopic)
		c.refuse(corr, "no_such_topic")
		return
	}
	if err := c.s.b.Authorize(c.identity(), broker.OpProduce, *r.Topic); err != nil {
		t.done(&t.produce, OpProduce, start, 0, 0, err)
		c.answer(corr, nil, err)
		return
	}
	if len(r.Records) > producePerFrame {
		t.refuse(OpProduce, "too_many_records")
		c.refuse(corr, "too_many_records")
		return
	}
	size := wireBytes(r.Records)
	recs := toSegmentRecords(r.Records)
	ctx, span := c.startProduceSpan(*r.Topic, len(recs), size)
	c.wg.Add(1)
	err := c.s.b.ProduceAsync(ctx, *r.Topic, recs, func(n int, err error) {
		// On the segment store's commit goroutine: queueing on the
		// request's slot does not block it.
		defer c.wg.Done()
		t.done(&t.produce, OpProduce, start, n, size, err)
		c.answer(corr, &wire.CountResponse{Count: uint32(n)}, err)
		tracing.End(span, err)
	})
	if err != nil {
		c.wg.Done()
		t.done(&t.produce, OpProduce, start, 0, 0, err)
		c.answer(corr, nil, err)
		tracing.End(span, err)
	}
}

// startProduceSpan starts a produce request's span (the answer ends it)
// on the connection's context.
func (c *conn) startProduceSpan(topic string, records, size int) (context.Context, trace.Span) {
	ctx, span := c.s.b.Tracer().Begin(c.reqCtx, tracing.SpanProduce, trace.SpanKindServer)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrTopic.String(topic), tracing.AttrRecords.Int(records), tracing.AttrBytes.Int(size))
	}
	return ctx, span
}

// toSegmentRecords converts decoded records for the broker. The headers
// of all records share one backing array sized by the headers actually
// decoded: one allocation per produce, not one per record.
func toSegmentRecords(ws []wire.Record) []broker.Record {
	n := 0
	for i := range ws {
		n += len(ws[i].Headers)
	}
	var headers []segment.Header
	if n > 0 {
		headers = make([]segment.Header, 0, n)
	}
	recs := make([]broker.Record, len(ws))
	for i, w := range ws {
		recs[i] = segment.Record{Key: w.Key, Value: w.Value, Timestamp: int64(w.Timestamp)}
		if len(w.Headers) == 0 {
			continue
		}
		start := len(headers)
		for _, h := range w.Headers {
			headers = append(headers, segment.Header{Key: h.Key, Value: h.Value})
		}
		recs[i].Headers = headers[start:len(headers):len(headers)]
	}
	return recs
}

func toWireRecords(recs []broker.Record) []wire.Record {
	out := make([]wire.Record, len(recs))
	for i, r := range recs {
		hs := make([]wire.Header, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = wire.Header{Key: h.Key, Value: h.Value}
		}
		v := r.Value
		if v == nil {
			v = []byte{}
		}
		out[i] = wire.Record{Key: r.Key, Value: v, Timestamp: uint64(r.Timestamp), Headers: hs}
	}
	return out
}

// subscribe switches the connection to stream mode: the subscription runs
// on its own goroutine and pushes pages on the subscribe's correlation id.
// Each push takes a slot and room in the byte budget like any other
// frame, so a client that does not read stops the pushes (and the reader)
// instead of growing the queue.
func (c *conn) subscribe(corr uint32, r *wire.SubscribeRequest) {
	c.startStream(corr, r.Topic, false, func(id broker.Identity, topic string) (*broker.Subscription, error) {
		window := clamp(r.Window, windowDefault, windowCap)
		return c.s.b.SubscribeAs(id, topic, r.Group, r.Member, window, clamp(r.Max, pushMaxDefault, pushMaxCap))
	})
}

// subscribeBatches is subscribe for wire v2: pushes of stored batches.
func (c *conn) subscribeBatches(corr uint32, r *wire.SubscribeBatchesRequest) {
	c.startStream(corr, r.Topic, r.WantsSkips(), func(id broker.Identity, topic string) (*broker.Subscription, error) {
		window := clamp(r.Window, windowDefault, windowCap)
		return c.s.b.SubscribeBatchesAs(id, topic, r.Group, r.Member, window, int(min(r.MaxBytes, 1<<30)))
	})
}

// startStream authorizes and opens a subscription and runs it on its own
// goroutine, pushing each page on the request's correlation id; skips
// says each push ends with a skip report.
func (c *conn) startStream(corr uint32, topicName *string, skips bool, open func(broker.Identity, string) (*broker.Subscription, error)) {
	if topicName == nil {
		c.refuse(corr, "no_such_topic")
		return
	}
	topic := *topicName
	id := c.identity()
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		c.answer(corr, nil, err)
		return
	}
	sub, err := open(id, topic)
	if err != nil {
		c.answer(corr, nil, err)
		return
	}
	c.unused() // the pushes are the answer; each takes a slot of its own
	c.stream = sub
	c.spawn(func() {
		err := sub.Run(c.reqCtx, func(p broker.Page) error {
			// Each push is checked like a request: a revoked grant or
			// user ends the stream with the refusal.
			if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
				p.Release()
				return err
			}
			// Counted before it is queued: once queued, the writer may
			// write it and give its batches' buffers back at any moment.
			c.s.traffic.pushed(p, skips)
			if !c.push(pushFrame(corr, p, skips)) {
				p.Release() // not queued: nothing will write it
				return errConnEnding
			}
			return nil
		})
		if err != nil && !errors.Is(err, errConnEnding) && c.reqCtx.Err() == nil {
			// The stream cannot go on: answer why on the subscribe's
			// correlation id, then end the connection once that frame is
			// written (drain stops the reader; the writer flushes first).
			c.s.cfg.Logger.Warn("subscription ended", "topic", topic, "err", err)
			c.reply(wire.AppendErrorFrame(nil, corr, reason(err)))
			c.drain()
		}
	})
}

// pushFrame encodes one page of a stream: records for subscribe (5),
// stored batches for subscribe_batches (83), ending with a skip report
// when the subscribe_batches asked for one.
func pushFrame(corr uint32, p broker.Page, skips bool) outFrame {
	if p.Batches != nil || skips {
		return batchesFrame(corr, p.Cursor, p.Batches, skipsOf(skips, p.Skipped, p.SkippedBound), p.Release)
	}
	resp := &wire.FetchResponse{Records: toWireRecords(p.Records), NextCursor: p.Cursor}
	return bytesFrame(wire.AppendOKFrame(frameBuffer(resp), corr, resp))
}

// bytesFrame is a frame for the writer whose bytes are all in b.
func bytesFrame(b []byte) outFrame { return outFrame{b: b, n: int64(len(b))} }

// batchesFrame is the answer of fetch_batches or a subscribe_batches push,
// laid out for a vectored write: the stored batches go to the socket from
// the buffers the broker read them into. A skip report asked for ends the
// frame. The framing, and the small batches copied with it, go in a
// pooled buffer: a page over a thousand ranges is a megabyte of batches
// under 4 KiB, and a fresh buffer for each page cost the node more in
// first touches of its memory than the copy. The frame's release gives
// that buffer back, then calls release (the page's read buffers), once
// the frame is written.
func batchesFrame(corr uint32, cursor *string, batches []broker.RangeBatch, skips wire.Skips, release func()) outFrame {
	resp := &wire.FetchBatchesResponse{NextCursor: cursor, Batches: make([]wire.RangeBatch, len(batches)), Skips: skips}
	for i, b := range batches {
		resp.Batches[i] = wire.RangeBatch{Range: b.Range, Batch: b.Batch}
	}
	head := borrowFrame(wire.FetchBatchesHeadLen(resp))
	pieces, n := wire.AppendFetchBatchesPieces(make([][]byte, 0, 2*len(batches)+2), head, corr, resp)
	return outFrame{pieces: pieces, n: int64(n), release: func() {
		returnFrame(head)
		if release != nil {
			release()
		}
	}}
}

// skipsOf is the skip report of a page, when the request asked for one.
func skipsOf(asked bool, n uint64, bound bool) wire.Skips {
	if !asked {
		return wire.Skips{}
	}
	return wire.Skips{Asked: true, Count: n, Bound: bound}
}

// errConnEnding ends a subscription whose connection failed or drains.
var errConnEnding = errors.New("server: connection ending")

// reason maps an error to its wire reason string.
func reason(err error) string {
	var me metadata.Error
	if errors.As(err, &me) {
		return string(me)
	}
	for _, known := range []error{
		broker.ErrInvalidCursor, broker.ErrShuttingDown, broker.ErrRetry, broker.ErrTooManyMembers,
		broker.ErrPermission, broker.ErrCredentials, broker.ErrNotEnabled, broker.ErrInvalidBatch,
		broker.ErrSessionInvalid, broker.ErrSessionExpired, broker.ErrSessionRevoked, broker.ErrTLSRequired,
		broker.ErrNotOwner, broker.ErrMetadataUnavailable,
	} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	if _, ok := wire.Reasons[err.Error()]; ok {
		return err.Error()
	}
	return "internal_error"
}
