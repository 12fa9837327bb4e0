package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// FetcherDepth is how many pages a Fetcher reads ahead of its caller.
const FetcherDepth = 2

// Fetcher reads a topic page after page, each page continuing from the
// cursor of the one before, and keeps the next fetch in flight while the
// caller walks the current page.
//
// A fetch's position is the previous answer's cursor, so fetches cannot
// simply overlap; but with wire v2 the cursor comes at the head of a
// fetch_batches answer, and the Fetcher sends the next fetch as soon as it
// has arrived, before the rest of the page: the node reads the next page
// while the current one is still on its way. It holds at most
// FetcherDepth pages read ahead of Next (besides the answers of the
// fetches in flight), and has at most two fetches in flight. With wire v1
// it fetches one page at a time.
//
// The first fetch reads where the FetchOptions say; later ones continue
// from the cursor of the page before, with opt's Group and Member left
// out (as Fetch reads when given only a Cursor). A fetch that fails is
// tried again once, with Fetch's retries, from where it was to read;
// after that Next returns the error and the Fetcher is done. Close it to
// stop it.
type Fetcher struct {
	c      *Client
	topic  string
	pages  chan fetcherResult
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error // what ended it, once Next has returned it
	sizes  *pageSizes
}

// pageSizeWindow is how many of a Fetcher's last pages size the buffers
// its answers are read into.
const pageSizeWindow = 32

// nodePageBytes is the page size a node gives a fetch that does not say
// (the default FetchMaxBytes, which also caps what a fetch asks for), and
// pageOverhead about what an answer adds to its page's batches (the
// cursor, a range and a length per batch). Together they size a Fetcher's
// buffers until its pages have shown how large they are; the window
// catches up with a node configured otherwise, or with pages of many tiny
// batches.
const (
	nodePageBytes = 1 << 20
	pageOverhead  = 64 << 10
)

// pageSizes remembers how large a Fetcher's last pages have been, so that
// a buffer allocated for its next answer fits the pages after it too (see
// payloadBuf): its pages end on batch boundaries and vary in size.
type pageSizes struct {
	hint atomic.Int64 // the largest in last; read by the connection's reader goroutine
	last [pageSizeWindow]int64
	next int // where the next page goes in last
}

// newPageSizes starts with a window of pages as large as what a fetch of
// maxBytes (0: the node's default) may return.
func newPageSizes(maxBytes int) *pageSizes {
	first := nodePageBytes
	if maxBytes > 0 {
		first = min(maxBytes, nodePageBytes)
	}
	s := &pageSizes{}
	for i := range s.last {
		s.last[i] = int64(first + pageOverhead)
	}
	s.hint.Store(int64(first + pageOverhead))
	return s
}

// note counts a page of n payload bytes (the Fetcher's goroutine only).
func (s *pageSizes) note(n int) {
	s.last[s.next] = int64(n)
	s.next = (s.next + 1) % pageSizeWindow
	s.hint.Store(slices.Max(s.last[:]))
}

// fetcherResult is a page read ahead, or why none could be.
type fetcherResult struct {
	page *BatchPage
	err  error
}

// NewFetcher starts a Fetcher of topic from where opt says. opt.Wait
// applies to every fetch: an empty page after it is a page like any other.
func (c *Client) NewFetcher(topic string, opt FetchOptions) *Fetcher {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fetcher{
		c: c, topic: topic,
		// One page waits here, and the next in run's hand.
		pages: make(chan fetcherResult, FetcherDepth-1),
		ctx:   ctx, cancel: cancel,
		done:  make(chan struct{}),
		sizes: newPageSizes(opt.MaxBytes),
	}
	go f.run(opt)
	return f
}

// Next returns the next page, waiting for it until ctx is done. After an
// error, every call returns it; after Close, ErrClosed. Next is not safe
// for concurrent use.
func (f *Fetcher) Next(ctx context.Context) (*BatchPage, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.ctx.Err() != nil {
		return nil, ErrClosed
	}
	select {
	case r := <-f.pages:
		f.err = r.err
		return r.page, r.err
	case <-f.done:
		select { // a page or error handed over before it stopped comes first
		case r := <-f.pages:
			f.err = r.err
			return r.page, r.err
		default:
			return nil, ErrClosed
		}
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Close stops the Fetcher and waits for its goroutine; fetches in flight
// are abandoned, and the pages read ahead are dropped.
func (f *Fetcher) Close() error {
	f.cancel()
	<-f.done
	return nil
}

// fetchCall is one fetch_batches in flight: the handler of its answer.
type fetchCall struct {
	opt      FetchOptions // what it asked for
	cn       *conn
	corr     uint32
	sent     time.Time
	answered time.Time // set before done is (reader goroutine)
	deadline time.Time
	sizes    *pageSizes  // its Fetcher's
	cursor   chan string // its answer's cursor, once (capacity 1)
	announce bool        // the cursor was sent (reader goroutine only)
	done     chan reply  // its answer (capacity 1)
}

func (f *fetchCall) stream() bool { return false }

func (f *fetchCall) payloadSize() int { return int(f.sizes.hint.Load()) }

func (f *fetchCall) headCursor(cur string) {
	f.announce = true
	f.cursor <- cur
}

func (f *fetchCall) deliver(code uint16, payload []byte) {
	if !f.announce && code == wire.CodeOK {
		if cur, ok := headCursor(payload); ok {
			f.cursor <- cur
		}
	}
	f.answered = time.Now()
	f.done <- reply{code: code, payload: payload}
}

func (f *fetchCall) fail(err error) { f.done <- reply{err: err} }

// headCursor is the str(next_cursor) at the head of a fetch_batches
// answer's payload.
func headCursor(p []byte) (string, bool) {
	if len(p) < 5 || p[0] != 1 {
		return "", false
	}
	n := int(binary.BigEndian.Uint32(p[1:]))
	if n > len(p)-5 {
		return "", false
	}
	return string(p[5 : 5+n]), true
}

// maxFetchesInFlight bounds a Fetcher's fetches awaiting their answers.
const maxFetchesInFlight = 2

// run reads pages into f.pages until it is stopped or fails.
func (f *Fetcher) run(opt FetchOptions) {
	defer close(f.done)
	var (
		queue []*fetchCall // sent, page not yet handed over, oldest first
		next  = &opt       // the next fetch, once its cursor is known
		err   error
		// v1 is set once the connection turned out not to speak wire v2:
		// pages are then read one at a time, once those in flight are in.
		v1 bool
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	drop := func() {
		for _, fc := range queue {
			fc.cn.forget(fc.corr)
		}
		queue = nil
	}
	defer drop()
	for {
		if next != nil && v1 && len(queue) == 0 {
			// Wire v1: one page at a time, with Fetch's retries.
			if next, err = f.fetchOnce(*next, opt); err != nil {
				return
			}
			continue
		}
		if next != nil && !v1 && len(queue) < maxFetchesInFlight {
			fc, err := f.send(*next)
			switch {
			case errors.Is(err, errNoV2):
				v1 = true
			case err != nil:
				f.finish(err)
				return
			default:
				queue, next = append(queue, fc), nil
			}
			continue
		}
		oldest, newest := queue[0], queue[len(queue)-1]
		var cursor chan string
		if next == nil {
			cursor = newest.cursor
		}
		timer.Reset(time.Until(oldest.deadline))
		var page *BatchPage
		select {
		case cur := <-cursor:
			next = continueFrom(opt, cur)
			continue
		case r := <-oldest.done:
			queue = queue[1:]
			if page, err = f.page(r); err == nil {
				page.rtt = oldest.answered.Sub(oldest.sent)
			}
		case <-timer.C:
			err = ErrRequestTimeout
		case <-f.ctx.Done():
			return
		}
		if err == nil {
			if len(queue) == 0 && next == nil {
				// Its cursor was not taken yet: the page has it too.
				next = continueFrom(opt, page.Cursor)
			}
			if !f.hand(page) {
				return
			}
			continue
		}
		// Read again from where the failed fetch was to read, with
		// Fetch's retries; the fetches sent after it are dropped.
		drop()
		if next, err = f.fetchOnce(oldest.opt, opt); err != nil {
			return
		}
	}
}

// continueFrom is the fetch after a page of a Fetcher started with opt,
// whose cursor is cur.
func continueFrom(opt FetchOptions, cur string) *FetchOptions {
	opt.Cursor, opt.Group, opt.Member = cur, "", ""
	return &opt
}

// send sends one fetch_batches for o; errNoV2 if the connection does not
// speak wire v2.
func (f *Fetcher) send(o FetchOptions) (*fetchCall, error) {
	cn, err := f.c.laneConn(f.ctx, o.Wait > 0)
	if err != nil {
		return nil, err
	}
	if !cn.v2 {
		return nil, errNoV2
	}
	wait := max(o.Wait, 0)
	req := wire.FetchBatchesRequest{
		Topic:      str(f.topic),
		Cursor:     optStr(o.Cursor),
		Group:      optStr(o.Group),
		Member:     optStr(o.Member),
		MaxBytes:   clampU32(o.MaxBytes),
		MaxRecords: clampU32(o.Max),
		WaitMs:     uint32(min((wait+time.Millisecond-1)/time.Millisecond, 1<<31)),
		Flags:      cn.skipFlags(),
	}
	now := time.Now()
	fc := &fetchCall{
		opt: o, cn: cn, sent: now, sizes: f.sizes,
		deadline: now.Add(f.c.cfg.requestTimeout + wait),
		cursor:   make(chan string, 1),
		done:     make(chan reply, 1),
	}
	if fc.corr, err = cn.send(req, fc); err != nil {
		return nil, err
	}
	return fc, nil
}

// page decodes the answer of a fetch.
func (f *Fetcher) page(r reply) (*BatchPage, error) {
	payload, err := r.result()
	if err != nil {
		return nil, err
	}
	f.sizes.note(len(payload))
	var resp wire.FetchBatchesResponse
	if err := resp.Decode(payload); err != nil {
		return nil, fmt.Errorf("%w: fetch_batches answer: %w", ErrProtocol, err)
	}
	return newBatchPage(&resp, payload)
}

// fetchOnce reads the page o asks for with FetchBatches (and its
// retries), hands it over and returns the fetch after it; on failure it
// hands the error over instead.
func (f *Fetcher) fetchOnce(o, start FetchOptions) (*FetchOptions, error) {
	page, err := f.c.FetchBatches(f.ctx, f.topic, o)
	if err == nil && page.Cursor == "" {
		err = opError("fetch", f.topic, errorFor(wire.ReasonNoSuchTopic)) // wire v1's answer
	}
	if err != nil {
		f.finish(err)
		return nil, err
	}
	next := continueFrom(start, page.Cursor) // the page is Next's once handed
	if !f.hand(page) {
		return nil, ErrClosed
	}
	return next, nil
}

// hand passes a page to Next; false once the Fetcher is stopped.
func (f *Fetcher) hand(page *BatchPage) bool {
	select {
	case f.pages <- fetcherResult{page: page}:
		return true
	case <-f.ctx.Done():
		return false
	}
}

// finish passes the error that ends the Fetcher to Next.
func (f *Fetcher) finish(err error) {
	select {
	case f.pages <- fetcherResult{err: err}:
	case <-f.ctx.Done():
	}
}
