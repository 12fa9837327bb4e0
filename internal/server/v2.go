package server

import (
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/wire"
)

// Wire v2: api_versions (79), topic_routes (80), produce_batches (81) and
// fetch_batches (82). Layouts in docs/wire.md.

// maxPreAuthVersions bounds the api_versions frames a connection may send
// before it authenticates; the auth deadline bounds how long it may wait.
const maxPreAuthVersions = 4

// versions is the answer to api_versions: every key this server serves.
func (s *Server) versions() *wire.APIVersionsResponse {
	return &wire.APIVersionsResponse{
		Keys:            wire.Versions(),
		MaxFrame:        s.cfg.MaxFrame,
		MaxBatchBytes:   broker.MaxBatchBytes,
		MaxBatchRecords: broker.MaxBatchRecords,
		NodeVersion:     broker.Version,
	}
}

// preAuthVersions answers an api_versions frame sent before auth. It is
// the only request a connection may send then, a few times at most.
func (c *conn) preAuthVersions(corr uint32, payload []byte) bool {
	c.preAuthVersionCount++
	if c.preAuthVersionCount > maxPreAuthVersions {
		c.reply(wire.AppendErrorFrame(nil, corr, wire.ReasonAuthRequired))
		return false
	}
	var req wire.APIVersionsRequest
	if err := req.Decode(payload); err != nil {
		c.reply(wire.AppendErrorFrame(nil, corr, wire.ReasonMalformedRequest))
		return false
	}
	resp := c.s.versions()
	resp.NodeVersion = "" // the release is for authenticated clients only
	return c.reply(wire.AppendOKFrame(nil, corr, resp))
}

// topicRoutes answers the active ranges of a topic to a user who may
// produce to it or consume from it.
func (c *conn) topicRoutes(id broker.Identity, r *wire.TopicRoutesRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpProduce, topic); err != nil {
		if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
			return nil, err
		}
	}
	bits, ranges, err := c.s.b.Routes(topic)
	if err != nil {
		return nil, err
	}
	resp := &wire.TopicRoutesResponse{Bits: bits, Ranges: make([]wire.RouteRange, len(ranges))}
	for i, rr := range ranges {
		resp.Ranges[i] = wire.RouteRange{Range: rr.Range, Start: rr.Start, End: rr.End}
	}
	return resp, nil
}

// produceBatches submits inline, like produce, so consecutive produces on
// this connection are enqueued in order; the answer goes out when every
// record is durable.
func (c *conn) produceBatches(corr uint32, r *wire.ProduceBatchesRequest) {
	start, t := time.Now(), c.s.traffic
	if r.Topic == nil {
		t.refuse(OpProduce, wire.ReasonNoSuchTopic)
		c.refuse(corr, wire.ReasonNoSuchTopic)
		return
	}
	if err := c.s.b.Authorize(c.identity(), broker.OpProduce, *r.Topic); err != nil {
		t.done(&t.produce, OpProduce, start, 0, 0, err)
		c.answer(corr, nil, err)
		return
	}
	if len(r.Batches) > broker.MaxRequestBatches {
		t.refuse(OpProduce, wire.ReasonInvalidBatch)
		c.refuse(corr, wire.ReasonInvalidBatch)
		return
	}
	size := 0
	for _, rb := range r.Batches {
		size += len(rb.Batch)
	}
	batches := make([]broker.RangeBatch, len(r.Batches))
	for i, rb := range r.Batches {
		batches[i] = broker.RangeBatch{Range: rb.Range, Batch: rb.Batch}
	}
	// The batches are stored from the frame itself, so the frame is the
	// broker's until they are durable; a lent buffer goes back then.
	frame := c.frame
	c.frame = nil
	ctx, span := c.startProduceSpan(*r.Topic, 0, size)
	c.wg.Add(1)
	err := c.s.b.ProduceBatchesAsync(ctx, *r.Topic, batches, func(n, rerouted int, err error) {
		defer c.wg.Done()
		t.done(&t.produce, OpProduce, start, n, size, err)
		c.answer(corr, &wire.ProduceBatchesResponse{Count: uint32(n), Rerouted: uint32(rerouted)}, err)
		c.giveBack(frame)
		if span.IsRecording() {
			span.SetAttributes(tracing.AttrRecords.Int(n))
		}
		tracing.End(span, err)
	})
	if err != nil {
		c.wg.Done()
		t.done(&t.produce, OpProduce, start, 0, 0, err)
		c.answer(corr, nil, err)
		c.giveBack(frame) // refused before anything was enqueued
		tracing.End(span, err)
	}
}

// fetchBatchesWithinBudget is fetchWithinBudget for fetch_batches.
func (c *conn) fetchBatchesWithinBudget(corr uint32, r *wire.FetchBatchesRequest) {
	c.withinBudget(corr, func() outFrame {
		start := time.Now()
		page, err := c.fetchBatches(c.identity(), r)
		c.s.traffic.fetchedBatches(start, page, r.WantsSkips(), err)
		if err != nil {
			return bytesFrame(wire.AppendErrorFrame(nil, corr, reason(err)))
		}
		// The writer gives the read buffers back once it has written them.
		return batchesFrame(corr, page.Cursor, page.Batches, skipsOf(r.WantsSkips(), page.Skipped, page.SkippedBound), page.Release)
	})
}

func (c *conn) fetchBatches(id broker.Identity, r *wire.FetchBatchesRequest) (broker.BatchPage, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return broker.BatchPage{}, err
	}
	wait := min(time.Duration(r.WaitMs)*time.Millisecond, waitCap)
	ctx, span := c.startConsumeSpan()
	page, err := c.s.b.FetchBatches(ctx, broker.FetchBatchesRequest{
		FetchRequest: broker.FetchRequest{
			Topic: topic, Cursor: r.Cursor, Group: r.Group, Member: r.Member,
			Max: int(min(r.MaxRecords, 1<<30)), Wait: wait, Identity: id,
		},
		MaxBytes: int(min(r.MaxBytes, 1<<30)),
	})
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrBatches.Int(len(page.Batches)))
	}
	c.endConsumeSpan(span, topic, err)
	if err != nil && c.reqCtx.Err() == nil {
		page.Release()
		return broker.BatchPage{}, err
	}
	// As for fetch: a long poll hands records over only if the identity
	// still stands now.
	if len(page.Batches) > 0 {
		if err := c.s.b.CheckIdentity(id); err != nil {
			page.Release()
			return broker.BatchPage{}, err
		}
		if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
			page.Release()
			return broker.BatchPage{}, err
		}
	}
	return page, nil
}
