package client

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

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

// TestFetcherSendsNextOnCursor: a Fetcher sends the next fetch_batches as
// soon as the cursor at the head of an answer has arrived, before the rest
// of the page: the fake node withholds the end of its first page until
// the second fetch, from that page's cursor, has come in.
func TestFetcherSendsNextOnCursor(t *testing.T) {
	batch := bigBatch(t, 100, 1000)  // a page above minPooledPayload
	second := make(chan struct{})    // the second fetch came
	firstSent := make(chan struct{}) // the first page is written whole
	fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, func(fc *fakeConn, corr uint32, req wire.Request) {
		r, ok := req.(*wire.FetchBatchesRequest)
		if !ok {
			fv.handle(fc, corr, req)
			return
		}
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
