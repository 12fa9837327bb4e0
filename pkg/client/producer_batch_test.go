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

func newFakeV2(t *testing.T, maxRecords int) (*fakeV2, *Client) {
	fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: maxRecords, MaxHeaders: 1024}}
	f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle)
	return fv, dialFake(t, f)
}

// TestProducerV2SeveralBatchesPerRange: a range that takes more records
// than one of the node's batches holds gets more batches in the same
// produce_batches request, which the request limits, not the node's batch
// limits, cut; records stay in order.
func TestProducerV2SeveralBatchesPerRange(t *testing.T) {
	fv, c := newFakeV2(t, 7)
	var results []BatchResult
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 1000, OnBatch: func(b BatchResult) {
		results = append(results, b) // OnBatch runs on one goroutine
	}})
	before := time.Now()
	const n = 700
	for i := range n {
		p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if fv.v2 != 1 || fv.batches != n/7 || len(fv.records) != n {
		t.Fatalf("node got %d requests, %d batches, %d records; want 1, %d, %d", fv.v2, fv.batches, len(fv.records), n/7, n)
	}
	values := 0
	for i, r := range fv.records {
		if string(r.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d is %s", i, r.Value)
		}
		values += len(r.Value)
	}
	if len(results) != 1 {
		t.Fatalf("OnBatch ran %d times, want once", len(results))
	}
	if b := results[0]; b.Topic != "t" || b.Records != n || b.ValueBytes != values || b.Err != nil || b.Opened.Before(before) || b.Opened.After(time.Now()) {
		t.Fatalf("OnBatch got %+v; want topic t, %d records, %d value bytes, no error, opened after %v", b, n, values, before)
	}
}

// TestProducerV2RequestLimits: MaxBatchRecords bounds a whole wire v2
// request, over all its ranges, as it bounds a v1 request; each range's
// records go in batches within the node's limit (the fake node checks),
// and a request carries whole batches of at most three records here, up
// to the first that does not fit; per-key order holds.
func TestProducerV2RequestLimits(t *testing.T) {
	fv, c := newFakeV2(t, 3)
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 10})
	want := map[string]int{}
	for i := range 400 {
		key := "k" + strconv.Itoa(i%40)
		p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: []byte(strconv.Itoa(want[key]))}, nil)
		want[key]++
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	ranges := 0
	for i, sh := range fv.shares {
		total := 0
		for _, n := range sh {
			total += n
		}
		// A request stops at the first part that does not fit: it then
		// holds more than 10 minus a part's 3 records. A range's open
		// part may follow its full one (3+3+2, then a 3 that does not
		// fit), so 8 is as full as 9. Only the last may hold fewer.
		if total > 10 || total < 8 && i < len(fv.shares)-1 {
			t.Errorf("request %d holds %d records, want 8 to 10", i, total)
		}
		ranges = max(ranges, len(sh))
	}
	if ranges < 2 {
		t.Errorf("no request spans more than %d range", ranges)
	}
	next := map[string]int{}
	for _, r := range fv.records {
		if string(r.Value) != strconv.Itoa(next[string(r.Key)]) {
			t.Fatalf("key %s: record %s, want %d", r.Key, r.Value, next[string(r.Key)])
		}
		next[string(r.Key)]++
	}
	if len(fv.records) != 400 {
		t.Fatalf("%d records stored, want 400", len(fv.records))
	}
}

// TestProducerOnBatchFollowsPromises: OnBatch runs once per request,
// after the promises of its records, and reports the records of requests
// that failed with their error; records without a promise are counted
// all the same.
func TestProducerOnBatchFollowsPromises(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run("v"+strconv.Itoa(version), func(t *testing.T) {
			var c *Client
			if version == 1 {
				_, c = newFakeV1(t)
			} else {
				_, c = newFakeV2(t, 1<<16)
			}
			var log []string // promises and OnBatch run one at a time
			p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 4, OnBatch: func(b BatchResult) {
				if b.Err != nil {
					t.Errorf("batch failed: %v", b.Err)
				}
				log = append(log, "batch "+strconv.Itoa(b.Records))
			}})
			for i := range 10 {
				var promise func(Record, error)
				if i%2 == 0 {
					promise = func(r Record, err error) { log = append(log, "record "+string(r.Value)) }
				}
				p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}, promise)
			}
			if err := p.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := []string{"record 0", "record 2", "batch 4", "record 4", "record 6", "batch 4", "record 8", "batch 2"}
			if len(log) != len(want) {
				t.Fatalf("log %q, want %q", log, want)
			}
			for i := range want {
				if log[i] != want[i] {
					t.Fatalf("log %q, want %q", log, want)
				}
			}
		})
	}
}

// newFakeV1 is a fake node without wire v2.
func newFakeV1(t *testing.T) (*fakeV2, *Client) {
	fv := &fakeV2{t: t}
	f := startFake(t, fv.handle)
	c := dialFake(t, f)
	if c.WireVersion() != 1 {
		t.Fatalf("wire version %d, want 1", c.WireVersion())
	}
	return fv, c
}

// TestProducerOnBatchReportsFailure: requests that fail report their
// records and error through OnBatch.
func TestProducerOnBatchReportsFailure(t *testing.T) {
	f := startFake(t, ignore) // never answers
	c := dialFake(t, f)
	var results []BatchResult
	p := NewProducer(c, ProducerOptions{Linger: -1, OnBatch: func(b BatchResult) { results = append(results, b) }})
	for range 3 {
		p.Produce(t.Context(), "t", Record{Value: []byte("v")}, nil)
	}
	c.Close() // fails the requests in flight
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range results {
		if !errors.Is(b.Err, ErrClosed) {
			t.Errorf("batch of %d records: error %v, want ErrClosed", b.Records, b.Err)
		}
		n += b.Records
	}
	if n != 3 {
		t.Fatalf("OnBatch reported %d records, want 3", n)
	}
}

// TestProducerV2Timestamps: a record produced without a timestamp is
// stamped with the time of its Produce call (to the millisecond), the
// same on the wire as in the Record its promise gets; one with a
// timestamp keeps it.
func TestProducerV2Timestamps(t *testing.T) {
	fv, c := newFakeV2(t, 1<<16)
	p := NewProducer(c, ProducerOptions{Linger: 20 * time.Millisecond})
	type span struct{ before, after int64 }
	var spans []span
	promised := map[string]int64{}
	for i := range 20 {
		before := time.Now().UnixMilli()
		p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}, func(r Record, err error) {
			if err != nil {
				t.Error(err)
			}
			promised[string(r.Value)] = r.Timestamp.UnixMilli()
		})
		spans = append(spans, span{before, time.Now().UnixMilli()})
		if i == 10 {
			// Let the clock move on, so that the later records of the batch
			// are stamped later than its first.
			for time.Now().UnixMilli() < spans[i].after+2 {
			}
		}
	}
	fixed := time.UnixMilli(1_700_000_000_123)
	p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte("fixed"), Timestamp: fixed}, nil)
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if len(fv.records) != 21 {
		t.Fatalf("%d records", len(fv.records))
	}
	for i, s := range spans {
		r := fv.records[i]
		if r.Timestamp < s.before || r.Timestamp > s.after || promised[string(r.Value)] != r.Timestamp {
			t.Errorf("record %d: timestamp %d on the wire, %d promised, produced within [%d, %d]",
				i, r.Timestamp, promised[string(r.Value)], s.before, s.after)
		}
	}
	if last := fv.records[20]; !bytes.Equal(last.Value, []byte("fixed")) || last.Timestamp != fixed.UnixMilli() {
		t.Errorf("record with a timestamp: %s at %d, want %d", last.Value, last.Timestamp, fixed.UnixMilli())
	}
}

// TestFetchMaxUsesV2: a Fetch with a positive Max asks fetch_batches for
// exactly Max records.
func TestFetchMaxUsesV2(t *testing.T) {
	fv, c := newFakeV2(t, 1<<16)
	if _, err := c.Fetch(t.Context(), "t", FetchOptions{Max: 5, MaxBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if len(fv.fetches) != 1 || fv.fetches[0].MaxRecords != 5 || fv.fetches[0].MaxBytes != 1000 {
		t.Fatalf("fetch_batches requests %+v, want one with max_records 5, max_bytes 1000", fv.fetches)
	}
}
