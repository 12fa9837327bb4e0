package client

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/wire"
)

// fakeV2 is a fake node's side of wire v2: one topic of four ranges over
// an 8-bit keyspace, batches checked as the node checks them (with the
// limits it advertises) and decoded, records kept in arrival order.
type fakeV2 struct {
	t   *testing.T
	lim batchfmt.ProduceLimits
	// routes, when set, replace fakeRoutes.
	routes *wire.TopicRoutesResponse

	mu      sync.Mutex
	records []batchfmt.Record // in the order received
	batches int               // produce_batches batches received
	v2      int               // produce_batches requests received
	v1      int               // v1 produce requests received
	fetches []wire.FetchBatchesRequest
	// shares holds, per produce_batches request, the records of each range.
	shares []map[uint64]int
}

var fakeRoutes = wire.TopicRoutesResponse{Bits: 8, Ranges: []wire.RouteRange{
	{Range: 11, Start: 0, End: 64}, {Range: 12, Start: 64, End: 128},
	{Range: 13, Start: 128, End: 192}, {Range: 14, Start: 192, End: 256},
}}

func (f *fakeV2) topicRoutes() *wire.TopicRoutesResponse {
	if f.routes != nil {
		return f.routes
	}
	return &fakeRoutes
}

func (f *fakeV2) versions(maxFrame uint32) *wire.APIVersionsResponse {
	return &wire.APIVersionsResponse{
		Keys:     wire.Versions(),
		MaxFrame: maxFrame, MaxBatchBytes: uint32(f.lim.MaxRawBytes), MaxBatchRecords: uint32(f.lim.MaxRecords),
		NodeVersion: "fake",
	}
}

func (f *fakeV2) handle(fc *fakeConn, corr uint32, req wire.Request) {
	switch r := req.(type) {
	case *wire.TopicRoutesRequest:
		fc.ok(corr, f.topicRoutes())
	case *wire.ProduceBatchesRequest:
		routes := f.topicRoutes()
		if len(r.Batches) > maxRequestBatches {
			f.t.Errorf("%d batches in one request", len(r.Batches))
			fc.refuse(corr, wire.ReasonInvalidBatch)
			return
		}
		n := 0
		var recs []batchfmt.Record
		share := map[uint64]int{}
		for i, rb := range r.Batches {
			span := keyspace.Span{Start: 0, End: 0}
			if j, ok := slices.BinarySearchFunc(routes.Ranges, rb.Range, func(rr wire.RouteRange, id uint64) int {
				return cmp.Compare(rr.Range, id)
			}); ok {
				span = keyspace.Span{Start: routes.Ranges[j].Start, End: routes.Ranges[j].End}
			}
			inside := func(key []byte) bool { return span.Contains(keyspace.Position(key, routes.Bits)) }
			h, keysInside, err := batchfmt.CheckProduce(rb.Batch, f.lim, inside)
			if err != nil || !keysInside {
				f.t.Errorf("batch %d for range %d: %v, keys inside %v", i, rb.Range, err, keysInside)
				fc.refuse(corr, wire.ReasonInvalidBatch)
				return
			}
			if recs, err = batchfmt.DecodeRecords(rb.Batch, recs); err != nil {
				f.t.Error(err)
			}
			n += int(h.RecordCount)
			share[rb.Range] += int(h.RecordCount)
		}
		f.mu.Lock()
		f.records = append(f.records, recs...)
		f.batches += len(r.Batches)
		f.v2++
		f.shares = append(f.shares, share)
		f.mu.Unlock()
		fc.ok(corr, wire.ProduceBatchesResponse{Count: uint32(n)})
	case *wire.ProduceRequest:
		f.mu.Lock()
		for _, w := range r.Records {
			f.records = append(f.records, batchfmt.Record{Key: w.Key, Value: w.Value, Timestamp: int64(w.Timestamp)})
		}
		f.v1++
		f.mu.Unlock()
		fc.ok(corr, wire.CountResponse{Count: uint32(len(r.Records))})
	case *wire.FetchRequest:
		cur := "c1"
		fc.ok(corr, wire.FetchResponse{NextCursor: &cur})
	case *wire.FetchBatchesRequest:
		f.mu.Lock()
		f.fetches = append(f.fetches, *r)
		f.mu.Unlock()
		cur := "c2"
		fc.ok(corr, wire.FetchBatchesResponse{NextCursor: &cur})
	default:
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
	}
}

// TestWireVersion1SendsNoV2Key: with WithWireVersion(1), a client facing
// a node that serves wire v2 sends no key of it, not even api_versions,
// whatever it does; by default it negotiates and uses v2.
func TestWireVersion1SendsNoV2Key(t *testing.T) {
	fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	exercise := func(c *Client) {
		t.Helper()
		if _, err := c.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		p := NewProducer(c, ProducerOptions{Compression: CompressionZstd})
		for i := range 100 {
			p.Produce(t.Context(), "t", Record{Key: []byte(strconv.Itoa(i))}, nil)
		}
		if err := p.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Fetch(t.Context(), "t", FetchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle)
	c := dialFake(t, f, WithWireVersion(1))
	if v := c.WireVersion(); v != 1 {
		t.Fatalf("WireVersion = %d with WithWireVersion(1)", v)
	}
	exercise(c)
	keys := f.receivedKeys()
	for _, k := range keys {
		if k >= wire.KeyAPIVersions {
			t.Fatalf("WithWireVersion(1) sent key %d (%s); keys sent: %v", k, wire.KeyName(k), keys)
		}
	}
	if keys[0] != wire.KeyAuth {
		t.Fatalf("first frame key %d, want auth", keys[0])
	}

	f2 := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle)
	c2 := dialFake(t, f2)
	if v := c2.WireVersion(); v != 2 {
		t.Fatalf("WireVersion = %d by default against a v2 node", v)
	}
	exercise(c2)
	keys = f2.receivedKeys()
	for _, want := range []uint16{wire.KeyAPIVersions, wire.KeyTopicRoutes, wire.KeyProduceBatches, wire.KeyFetchBatches} {
		if !slices.Contains(keys, want) {
			t.Errorf("default client sent no %s; keys: %v", wire.KeyName(want), keys)
		}
	}
	if keys[0] != wire.KeyAPIVersions || keys[1] != wire.KeyAuth {
		t.Errorf("connection opened with keys %v, want api_versions then auth", keys[:2])
	}
	if slices.Contains(keys, wire.KeyProduce) || slices.Contains(keys, wire.KeyFetch) {
		t.Errorf("v2 client sent a v1 produce or fetch: %v", keys)
	}
}

// TestFallbackWhenNodeRefusesAPIVersions: a node that answers
// api_versions with unknown_api_key gets wire v1; so does one that
// answers it auth_required and hangs up (nodes before wire v2), after one
// more dial without asking.
func TestFallbackWhenNodeRefusesAPIVersions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts fakeOptions
	}{
		{"unknown_api_key", fakeOptions{}},
		{"auth_required", fakeOptions{strict: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fv := &fakeV2{t: t}
			f := startFakeWith(t, tc.opts, fv.handle)
			c := dialFake(t, f)
			if v := c.WireVersion(); v != 1 {
				t.Fatalf("WireVersion = %d against a node without wire v2", v)
			}
			if _, err := c.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
			page, err := c.Fetch(t.Context(), "t", FetchOptions{})
			if err != nil || page.Cursor != "c1" {
				t.Fatalf("fetch: %+v, %v (want a v1 fetch)", page, err)
			}
			keys := f.receivedKeys()
			if keys[0] != wire.KeyAPIVersions {
				t.Fatalf("keys %v: the client did not ask", keys)
			}
			for _, k := range keys[1:] {
				if k >= wire.KeyAPIVersions {
					t.Fatalf("keys %v: v2 key after the node refused api_versions", keys)
				}
			}
			if !slices.Contains(keys, wire.KeyProduce) || !slices.Contains(keys, wire.KeyFetch) {
				t.Fatalf("keys %v: want v1 produce and fetch", keys)
			}
			if got := f.authCount(); got != 1 {
				t.Fatalf("authenticated %d times, want 1", got)
			}
		})
	}
}

func TestDialRefusesUnknownWireVersion(t *testing.T) {
	f := startFake(t, ignore)
	for _, v := range []int{0, 3, -1} {
		if _, err := Dial(t.Context(), f.ln.Addr().String(), WithCredentials("u", "p"), WithWireVersion(v)); err == nil {
			t.Fatalf("Dial with WithWireVersion(%d) succeeded", v)
		}
	}
}

// TestProducerV2KeepsNodeLimits: against a node with small batch limits,
// every batch the Producer builds passes the node's own check with those
// limits and holds only keys of its range; a record too large for a batch
// goes with wire v1 in its place; per-key order holds throughout.
func TestProducerV2KeepsNodeLimits(t *testing.T) {
	for _, codec := range []Codec{CompressionNone, CompressionZstd, CompressionS2, CompressionLZ4} {
		t.Run(codec.String(), func(t *testing.T) {
			fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 4096, MaxRecords: 7, MaxHeaders: 1024}}
			f := startFakeWith(t, fakeOptions{versions: fv.versions(64 << 10)}, fv.handle)
			c := dialFake(t, f)
			p := NewProducer(c, ProducerOptions{Compression: codec, Linger: time.Hour, MaxBatchRecords: 1000})
			want := map[string]int{}
			const n = 2000
			for i := range n {
				key := fmt.Sprintf("k%d", i%23)
				size := 50
				if i%300 == 0 {
					size = 5000 // above max_batch_bytes: wire v1
				}
				val := make([]byte, size)
				copy(val, strconv.Itoa(want[key]))
				want[key]++
				p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: val, Headers: []Header{{Key: "seq", Value: []byte(strconv.Itoa(i))}}}, func(_ Record, err error) {
					if err != nil {
						t.Error(err)
					}
				})
			}
			if err := p.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			fv.mu.Lock()
			defer fv.mu.Unlock()
			if len(fv.records) != n {
				t.Fatalf("node received %d records, want %d", len(fv.records), n)
			}
			if fv.v1 == 0 || fv.batches < n/7 {
				t.Fatalf("%d v1 produces, %d batches", fv.v1, fv.batches)
			}
			next := map[string]int{}
			for _, r := range fv.records {
				k := string(r.Key)
				if got := string(r.Value[:len(strconv.Itoa(next[k]))]); got != strconv.Itoa(next[k]) {
					t.Fatalf("key %s: record %s, want %d", k, got, next[k])
				}
				next[k]++
			}
		})
	}
}

// TestProducerV2BatchSentOverV1: a batch built for wire v2 whose
// connection is replaced, before it is sent, by one to a node without
// wire v2 goes out as a wire v1 produce, its records in order.
func TestProducerV2BatchSentOverV1(t *testing.T) {
	fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle)
	c := dialFake(t, f)
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, Compression: CompressionZstd})
	var errs []error
	for i := range 50 {
		p.Produce(t.Context(), "t", Record{Key: []byte(strconv.Itoa(i % 5)), Value: []byte(strconv.Itoa(i))}, func(_ Record, err error) {
			errs = append(errs, err)
		})
	}
	f.setOptions(fakeOptions{}) // the node is downgraded
	f.dropAll()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		broken := c.cur == nil || !c.cur.usable()
		c.mu.Unlock()
		if broken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice the dropped connection")
		}
		<-time.After(time.Millisecond) // poll: the client has no event for it
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c.WireVersion() != 1 {
		t.Fatalf("WireVersion = %d after redialling a v1 node", c.WireVersion())
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("promise %d: %v", i, err)
		}
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if fv.v1 != 1 || fv.batches != 0 || len(fv.records) != 50 {
		t.Fatalf("node got %d v1 produces, %d batches, %d records; want 1, 0, 50", fv.v1, fv.batches, len(fv.records))
	}
	next := map[string]int{}
	for _, r := range fv.records {
		v, _ := strconv.Atoi(string(r.Value))
		k, _ := strconv.Atoi(string(r.Key))
		if v%5 != k || v/5 != next[string(r.Key)] {
			t.Fatalf("record %s of key %s out of order", r.Value, r.Key)
		}
		next[string(r.Key)]++
	}
}

// TestProduceCopiesRecords: after Produce returns, the caller may reuse
// its buffers, with wire v1 and v2 alike.
func TestProduceCopiesRecords(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) {
			fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
			f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle)
			c := dialFake(t, f, WithWireVersion(version))
			p := NewProducer(c, ProducerOptions{Linger: time.Hour})
			buf := []byte("key0value0header0")
			for i := range 10 {
				copy(buf, fmt.Sprintf("key%dvalue%dheader%d", i, i, i))
				p.Produce(t.Context(), "t", Record{Key: buf[:4], Value: buf[4:10], Headers: []Header{{Key: "h", Value: buf[10:]}}}, nil)
			}
			if err := p.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			fv.mu.Lock()
			defer fv.mu.Unlock()
			if len(fv.records) != 10 {
				t.Fatalf("%d records", len(fv.records))
			}
			seen := map[string]bool{}
			for _, r := range fv.records {
				seen[string(r.Key)+string(r.Value)] = true
			}
			for i := range 10 {
				if !seen[fmt.Sprintf("key%dvalue%d", i, i)] {
					t.Fatalf("record %d was not sent as produced: %v", i, seen)
				}
			}
		})
	}
}

// TestFallbackAfterReset: a node before wire v2 that reads only the
// api_versions frame, refuses it and closes with the pipelined auth frame
// unread (which makes the close a reset) still gets a wire v1 client: its
// refusal is read before the reset is.
func TestFallbackAfterReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // cleanups run last first: after the Close below
	t.Cleanup(func() { ln.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				var hdr [4]byte
				if _, err := io.ReadFull(nc, hdr[:]); err != nil {
					return
				}
				body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
				if _, err := io.ReadFull(nc, body); err != nil {
					return
				}
				key, corr, _, _ := wire.ParseRequestHeader(body)
				if key != wire.KeyAuth {
					nc.Write(wire.AppendErrorFrame(nil, corr, wire.ReasonAuthRequired))
					// Wait for the auth frame pipelined behind it and close
					// with its body unread, so the client sees a reset.
					io.ReadFull(nc, hdr[:])
					return
				}
				nc.Write(wire.AppendOKFrame(nil, corr, wire.TokenResponse{Token: "t"}))
				io.Copy(io.Discard, nc)
			}()
		}
	}()
	for range 3 {
		c, err := Dial(t.Context(), ln.Addr().String(), WithCredentials("u", "p"))
		if err != nil {
			t.Fatal(err)
		}
		if v := c.WireVersion(); v != 1 {
			t.Fatalf("WireVersion = %d", v)
		}
		c.Close()
	}
}

// TestManyRangesStayWithinRequestBatches: a topic of more ranges than a
// produce_batches request may carry batches (4096) is produced to in
// requests that carry no more, by the Producer; a Client.Produce call
// that would need more goes out with wire v1.
func TestManyRangesStayWithinRequestBatches(t *testing.T) {
	routes := &wire.TopicRoutesResponse{Bits: 13}
	for i := range uint64(1 << 13) {
		routes.Ranges = append(routes.Ranges, wire.RouteRange{Range: 100 + i, Start: i, End: i + 1})
	}
	fv := &fakeV2{t: t, routes: routes, lim: batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}}
	f := startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, fv.handle)
	c := dialFake(t, f)
	const n = 30000
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBatchRecords: 1 << 16, MaxBufferedRecords: n})
	for i := range n {
		p.Produce(t.Context(), "t", Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}, func(_ Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}
	}
	if got, err := c.Produce(t.Context(), "t", recs...); err != nil || got != n {
		t.Fatalf("sync produce: %d, %v", got, err)
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if len(fv.records) != 2*n || fv.v1 != 1 {
		t.Fatalf("node got %d records, %d v1 produces; want %d and 1", len(fv.records), fv.v1, 2*n)
	}
}
