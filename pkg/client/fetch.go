package client

import (
	"context"
	"fmt"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// Fetch reads the next page of topic from the position opt describes.
// With opt.Wait, Fetch blocks until a record arrives, the wait ends (an
// empty page with a cursor to continue from) or ctx is done. Such a long
// poll goes on a connection of its own (see Client), and asks the node to
// wait no longer than ctx's deadline allows.
//
// A topic that does not exist fails the fetch with ErrNoSuchTopic, at
// once (wire v1 nodes answer it with an empty page without a cursor,
// which the client reports so).
//
// Fetch decodes every record of the page into Page.Records. FetchBatches
// reads the same page without doing so, for readers that walk the
// records once.
func (c *Client) Fetch(ctx context.Context, topic string, opt FetchOptions) (Page, error) {
	bp, err := c.FetchBatches(ctx, topic, opt)
	if err != nil {
		return Page{}, err
	}
	recs, err := bp.Records()
	if err != nil {
		return Page{}, err
	}
	return Page{Records: recs, Cursor: bp.Cursor, Skipped: bp.Skipped, SkippedBound: bp.SkippedBound}, nil
}

// BatchPage is a page read by FetchBatches. With wire v2 it holds the
// stored batches the node sent, their framing checked and their records
// counted from their headers, but nothing decoded: Each decodes the
// records, checking each batch's CRC, as it walks them. With wire v1 it
// holds the records of a v1 fetch.
type BatchPage struct {
	// Cursor is where the next read continues, as Page.Cursor.
	Cursor string
	// Skipped and SkippedBound are Page's.
	Skipped      uint64
	SkippedBound bool

	batches []wire.RangeBatch // wire v2
	payload []byte            // the answer batches alias, for Release
	recs    []Record          // wire v1
	n       int
	rtt     time.Duration
}

// keepPayload decodes an answer into resp and keeps the payload it
// aliases.
type keepPayload struct {
	resp    decoder
	payload []byte
}

func (k *keepPayload) Decode(payload []byte) error {
	k.payload = payload
	return k.resp.Decode(payload)
}

// FetchBatches reads the next page of topic as Fetch does, and returns it
// undecoded: a reader that walks the records once (Each) skips building a
// Record for each, and with it most of a page's allocations.
func (c *Client) FetchBatches(ctx context.Context, topic string, opt FetchOptions) (*BatchPage, error) {
	wait := pollWait(ctx, opt.Wait)
	waitMs := uint32(min((wait+time.Millisecond-1)/time.Millisecond, 1<<31))
	var (
		v1 wire.FetchResponse
		v2 wire.FetchBatchesResponse
	)
	kept := &keepPayload{resp: &v2}
	sent := time.Now()
	r, err := c.doOn(ctx, wait > 0, func(cn *conn) (request, error) {
		if cn.v2 {
			req := wire.FetchBatchesRequest{
				Topic:      str(topic),
				Cursor:     optStr(opt.Cursor),
				Group:      optStr(opt.Group),
				Member:     optStr(opt.Member),
				MaxBytes:   clampU32(opt.MaxBytes),
				MaxRecords: clampU32(opt.Max),
				WaitMs:     waitMs,
				Flags:      cn.skipFlags(),
			}
			return request{req: req, resp: kept, wait: wait, resend: true}, nil
		}
		req := wire.FetchRequest{
			Topic:  str(topic),
			Cursor: optStr(opt.Cursor),
			Group:  optStr(opt.Group),
			Member: optStr(opt.Member),
			Max:    clampU32(opt.Max),
			WaitMs: waitMs,
		}
		return request{req: req, resp: &v1, wait: wait, resend: true}, nil
	})
	if err != nil {
		return nil, err
	}
	rtt := time.Since(sent)
	if r.req.APIKey() == wire.KeyFetchBatches {
		p, err := newBatchPage(&v2, kept.payload)
		if p != nil {
			p.rtt = rtt
		}
		return p, err
	}
	if v1.NextCursor == nil {
		// Wire v1's answer to a fetch of a missing topic.
		return nil, opError("fetch", topic, errorFor(wire.ReasonNoSuchTopic))
	}
	p := toPage(&v1)
	return &BatchPage{Cursor: p.Cursor, recs: p.Records, n: len(p.Records), rtt: rtt}, nil
}

// pollWait is how long a long poll asks the node to wait: wait, but no
// longer than ctx's deadline allows, less a margin for the answer to
// arrive. A poll the caller gives up on keeps its slot on the node until
// the node answers it (the wire has no cancel), so a poll is better not
// asked to outlive its caller.
func pollWait(ctx context.Context, wait time.Duration) time.Duration {
	wait = max(wait, 0)
	if dl, ok := ctx.Deadline(); ok && wait > 0 {
		left := time.Until(dl)
		wait = max(min(wait, left-left/10-10*time.Millisecond), time.Millisecond)
	}
	return wait
}

// newBatchPage checks the framing of the batches of a fetch_batches
// answer, whose payload belongs to the page from now on, and counts their
// records.
func newBatchPage(resp *wire.FetchBatchesResponse, payload []byte) (*BatchPage, error) {
	p := &BatchPage{batches: resp.Batches, payload: payload, Skipped: resp.Skips.Count, SkippedBound: resp.Skips.Bound}
	if resp.NextCursor != nil {
		p.Cursor = *resp.NextCursor
	}
	for _, b := range resp.Batches {
		h, err := batchfmt.ParseHeader(b.Batch)
		if err == nil && h.Length != len(b.Batch) {
			err = fmt.Errorf("length field %d, %d bytes received", h.Length, len(b.Batch))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: fetch_batches: batch of range %d: %w: %w", ErrProtocol, b.Range, errBadBatch, err)
		}
		p.n += int(h.RecordCount)
	}
	return p, nil
}

// RoundTrip is how long the fetch that read the page took, from its
// request to the last byte of its answer (with FetchBatches, retries
// included).
func (p *BatchPage) RoundTrip() time.Duration { return p.rtt }

// Len is the number of records in the page, as the batch headers count
// them (Each checks they hold as many).
func (p *BatchPage) Len() int { return p.n }

// Each calls fn with every record of the page, in order. r, and
// r.Headers, are reused from one call to the next, so fn copies what it
// keeps of them; the byte slices they hold belong to the page and may be
// kept. A batch that fails its checks (CRC, framing, counts) ends the walk
// with an error wrapping ErrProtocol, after fn has seen the records of the
// batches before it.
func (p *BatchPage) Each(fn func(r *Record)) error {
	if p.batches == nil {
		var r Record
		for i := range p.recs {
			r = p.recs[i]
			fn(&r)
		}
		return nil
	}
	var (
		rec  Record
		hdrs []Header
	)
	for _, b := range p.batches {
		err := batchfmt.Scan(b.Batch, func(r *batchfmt.Record) {
			rec = Record{Key: r.Key, Value: r.Value, Range: b.Range}
			if rec.Value == nil {
				rec.Value = []byte{} // records read back always have a value
			}
			if r.Timestamp != 0 {
				rec.Timestamp = time.UnixMilli(r.Timestamp)
			}
			if r.Expiry != 0 {
				rec.Expiry = time.UnixMilli(r.Expiry)
			}
			if len(r.Headers) > 0 {
				hdrs = hdrs[:0]
				for _, hd := range r.Headers {
					hdrs = append(hdrs, Header{Key: string(hd.Key), Value: hd.Value})
				}
				rec.Headers = hdrs
			}
			fn(&rec)
		})
		if err != nil {
			return fmt.Errorf("%w: fetch_batches: batch of range %d: %w: %w", ErrProtocol, b.Range, errBadBatch, err)
		}
	}
	return nil
}

// Records decodes the page's records into a slice of their own; their
// byte slices belong to the page.
func (p *BatchPage) Records() ([]Record, error) {
	if p.batches == nil {
		return p.recs, nil
	}
	out := make([]Record, 0, min(p.n, p.bytes()/batchfmt.MinRecordSize))
	for _, b := range p.batches {
		var err error
		if out, err = decodeBatch(b.Batch, b.Range, out); err != nil {
			return nil, fmt.Errorf("%w: fetch_batches: batch of range %d: %w", ErrProtocol, b.Range, err)
		}
	}
	return out, nil
}

// Release hands the page's memory back to the client, for later fetches
// to reuse, once nothing uses the page any more: neither it nor any byte
// slice of its records (Each's or Records'), which later fetches may
// overwrite. The page is empty afterwards. Releasing is optional: a page
// never released is garbage collected like any other value.
func (p *BatchPage) Release() {
	releasePayload(p.payload)
	*p = BatchPage{Cursor: p.Cursor, rtt: p.rtt}
}

// bytes is the size of the page's batches.
func (p *BatchPage) bytes() int {
	n := 0
	for _, b := range p.batches {
		n += len(b.Batch)
	}
	return n
}
