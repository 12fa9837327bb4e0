package client

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// holdFirstV2 wraps a fakeV2: the first produce_batches request is kept
// unanswered until release is called; every other request is handled at
// once.
type holdFirstV2 struct {
	*fakeV2
	mu      sync.Mutex
	seen    int
	held    chan struct{} // closed when the first request is held
	release func()
}

func newHoldFirstV2(t *testing.T, routes *wire.TopicRoutesResponse) (*holdFirstV2, *Client) {
	fv := &fakeV2{t: t, routes: routes, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	h := &holdFirstV2{fakeV2: fv, held: make(chan struct{})}
	f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, h.handle)
	return h, dialFake(t, f)
}

func (h *holdFirstV2) handle(fc *fakeConn, corr uint32, req wire.Request) {
	if _, ok := req.(*wire.ProduceBatchesRequest); ok {
		h.mu.Lock()
		h.seen++
		first := h.seen == 1
		if first {
			h.release = func() { h.fakeV2.handle(fc, corr, req) }
			close(h.held)
		}
		h.mu.Unlock()
		if first {
			return
		}
	}
	h.fakeV2.handle(fc, corr, req)
}

// waitHeld waits for the first request to reach the fake, and returns
// what answers it.
func (h *holdFirstV2) waitHeld(t *testing.T) func() {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no produce_batches request reached the node")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.release
}

// spanRoutes returns routes of n ranges (ids from 100) tiling a keyspace
// of bits bits as evenly as they can.
func spanRoutes(n int, bits uint8) *wire.TopicRoutesResponse {
	routes := &wire.TopicRoutesResponse{Bits: bits}
	size := uint64(1) << bits
	for i := range uint64(n) {
		routes.Ranges = append(routes.Ranges, wire.RouteRange{Range: 100 + i, Start: i * size / uint64(n), End: (i + 1) * size / uint64(n)})
	}
	return routes
}

// checkKeyOrder asserts that the fake stored, for every key of want,
// values 0..want[key]-1 in order (each value's part before a "|", if it
// has one), and nothing else.
func checkKeyOrder(t *testing.T, recs []batchfmt.Record, want map[string]int) {
	t.Helper()
	next := map[string]int{}
	for i, r := range recs {
		seq, _, _ := bytes.Cut(r.Value, []byte("|"))
		if string(seq) != strconv.Itoa(next[string(r.Key)]) {
			t.Fatalf("record %d: key %s value %.40s, want %d", i, r.Key, r.Value, next[string(r.Key)])
		}
		next[string(r.Key)]++
	}
	for k, n := range want {
		if next[k] != n {
			t.Errorf("key %s: %d records stored, want %d", k, next[k], n)
		}
	}
	if len(next) != len(want) {
		t.Errorf("%d keys stored, want %d", len(next), len(want))
	}
}

// TestProducerV2AccumulatesAcrossRequests: records produced while a
// request is in flight wait in their range's batch, which grows until a
// request can take it: with one request in flight and every record ready
// at once (Linger < 0, which would send each record on its own were a
// slot free), the records produced meanwhile go in the next request as
// one stored batch per range. Per-key order and promise order per key
// hold.
func TestProducerV2AccumulatesAcrossRequests(t *testing.T) {
	h, c := newHoldFirstV2(t, nil) // four ranges
	p := NewProducer(c, ProducerOptions{Linger: -1, MaxInFlight: 1})
	want := map[string]int{}
	promised := map[string]int{} // promises run one at a time
	produce := func(key string) {
		seq := want[key]
		want[key]++
		p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: []byte(strconv.Itoa(seq))}, func(r Record, err error) {
			if err != nil {
				t.Errorf("key %s record %d: %v", key, seq, err)
			}
			if promised[key] != seq {
				t.Errorf("key %s: promise of record %d ran after %d others", key, seq, promised[key])
			}
			promised[key]++
		})
	}
	produce("k0")
	release := h.waitHeld(t)
	const n = 400 // over 40 keys, so over every range
	for i := range n {
		produce("k" + strconv.Itoa(i%40))
	}
	release()
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	checkKeyOrder(t, h.records, want)
	// The first request holds k0's record; each range's records produced
	// while it was in flight are one batch.
	if len(h.shares) != 2 || h.batches != 1+len(fakeRoutes.Ranges) {
		t.Fatalf("node got %d requests of %d batches in all (%v); want 2 requests: 1 batch, then one per range (%d)",
			len(h.shares), h.batches, h.shares, len(fakeRoutes.Ranges))
	}
	for k, got := range promised {
		if got != want[k] {
			t.Errorf("key %s: %d promises ran, want %d", k, got, want[k])
		}
	}
}

// TestProducerV2LingerWaitsForFlush: with a Linger longer than the test,
// records of many ranges wait in their ranges' batches until Flush, which
// sends them all, one stored batch per range, in requests within
// MaxBatchBytes.
func TestProducerV2LingerWaitsForFlush(t *testing.T) {
	routes := spanRoutes(64, 12)
	fv := &fakeV2{t: t, routes: routes, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	c := dialFake(t, startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle))
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBatchBytes: 16 << 10})
	want := map[string]int{}
	for i := range 3000 {
		key := "key-" + strconv.Itoa(i%500)
		p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: []byte(strconv.Itoa(want[key]))}, nil)
		want[key]++
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	fv.mu.Lock()
	checkKeyOrder(t, fv.records, want)
	if fv.batches != len(routes.Ranges) {
		t.Errorf("node got %d batches, want one per range (%d)", fv.batches, len(routes.Ranges))
	}
	if len(fv.shares) < 2 {
		t.Errorf("node got %d requests; the records do not fit in one of 16 KiB", len(fv.shares))
	}
	fv.mu.Unlock()
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestProducerV2LingerSends: a record left alone goes once its range's
// batch has lingered, without Flush or Close.
func TestProducerV2LingerSends(t *testing.T) {
	fv, c := newFakeV2(t, 1<<16)
	p := NewProducer(c, ProducerOptions{Linger: 10 * time.Millisecond})
	defer p.Close(t.Context())
	done := make(chan error, 1)
	p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte("v")}, func(_ Record, err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the record was not sent after its linger")
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if len(fv.records) != 1 {
		t.Fatalf("node stored %d records, want 1", len(fv.records))
	}
}

// TestProducerV2ManyRangesMemoryBound: with 10,000 ranges, most records
// wait in a range's batch of their own; the buffer bounds still hold
// (records and bytes, accumulated or in flight), every record is stored
// once and in order per key, and the accumulation holds no more batches
// than records.
func TestProducerV2ManyRangesMemoryBound(t *testing.T) {
	routes := spanRoutes(10_000, 16)
	fv := &fakeV2{t: t, routes: routes, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	c := dialFake(t, startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle))
	const (
		maxRecords = 3000
		maxBytes   = 64 << 10
		n          = 60_000
	)
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBufferedRecords: maxRecords, MaxBufferedBytes: maxBytes, MaxInFlight: 2})
	want := map[string]int{}
	var peakRecords, peakBytes, peakParts int
	for i := range n {
		key := fmt.Sprintf("key-%d", (i*7919)%20_000)
		p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: []byte(strconv.Itoa(want[key]))}, nil)
		want[key]++
		p.mu.Lock()
		peakRecords = max(peakRecords, p.buffered)
		peakBytes = max(peakBytes, p.bufferedBytes)
		if ts := p.topics["t"]; ts != nil && ts.acc != nil {
			peakParts = max(peakParts, len(ts.acc.parts))
			if len(ts.acc.parts) > p.accN {
				t.Fatalf("%d batches accumulate %d records", len(ts.acc.parts), p.accN)
			}
		}
		p.mu.Unlock()
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if peakRecords > maxRecords || peakBytes > maxBytes {
		t.Errorf("buffer peaked at %d records, %d bytes; bounds %d, %d", peakRecords, peakBytes, maxRecords, maxBytes)
	}
	// A record that opens a range's batch counts the batch's first
	// buffer: the last one to fit may leave that much room.
	if peakRecords < maxRecords && peakBytes < maxBytes-partCost-256 {
		t.Errorf("buffer peaked at %d records, %d bytes: the bounds (%d, %d) were not reached", peakRecords, peakBytes, maxRecords, maxBytes)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	checkKeyOrder(t, fv.records, want)
	t.Logf("peak %d records, %d bytes, %d batches accumulating; %d requests, %d batches", peakRecords, peakBytes, peakParts, len(fv.shares), fv.batches)
}

// TestProducerV2CloseFlushesAccumulated: Close sends every accumulated
// record however long its linger, and every promise and OnBatch report
// has run when it returns.
func TestProducerV2CloseFlushesAccumulated(t *testing.T) {
	routes := spanRoutes(256, 12)
	fv := &fakeV2{t: t, routes: routes, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	c := dialFake(t, startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle))
	var reported int // OnBatch and promises run one at a time
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, OnBatch: func(b BatchResult) {
		if b.Err != nil {
			t.Error(b.Err)
		}
		reported += b.Records
	}})
	const n = 5000
	promised := 0
	want := map[string]int{}
	for i := range n {
		key := "k" + strconv.Itoa(i%1000)
		var promise func(Record, error)
		if i%3 == 0 {
			promise = func(_ Record, err error) {
				if err != nil {
					t.Error(err)
				}
				promised++
			}
		}
		p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: []byte(strconv.Itoa(want[key]))}, promise)
		want[key]++
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if reported != n || promised != (n+2)/3 {
		t.Errorf("OnBatch reported %d records, %d promises ran; want %d and %d", reported, promised, n, (n+2)/3)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	checkKeyOrder(t, fv.records, want)
}
