package client

import (
	"context"
	"time"

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
type FetchOptions struct {
	Cursor string
	Group  string
	Member string
	// Max bounds the records returned (0 = broker default, 100; the
	// broker caps it at 1000).
	Max int
	// Wait makes an empty fetch a long poll: the broker holds it until a
	// record arrives or Wait passes (capped by the broker at 30 s).
	Wait time.Duration
}

// Produce appends recs to topic in one request and returns how many the
// broker accepted, once they are durable. Records with the same key keep
// their order. Retriable failures are retried, so a record may be stored
// twice (delivery is at-least-once). For throughput, use a Producer.
func (c *Client) Produce(ctx context.Context, topic string, recs ...Record) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	var resp wire.CountResponse
	err := c.do(ctx, request{req: produceRequest(topic, recs, time.Now()), resp: &resp, resend: true})
	return int(resp.Count), err
}

func produceRequest(topic string, recs []Record, now time.Time) wire.ProduceRequest {
	out := make([]wire.Record, len(recs))
	for i := range recs {
		out[i] = toWire(&recs[i], now)
	}
	return wire.ProduceRequest{Topic: str(topic), Records: out}
}

// Fetch reads the next page of topic from the position opt describes. A
// topic that does not exist answers an empty page with an empty Cursor,
// as wire v1 specifies. With opt.Wait, Fetch blocks until a record
// arrives, the wait ends (an empty page with a cursor to continue from)
// or ctx is done.
func (c *Client) Fetch(ctx context.Context, topic string, opt FetchOptions) (Page, error) {
	wait := max(opt.Wait, 0)
	waitMs := uint32(min((wait+time.Millisecond-1)/time.Millisecond, 1<<31))
	req := wire.FetchRequest{
		Topic:  str(topic),
		Cursor: optStr(opt.Cursor),
		Group:  optStr(opt.Group),
		Member: optStr(opt.Member),
		Max:    uint32(min(max(opt.Max, 0), 1<<31)),
		WaitMs: waitMs,
	}
	var resp wire.FetchResponse
	if err := c.do(ctx, request{req: req, resp: &resp, wait: wait, resend: true}); err != nil {
		return Page{}, err
	}
	return toPage(&resp), nil
}

// Commit stores cursor durably as group's position in topic. Later
// fetches and subscriptions of the group resume there.
func (c *Client) Commit(ctx context.Context, topic, group, cursor string) error {
	req := wire.CommitRequest{Topic: str(topic), Group: str(group), Cursor: str(cursor)}
	return c.do(ctx, request{req: req, resend: true})
}

// LeaveGroup removes member from group so its ranges pass to the other
// members now rather than after their session timeout.
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
