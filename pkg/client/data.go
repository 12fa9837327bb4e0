package client

import (
	"context"
	"errors"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// Record is one record of a topic.
type Record struct {
	// Key routes the record: records with the same key land in the same
	// range and are read in the order they were produced. A nil Key means
	// no key (the broker may place the record in any range); an empty,
	// non-nil Key is a real key, distinct from nil.
	Key []byte
	// Value is the payload. The wire has no absent value, so a nil Value
	// is sent as empty, and records read back always have a non-nil Value.
	Value []byte
	// Timestamp is the producer's time, kept as data with millisecond
	// precision; the broker never trusts it. A zero Timestamp is replaced
	// by the time of the Produce call.
	Timestamp time.Time
	// Headers are application metadata carried with the record.
	Headers []Header
	// Range is the range a record was read from, when Fetch read it with
	// wire v2 (fetch_batches): the active range that took it, or an
	// ancestor of it (split or merged since) while that history drains.
	// It is informational, for diagnostics: records of one key share a
	// range only until the range splits or merges. It is 0 on records
	// read with wire v1 and on those a Subscription delivers, and it is
	// ignored when producing: routing is by Key.
	Range uint64
	// Expiry is when the record stops being served: the node that took it
	// set it from its own clock and the record's TTL (WithTTL, or the
	// topic's default_ttl_ms). Zero when the record never expires, on
	// records read with wire v1 and on those a Subscription delivers (the
	// v1 record has no such field); ignored when producing.
	Expiry time.Time
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte // nil and empty are distinct
}

// Page is one batch of records read from a topic.
type Page struct {
	Records []Record
	// Cursor is where the next read continues: pass it to the next Fetch,
	// or to Commit to store a group's position. It is opaque printable
	// text; the broker refuses a forged or altered one (ErrInvalidCursor).
	// It is "" only for a fetch of a topic that does not exist.
	Cursor string
	// Skipped counts the records retention deleted before this reader
	// read them and that this page's Cursor has passed: the read moved on
	// to the oldest record still kept. Each skip is reported once, on the
	// page whose cursor passes it. SkippedBound says Skipped is an upper
	// bound (a range read for part of its keys, or an old deletion whose
	// exact count was not kept). Records whose TTL passed are never
	// skips: they expired, as their producer asked. Always 0 from a node
	// that does not report skips, and from wire v1.
	Skipped      uint64
	SkippedBound bool
}

// FetchOptions says where and how a Fetch reads. Empty strings mean
// absent, which decides where the read starts (wire v1 precedence):
//
//   - Group and Member set: read as a member of the group, from the
//     group's committed position, only the ranges the group assigns the
//     member. Cursor is ignored.
//   - else Cursor set: continue from Cursor.
//   - else Group set: resume from the group's committed position, or the
//     start if it has committed nothing.
//   - else: read from the start of the topic.
//
// With wire v2 (see WithWireVersion), Fetch reads stored batches
// (fetch_batches): a page holds whole batches, bounded by MaxBytes, and
// by Max records when Max is positive (the node then ends the page inside
// a batch, exactly at Max).
type FetchOptions struct {
	Cursor string
	Group  string
	Member string
	// Max bounds the records returned. With wire v1, 0 is the broker's
	// default, 100, and the broker caps it at 1000. With wire v2, 0 means
	// no bound but MaxBytes, and a positive Max is exact, uncapped: the
	// page holds Max records unless MaxBytes (or the records there are)
	// stops it first.
	Max int
	// MaxBytes bounds the stored bytes of a wire v2 page (0 = the node's
	// default, 1 MiB, which is also its cap). The first batch of a page is
	// returned whole whatever its size. Wire v1 fetches ignore it.
	MaxBytes int
	// Wait makes an empty fetch a long poll: the broker holds it until a
	// record arrives or Wait passes (capped by the broker at 30 s).
	Wait time.Duration
}

// Produce appends recs to topic in one request and returns how many the
// broker accepted, once they are durable. Records with the same key keep
// their order. Retriable failures are retried, so a record may be stored
// twice (delivery is at-least-once). For throughput, use a Producer.
//
// With wire v2 the records go out as one stored batch per range
// (produce_batches), routed by the client's copy of the topic's routes,
// which it asks the node for on first use; a call holding a record too
// large for a v2 batch, or needing more batches than a request may carry,
// goes out with wire v1.
func (c *Client) Produce(ctx context.Context, topic string, recs ...Record) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	now := time.Now()
	var table *routeTable
	if c.wireInfo().version >= 2 {
		t, err := c.routes(ctx, topic)
		switch {
		case err == nil:
			table = t
		case errors.Is(err, errNoV2): // the connection changed under us
		default:
			return 0, err
		}
	}
	var (
		v1     *wire.ProduceRequest
		v2     *wire.ProduceBatchesRequest
		v2lim  wireInfo
		count  wire.CountResponse
		answer wire.ProduceBatchesResponse
	)
	defer func() {
		if v2 != nil {
			releaseBatches(v2.Batches)
		}
	}()
	var pick func(cn *conn) (request, error)
	pick = func(cn *conn) (request, error) {
		if cn.v2 && table != nil && fitsV2(recs, &cn.wire) {
			if v2 == nil || v2lim != cn.wire {
				if v2 != nil {
					releaseBatches(v2.Batches)
					v2 = nil
				}
				batches, err := encodeByRange(table, recs, now, &cn.wire)
				if err != nil {
					return request{}, err
				}
				if len(batches) > maxRequestBatches || rawBytes(batches) > maxRequestRawBytes {
					releaseBatches(batches)
					table = nil // more than one request may carry
					return pick(cn)
				}
				v2, v2lim = &wire.ProduceBatchesRequest{Topic: str(topic), Batches: batches}, cn.wire
			}
			return request{req: *v2, resp: &answer, resend: true}, nil
		}
		if v1 == nil {
			req := produceRequest(topic, recs, now)
			v1 = &req
		}
		return request{req: *v1, resp: &count, resend: true}, nil
	}
	r, err := c.doPick(ctx, pick)
	if r.req != nil && r.req.APIKey() == wire.KeyProduceBatches {
		if answer.Rerouted > 0 || IsRetriable(err) {
			c.refreshRoutes(topic)
		}
		return int(answer.Count), err
	}
	return int(count.Count), err
}

// fitsV2 reports whether every record fits in a batch the node accepts.
func fitsV2(recs []Record, w *wireInfo) bool {
	for i := range recs {
		if recordSize(&recs[i]) > w.maxBatchBytes {
			return false
		}
	}
	return true
}

// encodeByRange encodes recs as batches, one per range they route to
// (more where a range's records exceed the node's batch limits), each
// range's in the order of recs.
func encodeByRange(table *routeTable, recs []Record, now time.Time, w *wireInfo) ([]wire.RangeBatch, error) {
	builders := make(map[int]*batchfmt.Builder)
	var order []int // ranges in order of first use
	var out []wire.RangeBatch
	for i := range recs {
		r := &recs[i]
		idx := table.index(r.Key)
		b := builders[idx]
		if b == nil {
			b = new(batchfmt.Builder)
			builders[idx] = b
			order = append(order, idx)
		}
		if b.Len() > 0 && (b.Len() >= w.maxBatchRecords || b.RawLen()+recordSize(r) > w.maxBatchBytes) {
			bb, err := finishBatch(b, CompressionNone)
			if err != nil {
				releaseBatches(out)
				return nil, err
			}
			out = append(out, wire.RangeBatch{Range: table.ranges[idx].Range, Batch: bb})
		}
		addRecord(b, r, timestampMs(r.Timestamp, now))
	}
	for _, idx := range order {
		if b := builders[idx]; b.Len() > 0 {
			bb, err := finishBatch(b, CompressionNone)
			if err != nil {
				releaseBatches(out)
				return nil, err
			}
			out = append(out, wire.RangeBatch{Range: table.ranges[idx].Range, Batch: bb})
		}
	}
	return out, nil
}

// rawBytes is the raw records bytes of batches (all uncompressed).
func rawBytes(bs []wire.RangeBatch) int {
	n := 0
	for _, b := range bs {
		n += len(b.Batch) - batchfmt.HeaderSize
	}
	return n
}

// releaseBatches recycles the buffers of batches that were built here and
// sent.
func releaseBatches(bs []wire.RangeBatch) {
	for _, b := range bs {
		batchfmt.Release(b.Batch)
	}
}

// timestampMs is the wire timestamp of a record: its own, or now for a
// zero Timestamp, in unix milliseconds, never negative.
func timestampMs(ts, now time.Time) int64 {
	if ts.IsZero() {
		ts = now
	}
	return max(ts.UnixMilli(), 0)
}

func produceRequest(topic string, recs []Record, now time.Time) wire.ProduceRequest {
	out := make([]wire.Record, len(recs))
	for i := range recs {
		out[i] = toWire(&recs[i], now)
	}
	return wire.ProduceRequest{Topic: str(topic), Records: out}
}

// CommitOptions says what Commit stores: Cursor as Group's position.
type CommitOptions struct {
	// Group is the consumer group whose position moves.
	Group string
	// Cursor is the position, a Page.Cursor: the group resumes after the
	// records of that page.
	Cursor string
}

// Commit stores opt.Cursor durably as opt.Group's position in topic.
// Later fetches and subscriptions of the group resume there. A commit
// never moves a group back (SeekGroup does).
func (c *Client) Commit(ctx context.Context, topic string, opt CommitOptions) error {
	req := wire.CommitRequest{Topic: str(topic), Group: str(opt.Group), Cursor: str(opt.Cursor)}
	return c.do(ctx, request{req: req, resend: true})
}

// LeaveGroup removes member from group so its ranges pass to the other
// members now rather than after their member timeout. (It keeps its
// positional arguments: a Consumer leaves its group when closed.)
func (c *Client) LeaveGroup(ctx context.Context, topic, group, member string) error {
	req := wire.LeaveGroupRequest{Topic: str(topic), Group: str(group), Member: str(member)}
	return c.do(ctx, request{req: req, resend: true})
}

func toWire(r *Record, now time.Time) wire.Record {
	ts := r.Timestamp
	if ts.IsZero() {
		ts = now
	}
	w := wire.Record{Key: r.Key, Value: r.Value, Timestamp: uint64(max(ts.UnixMilli(), 0))}
	if len(r.Headers) > 0 {
		w.Headers = make([]wire.Header, len(r.Headers))
		for i, h := range r.Headers {
			w.Headers[i] = wire.Header{Key: []byte(h.Key), Value: h.Value}
		}
	}
	return w
}

// fromWire converts a decoded record. Its byte slices alias the answer's
// payload, which belongs to this call alone.
func fromWire(w *wire.Record) Record {
	r := Record{Key: w.Key, Value: w.Value}
	if r.Value == nil {
		r.Value = []byte{}
	}
	if w.Timestamp != 0 {
		r.Timestamp = time.UnixMilli(int64(w.Timestamp))
	}
	if len(w.Headers) > 0 {
		r.Headers = make([]Header, len(w.Headers))
		for i, h := range w.Headers {
			r.Headers[i] = Header{Key: string(h.Key), Value: h.Value}
		}
	}
	return r
}

func toPage(resp *wire.FetchResponse) Page {
	p := Page{Records: make([]Record, len(resp.Records))}
	for i := range resp.Records {
		p.Records[i] = fromWire(&resp.Records[i])
	}
	if resp.NextCursor != nil {
		p.Cursor = *resp.NextCursor
	}
	return p
}
