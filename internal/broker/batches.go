package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Bounds of one batch a producer builds (wire v2). A batch is stored as
// received, so these also bound what a v1 reader decodes to serve a page
// of at most 1,000 records: the node's own batches are cut at 512 records
// or 256 KiB for the same reason. Larger batches would not make v2 faster
// (the cost is per byte), but would make every v1 page of them decode the
// same batch again.
const (
	MaxBatchBytes   = 256 << 10 // raw (uncompressed) records section
	MaxBatchRecords = 4096
	// maxRecordHeaders matches the wire v1 limit on headers per record.
	maxRecordHeaders = 1024
)

// Bounds of one produce_batches request, checked before anything is
// stored. A compressed batch costs the node its raw length in CPU to
// check and, when it must be re-routed record by record, in disk: the
// raw bytes of a request are bounded like a v1 frame's, and a batch may
// not claim to inflate more than maxCompressionRatio times (zeros do far
// better, real records far worse), so a small request cannot buy much.
const (
	MaxRequestRawBytes  = 16 << 20
	MaxRequestBatches   = 4096
	maxCompressionRatio = 1024
)

// ErrInvalidBatch wraps every refusal of a producer's batch; nothing of
// the request is stored.
var ErrInvalidBatch = errors.New("invalid_batch")

// RangeBatch is a batch a producer built for one range, in the storage
// batch encoding with offsets 0..count-1.
type RangeBatch struct {
	Range uint64
	Batch []byte
}

// checkedBatch is a validated batch and whether it can go to its range
// as is (false: the range is retired, unknown, or some key is outside it).
type checkedBatch struct {
	RangeBatch
	records int
	span    keyspace.Span // its range's keys
	direct  bool
}

// ProduceBatchesAsync stores batches built by a producer (wire v2). Every
// batch is validated first (framing, counts, checksums, decompression
// bounds; see segment.CheckProduce); one bad batch refuses the request and
// stores nothing. A batch whose range is active and holds all its keys is
// stamped with the range's next offset and appended as received. One the
// producer routed with stale routes (its range split or merged) is
// decoded and routed record by record, in order, so per-key order holds
// either way. done is called once with the records stored and the number
// of batches re-routed, after everything is durable (or with the first
// error).
//
// The batches' bytes are the broker's from the call until done runs: their
// base offsets are rewritten in place and the store writes them as they
// are, so the caller must neither change nor reuse them before then. (A
// refusal returned by the call itself hands them back at once.)
func (b *Broker) ProduceBatchesAsync(ctx context.Context, topic string, batches []RangeBatch, done func(n, rerouted int, err error)) error {
	if b.closed.Load() {
		return ErrShuttingDown
	}
	checked, reserved, topicID, err := b.checkBatches(topic, batches)
	if err != nil {
		return err
	}
	if err := b.stampBatches(topicID, checked, reserved); err != nil {
		return err
	}
	if len(checked) > 1 {
		b.openHeads(topicID, directRanges(checked))
	}
	total := 0
	for _, c := range checked {
		total += c.records
	}
	// rerouted is final before wait is sealed, and done runs only after.
	rerouted := 0
	wait := newProduceWait(total, func(n int, err error) { done(n, rerouted, err) })
	for _, c := range checked {
		// While a forward queue of a range retired over c's range holds
		// produces, c's records go behind them, record by record.
		if c.direct && !b.queuedOver(topicID, c) {
			err := b.appendBatch(ctx, topic, topicID, c, wait)
			if err == nil {
				continue
			}
			if !errors.Is(err, errRetired) {
				wait.setErr(err)
				continue
			}
			rerouted++
		} else if !c.direct {
			rerouted++
		}
		recs, err := segment.DecodeRecords(c.Batch, nil)
		if err != nil {
			wait.setErr(fmt.Errorf("%w: %v", ErrInvalidBatch, err))
			continue
		}
		_ = b.routeInto(ctx, topic, recs, wait, false)
	}
	wait.sealed()
	return nil
}

// queuedOver reports whether a forward queue of another range holds
// produces for some of c's keys (c's range took over from it).
func (b *Broker) queuedOver(topicID uint64, c checkedBatch) bool {
	return b.data != nil && len(b.data.queuesOver(topicID, c.Range, c.span, 0)) > 0
}

// rangeSpan is what checking a batch needs to know of its range.
type rangeSpan struct {
	span   keyspace.Span
	active bool
}

// checkBatches validates every batch outside the metadata lock, after
// copying the spans of the ranges they name, and says which batches have
// a record carrying a reserved header.
func (b *Broker) checkBatches(topic string, batches []RangeBatch) ([]checkedBatch, []bool, uint64, error) {
	if len(batches) > MaxRequestBatches {
		return nil, nil, 0, fmt.Errorf("%w: %d batches in one request, at most %d", ErrInvalidBatch, len(batches), MaxRequestBatches)
	}
	if err := checkRawBudget(batches); err != nil {
		return nil, nil, 0, err
	}
	var (
		topicID uint64
		bits    uint8
		spans   = make(map[uint64]rangeSpan, min(len(batches), 64))
		err     error
	)
	err = metadata.ErrNoSuchTopic
	_ = b.plane.ViewTopicName(topic, func(st *metadata.State) {
		t, ok := st.TopicHeader(topic)
		if !ok {
			return
		}
		err = nil
		topicID, bits = t.ID, t.Bits
		for _, rb := range batches {
			if r, ok := st.Range(rb.Range); ok && r.Topic == t.ID {
				spans[rb.Range] = rangeSpan{span: keyspace.Span{Start: r.Start, End: r.End}, active: r.Active}
			}
		}
	})
	if err != nil {
		return nil, nil, 0, err
	}
	lim := segment.ProduceLimits{MaxRawBytes: MaxBatchBytes, MaxRecords: MaxBatchRecords, MaxHeaders: maxRecordHeaders}
	out := make([]checkedBatch, len(batches))
	reserved := make([]bool, len(batches))
	for i, rb := range batches {
		rs, known := spans[rb.Range]
		inside := func(key []byte) bool { return rs.span.Contains(keyspace.Position(key, bits)) }
		rep, err := batch.CheckProduceReport(rb.Batch, lim, inside)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: batch %d: %v", ErrInvalidBatch, i, err)
		}
		h := rep.Header
		// A compressed section may be a little larger than its raw
		// length, never much: padding would let a small raw length carry
		// a batch as large as a frame.
		if h.Length > segment.HeaderSize+h.RawLength+h.RawLength/8+1<<10 {
			return nil, nil, 0, fmt.Errorf("%w: batch %d: %d bytes for a raw length of %d", ErrInvalidBatch, i, h.Length, h.RawLength)
		}
		out[i] = checkedBatch{RangeBatch: rb, records: int(h.RecordCount), span: rs.span, direct: known && rs.active && rep.KeysInside}
		reserved[i] = rep.Reserved
	}
	return out, reserved, topicID, nil
}

// checkRawBudget bounds what a request's batches claim before any of
// them is decompressed: the sum of raw lengths, and each batch's
// compression ratio. Headers that do not parse are left to CheckProduce.
func checkRawBudget(batches []RangeBatch) error {
	raw := 0
	for i, rb := range batches {
		h, err := segment.ParseHeader(rb.Batch)
		if err != nil {
			continue
		}
		if h.RawLength > maxCompressionRatio*max(len(rb.Batch)-segment.HeaderSize, 1) {
			return fmt.Errorf("%w: batch %d: %d bytes claim to inflate to %d", ErrInvalidBatch, i, len(rb.Batch), h.RawLength)
		}
		raw += h.RawLength
		if raw > MaxRequestRawBytes {
			return fmt.Errorf("%w: the batches hold more than %d raw bytes", ErrInvalidBatch, MaxRequestRawBytes)
		}
	}
	return nil
}

// appendBatch stamps c's batch with its range's next offset and
// enqueues it, or queues it for the node writing the range. errRetired
// means the range stopped taking writes and nothing was enqueued.
func (b *Broker) appendBatch(ctx context.Context, topic string, topicID uint64, c checkedBatch, wait *produceWait) error {
	h := b.headFor(topicID, c.Range)
	h.mu.Lock()
	defer h.mu.Unlock()
	forward := func(node uint64) error {
		return b.forwardLocked(h, node, newTracedFwdItem(ctx, topic, [][]byte{c.Batch}, c.records, len(c.Batch), wait))
	}
	notify := b.watchFor(topicID)
	for repairs := 0; ; repairs++ {
		if h.fwd.busy {
			return forward(0)
		}
		err := b.writableLocked(h)
		if node, remote := isNotOwner(err); remote && b.data != nil {
			return forward(node)
		}
		if errors.Is(err, metadata.ErrActiveSegmentExists) {
			b.catchUpUnlocked(h) // another node opened the range's segment first
		}
		if err == nil {
			if err = segment.Restamp(c.Batch, h.next); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidBatch, err)
			}
			err = b.enqueueBatchLocked(ctx, h, c.Batch, c.records, wait, notify)
		}
		if err == nil || errors.Is(err, errRetired) || h.ready || repairs >= maxHeadRepairs {
			return err
		}
	}
}

// RouteRange is an active range of a topic and its key positions.
type RouteRange struct{ Range, Start, End uint64 }

// Routes returns the topic's keyspace bits and its active ranges by start,
// which is what a producer needs to build one batch per range.
func (b *Broker) Routes(topic string) (uint8, []RouteRange, error) {
	var (
		bits uint8
		out  []RouteRange
		err  error
	)
	err = metadata.ErrNoSuchTopic
	_ = b.plane.ViewTopicName(topic, func(st *metadata.State) {
		t, ok := st.TopicHeader(topic)
		if !ok {
			return
		}
		err = nil
		bits = t.Bits
		for _, r := range st.ActiveRanges(t.ID) {
			out = append(out, RouteRange{Range: r.ID, Start: r.Start, End: r.End})
		}
	})
	slices.SortFunc(out, func(a, b RouteRange) int { return cmp.Compare(a.Start, b.Start) })
	return bits, out, err
}
