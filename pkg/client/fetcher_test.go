package client

import (
	"bytes"
	"errors"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"
	"unsafe"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// bigBatch is a stored batch of n records of size-byte values.
func bigBatch(t *testing.T, n, size int) []byte {
	t.Helper()
	var b batchfmt.Builder
	for i := range n {
		v := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		b.Add(1_700_000_000_000, 0, []byte(strconv.Itoa(i)), v, 0)
	}
	out, err := b.Finish(batchfmt.CodecNone, 0)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startFetchFake starts a fake wire v2 node whose fetch_batches answers
// come from fetch.
func startFetchFake(t *testing.T, fetch func(fc *fakeConn, corr uint32, r *wire.FetchBatchesRequest)) *fakeBroker {
	fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 2 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	return startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, func(fc *fakeConn, corr uint32, req wire.Request) {
		if r, ok := req.(*wire.FetchBatchesRequest); ok {
			fetch(fc, corr, r)
			return
		}
		fv.handle(fc, corr, req)
	})
}

// TestFetcherSendsNextOnCursor: a Fetcher sends the next fetch_batches as
// soon as the cursor at the head of an answer has arrived, before the rest
// of the page: the fake node withholds the end of its first page until
// the second fetch, from that page's cursor, has come in.
func TestFetcherSendsNextOnCursor(t *testing.T) {
	batch := bigBatch(t, 100, 1000)  // a page above minPooledPayload
	second := make(chan struct{})    // the second fetch came
	firstSent := make(chan struct{}) // the first page is written whole
	f := startFetchFake(t, func(fc *fakeConn, corr uint32, r *wire.FetchBatchesRequest) {
		switch {
		case r.Cursor != nil && *r.Cursor == "c2":
			fc.ok(corr, wire.FetchBatchesResponse{NextCursor: r.Cursor}) // nothing new
		case r.Cursor != nil:
			if *r.Cursor != "c1" {
				t.Errorf("fetch from cursor %q, want c1", *r.Cursor)
			}
			close(second)
			go func() {
				<-firstSent // frames must not interleave
				next := "c2"
				fc.ok(corr, wire.FetchBatchesResponse{NextCursor: &next})
			}()
		default:
			next := "c1"
			frame := wire.AppendOKFrame(nil, corr, wire.FetchBatchesResponse{NextCursor: &next, Batches: []wire.RangeBatch{{Range: 7, Batch: batch}}})
			go func() {
				fc.reply(frame[:1000])
				select {
				case <-second:
				case <-time.After(10 * time.Second):
					t.Error("the second fetch did not come before the first page was complete")
				}
				fc.reply(frame[1000:])
				close(firstSent)
			}()
		}
	})
	c := dialFake(t, f)
	fr := c.NewFetcher("t", FetchOptions{})
	defer fr.Close()
	p1, err := fr.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if p1.Cursor != "c1" || p1.Len() != 100 {
		t.Fatalf("first page: cursor %q, %d records", p1.Cursor, p1.Len())
	}
	n := 0
	if err := p1.Each(func(r *Record) {
		if string(r.Key) != strconv.Itoa(n) || len(r.Value) != 1000 || r.Range != 7 {
			t.Errorf("record %d: key %q, %d bytes, range %d", n, r.Key, len(r.Value), r.Range)
		}
		n++
	}); err != nil || n != 100 {
		t.Fatalf("walked %d records: %v", n, err)
	}
	p1.Release()
	p2, err := fr.Next(t.Context())
	if err != nil || p2.Cursor != "c2" || p2.Len() != 0 {
		t.Fatalf("second page: %v, %+v", err, p2)
	}
}

// TestFetcherWireV1: against a node without wire v2 a Fetcher reads one
// page at a time, and a missing topic (v1's empty cursor) ends it with
// ErrNoSuchTopic; after Close, Next says ErrClosed.
func TestFetcherWireV1(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		r := req.(*wire.FetchRequest)
		var resp wire.FetchResponse
		if r.Cursor == nil {
			cur := "v1c"
			resp = wire.FetchResponse{NextCursor: &cur, Records: []wire.Record{{Key: []byte("k"), Value: []byte("v")}}}
		}
		fc.ok(corr, resp) // from v1c on: no cursor, as for a topic that is gone
	})
	c := dialFake(t, f)
	fr := c.NewFetcher("t", FetchOptions{Max: 10})
	p, err := fr.Next(t.Context())
	if err != nil || p.Len() != 1 || p.Cursor != "v1c" {
		t.Fatalf("first page: %v, %+v", err, p)
	}
	if _, err := fr.Next(t.Context()); !errors.Is(err, ErrNoSuchTopic) {
		t.Fatalf("second Next: %v, want ErrNoSuchTopic", err)
	}
	if _, err := fr.Next(t.Context()); !errors.Is(err, ErrNoSuchTopic) {
		t.Fatalf("Next after the error: %v, want it again", err)
	}
	fr.Close()
	fr2 := c.NewFetcher("t", FetchOptions{})
	fr2.Close()
	if _, err := fr2.Next(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

// TestFetcherBuffersFitPagesOfEitherSize: a Fetcher whose pages straddle a
// payload step (over many ranges, pages end on each range's batch
// boundaries, some just under 1 MiB and some just over) reads them all
// into buffers that fit the larger pages, and so into no more buffers than
// it holds pages at once: none is drawn for a page it does not fit,
// dropped and replaced.
func TestFetcherBuffersFitPagesOfEitherSize(t *testing.T) {
	onePoolAlone(t) // the test counts buffers
	small, large := bigBatch(t, 880, 1000), bigBatch(t, 1030, 1010)
	if step := 4 * payloadStep; len(small) >= step || len(large) <= step {
		t.Fatalf("batches of %d and %d bytes do not straddle %d", len(small), len(large), step)
	}
	const pages = 48
	// A page's payload: its cursor, the count of its batches, and its
	// one batch's range and length.
	const payloadHead = 1 + 4 + 2 + 4 + 8 + 4
	f := startFetchFake(t, func(fc *fakeConn, corr uint32, r *wire.FetchBatchesRequest) {
		i := 0
		if r.Cursor != nil {
			i, _ = strconv.Atoi(*r.Cursor)
		}
		next := strconv.Itoa(i + 1)
		resp := wire.FetchBatchesResponse{NextCursor: &next}
		if i < pages {
			// Small pages first, as a reader of many ranges starts.
			b := small
			if i >= 8 && i%3 != 0 {
				b = large
			}
			resp.Batches = []wire.RangeBatch{{Range: 1, Batch: b}}
		}
		fc.ok(corr, resp)
	})
	fr := dialFake(t, f).NewFetcher("t", FetchOptions{})
	defer fr.Close()
	buffers := map[*byte]bool{}
	for i := range pages {
		p, err := fr.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if p.Len() == 0 || p.Cursor != strconv.Itoa(i+1) {
			t.Fatalf("page %d: %d records, cursor %q", i, p.Len(), p.Cursor)
		}
		// Every buffer fits the larger pages, so none is dropped for
		// being too small when the pages grow.
		if cap(p.payload) < len(large)+payloadHead {
			t.Fatalf("page %d (%d bytes) was read into a buffer of %d, too small for the larger pages", i, len(p.payload), cap(p.payload))
		}
		buffers[unsafe.SliceData(p.payload)] = true
		p.Release()
	}
	// Held at once: the caller's page, one waiting for Next, one in the
	// Fetcher's hand and the answers of its fetches in flight.
	if held := 1 + FetcherDepth + maxFetchesInFlight; len(buffers) > held && !raceEnabled {
		t.Fatalf("%d pages were read into %d buffers; at most %d are held at once", pages, len(buffers), held)
	}
}

// onePoolAlone runs the rest of the test on one P with no collection, so
// that payloadPool hands back what was put into it (sync.Pool drops its
// items at every collection), and empties the pool of what earlier tests
// released.
func onePoolAlone(t *testing.T) {
	procs, gc := runtime.GOMAXPROCS(1), debug.SetGCPercent(-1)
	t.Cleanup(func() {
		runtime.GOMAXPROCS(procs)
		debug.SetGCPercent(gc)
	})
	for payloadPool.Get() != nil {
	}
}

// TestPayloadBufSizes: a payload buffer allocated for an answer has room
// for what its reader expects next, a wish beyond the pooled sizes is not
// honoured, and a pooled buffer serves any answer it fits, but none it does
// not.
func TestPayloadBufSizes(t *testing.T) {
	onePoolAlone(t)
	b := payloadBuf(900_000, 1_049_347)
	if len(b) != 900_000 || cap(b) != 5*payloadStep {
		t.Fatalf("900,000 bytes wanting 1,049,347: len %d cap %d, want cap %d", len(b), cap(b), 5*payloadStep)
	}
	for _, c := range []struct{ want, cap int }{{-1, payloadStep}, {0, payloadStep}, {8 * maxReadBuf, maxReadBuf}} {
		if b := payloadBuf(100_000, c.want); len(b) != 100_000 || cap(b) != c.cap {
			t.Fatalf("100,000 bytes wanting %d: len %d cap %d, want cap %d", c.want, len(b), cap(b), c.cap)
		}
	}
	releasePayload(b)
	if c := payloadBuf(700_000, 0); len(c) != 700_000 || !raceEnabled && unsafe.SliceData(c) != unsafe.SliceData(b) {
		t.Fatalf("700,000 bytes were not read into the pooled buffer of %d (got len %d cap %d)", cap(b), len(c), cap(c))
	}
	small := payloadBuf(100_000, 0)
	releasePayload(small)
	if c := payloadBuf(900_000, 0); unsafe.SliceData(c) == unsafe.SliceData(small) || cap(c) != 4*payloadStep {
		t.Fatalf("900,000 bytes with only a buffer of %d pooled: cap %d, want a new one of %d", cap(small), cap(c), 4*payloadStep)
	}
}

// TestPageSizesWindow: a Fetcher's size hint starts at what a page of its
// fetches may hold, follows a larger page at once, and shrinks to the
// largest of the last pageSizeWindow pages.
func TestPageSizesWindow(t *testing.T) {
	for _, c := range []struct{ maxBytes, hint int }{
		{0, nodePageBytes + pageOverhead},
		{4 << 20, nodePageBytes + pageOverhead}, // a node's default cap on what a fetch asks
		{256 << 10, 256<<10 + pageOverhead},
	} {
		if got := newPageSizes(c.maxBytes).hint.Load(); got != int64(c.hint) {
			t.Errorf("MaxBytes %d: first hint %d, want %d", c.maxBytes, got, c.hint)
		}
	}
	s := newPageSizes(0)
	first := s.hint.Load()
	for i := range pageSizeWindow {
		if got := s.hint.Load(); got != first {
			t.Fatalf("after %d small pages: hint %d, want the first %d", i, got, first)
		}
		s.note(100_000)
	}
	if got := s.hint.Load(); got != 100_000 {
		t.Fatalf("after a window of small pages: hint %d, want 100,000", got)
	}
	s.note(2 << 20)
	for i := range pageSizeWindow - 1 {
		if got := s.hint.Load(); got != 2<<20 {
			t.Fatalf("%d small pages after a large one: hint %d, want %d", i, got, 2<<20)
		}
		s.note(100_000)
	}
	s.note(100_000) // the large page leaves the window
	if got := s.hint.Load(); got != 100_000 {
		t.Fatalf("a window after the large page: hint %d, want 100,000", got)
	}
}
