package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/slab"
	"github.com/malachi-log/malachi/internal/wire"
)

// partValue is the value of the seq'th record of a key: its seq, then
// filler that compresses well, and now and then more than a chunk of it.
func partValue(seq, i int) []byte {
	v := strconv.AppendInt(nil, int64(seq), 10)
	v = append(v, '|')
	n := 60 + i%97
	if i%1500 == 0 {
		n = 20 << 10
	}
	return append(v, bytes.Repeat([]byte("abcdefgh"), n/8)...)
}

// TestProducerV2PartsEveryCodec: with every codec, records over many
// ranges, some larger than a part's chunks, are encoded into each range's
// part and finished into their requests as the node checks them (CRC,
// keys inside the range, compression within bounds), stored once and in
// order per key, compressed when the codec asks for it; every promise
// runs once, without error.
func TestProducerV2PartsEveryCodec(t *testing.T) {
	for _, codec := range []Codec{CompressionNone, CompressionZstd, CompressionS2, CompressionLZ4} {
		t.Run(codec.String(), func(t *testing.T) {
			fv := &fakeV2{t: t, routes: spanRoutes(512, 16), lim: batchfmt.ProduceLimits{MaxRawBytes: 256 << 10, MaxRecords: 4096, MaxHeaders: 1024}}
			var mu sync.Mutex
			codecs := map[batchfmt.Codec]int{}
			handle := func(fc *fakeConn, corr uint32, req wire.Request) {
				if r, ok := req.(*wire.ProduceBatchesRequest); ok {
					mu.Lock()
					for _, rb := range r.Batches {
						if h, err := batchfmt.ParseHeader(rb.Batch); err == nil {
							codecs[h.Codec()]++
						}
					}
					mu.Unlock()
				}
				fv.handle(fc, corr, req)
			}
			c := dialFake(t, startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, handle))
			chunks := chunksInUse()
			p := NewProducer(c, ProducerOptions{Compression: codec, Linger: 2 * time.Millisecond, MaxInFlight: 4, MaxBufferedBytes: 4 << 20})
			const n = 20_000
			want := map[string]int{}
			var promised, failed int // promises run one at a time
			for i := range n {
				key := "k" + strconv.Itoa(i*7919%3000)
				p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: partValue(want[key], i)}, func(_ Record, err error) {
					promised++
					if err != nil {
						failed++
					}
				})
				want[key]++
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if promised != n || failed != 0 {
				t.Errorf("%d promises ran, %d with an error; want %d, none", promised, failed, n)
			}
			checkChunksBack(t, chunks)
			fv.mu.Lock()
			checkKeyOrder(t, fv.records, want)
			fv.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if codec != CompressionNone && codecs[batchfmt.Codec(codec)] == 0 {
				t.Errorf("no batch went compressed with %v: %v", codec, codecs)
			}
			t.Logf("%d batches by codec: %v", fv.batches, codecs)
		})
	}
}

// TestProducerV2CloseWhileCompressing: a Close that gives up at once
// (its context is done) fails the requests not sent while they are being
// compressed; their parts are handed back only once compressing them is
// over (the race detector sees it otherwise), and every promise still
// runs, once: those of the request in flight when its answer comes,
// the others with ErrClosed.
func TestProducerV2CloseWhileCompressing(t *testing.T) {
	h, c := newHoldFirstV2(t, spanRoutes(256, 16))
	chunks := chunksInUse()
	p := NewProducer(c, ProducerOptions{Compression: CompressionZstd, Linger: -1, MaxInFlight: 1, MaxBatchBytes: 64 << 10})
	const n = 20_000
	var wg sync.WaitGroup
	wg.Add(n)
	var mu sync.Mutex
	results := map[string]int{}
	promise := func(_ Record, err error) {
		mu.Lock()
		switch {
		case err == nil:
			results["stored"]++
		case errors.Is(err, ErrClosed):
			results["closed"]++
		default:
			results[err.Error()]++
		}
		mu.Unlock()
		wg.Done()
	}
	p.Produce(t.Context(), "t", Record{Key: []byte("k0"), Value: partValue(0, 1)}, promise)
	release := h.waitHeld(t)
	for i := 1; i < n; i++ {
		p.Produce(t.Context(), "t", Record{Key: []byte(fmt.Sprint("k", i)), Value: partValue(0, i)}, promise)
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Close(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v, want context.Canceled", err)
	}
	release()
	all := make(chan struct{})
	go func() {
		wg.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("promises still due after a minute: %v of %d ran", results, n)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("promises: %v", results)
	if results["stored"] == 0 || results["closed"] == 0 || results["stored"]+results["closed"] != n {
		t.Fatalf("promises: %v; want some stored, the rest ErrClosed, %d in all", results, n)
	}
	checkChunksBack(t, chunks)
}

// chunksInUse answers the bytes of the process's chunks given out, for
// checkChunksBack. (Tests of this package run one at a time.)
func chunksInUse() int {
	_, n := slab.Stats()
	return n
}

// checkChunksBack checks that every chunk a producer took has come back
// once it is closed and its promises ran: chunks are not collected, so
// one a producer drops stays taken.
func checkChunksBack(t *testing.T, before int) {
	t.Helper()
	if _, n := slab.Stats(); n != before {
		t.Fatalf("%d bytes of chunks still taken after the producer ended (%d before it)", n, before)
	}
}

// TestProducerV2ResendWritesSameBatches: a request refused with a
// retriable reason is sent again with the same batches, byte for byte,
// written again from its parts (uncompressed) or from its finished
// batches (compressed); every record is stored once, in order per key.
// With one request in flight, each request is refused once, then taken.
func TestProducerV2ResendWritesSameBatches(t *testing.T) {
	for _, codec := range []Codec{CompressionNone, CompressionZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			fv := &fakeV2{t: t, routes: spanRoutes(64, 16), lim: batchfmt.ProduceLimits{MaxRawBytes: 256 << 10, MaxRecords: 4096, MaxHeaders: 1024}}
			var (
				mu       sync.Mutex
				seen     int
				refused  []wire.RangeBatch
				resent   int
				mismatch string
			)
			handle := func(fc *fakeConn, corr uint32, req wire.Request) {
				r, ok := req.(*wire.ProduceBatchesRequest)
				if !ok {
					fv.handle(fc, corr, req)
					return
				}
				mu.Lock()
				seen++
				if seen%2 == 1 {
					refused = refused[:0]
					for _, rb := range r.Batches {
						refused = append(refused, wire.RangeBatch{Range: rb.Range, Batch: bytes.Clone(rb.Batch)})
					}
					mu.Unlock()
					fc.refuse(corr, wire.ReasonRetry)
					return
				}
				resent++
				if len(r.Batches) != len(refused) {
					mismatch = fmt.Sprintf("%d batches sent again, %d refused", len(r.Batches), len(refused))
				}
				for i := range min(len(r.Batches), len(refused)) {
					if r.Batches[i].Range != refused[i].Range || !bytes.Equal(r.Batches[i].Batch, refused[i].Batch) {
						mismatch = fmt.Sprintf("batch %d sent again differs from the one refused", i)
					}
				}
				mu.Unlock()
				fv.handle(fc, corr, req)
			}
			c := dialFake(t, startFakeWith(t, fakeOptions{versions: fv.versions(wire.DefaultMaxFrame)}, handle), WithRetry(5, time.Millisecond))
			p := NewProducer(c, ProducerOptions{Compression: codec, Linger: time.Hour, MaxInFlight: 1, MaxBatchBytes: 64 << 10})
			const n = 3000
			want := map[string]int{}
			failed := 0 // promises run one at a time
			for i := range n {
				key := "k" + strconv.Itoa(i%500)
				p.Produce(t.Context(), "t", Record{Key: []byte(key), Value: partValue(want[key], i+1)}, func(_ Record, err error) {
					if err != nil {
						failed++
					}
				})
				want[key]++
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if failed != 0 {
				t.Errorf("%d promises failed", failed)
			}
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%d requests, %d sent again", seen, resent)
			if mismatch != "" || resent < 2 || seen != 2*resent {
				t.Fatalf("%d requests, %d sent again: %s", seen, resent, mismatch)
			}
			fv.mu.Lock()
			defer fv.mu.Unlock()
			checkKeyOrder(t, fv.records, want)
		})
	}
}

// TestPartsRequestPayload: the payload partsRequest writes from a batch's
// parts is produce_batches' for the same batches, and writing it again
// writes it the same.
func TestPartsRequestPayload(t *testing.T) {
	table := &routeTable{ranges: []wire.RouteRange{{Range: 7}, {Range: 1 << 40}, {Range: 3}}}
	b := &batch{topic: &topicState{name: "topic"}, table: table}
	t.Cleanup(b.free) // its parts' chunks are not collected
	var want []wire.RangeBatch
	for i, idx := range []int{2, 0, 1} {
		pt := &rpart{idx: idx}
		pt.b.Chunked()
		for j := range 50 * (i + 1) {
			addRecord(&pt.b, &Record{Key: []byte("k"), Value: partValue(j, j*37)}, int64(1_700_000_000_000+j))
		}
		b.parts = append(b.parts, part{idx: idx, b: &pt.b})
		want = append(want, wire.RangeBatch{Range: table.ranges[idx].Range, Batch: pt.b.AppendBatch(nil)})
	}
	wantPayload := wire.ProduceBatchesRequest{Topic: str("topic"), Batches: want}.AppendPayload(nil)
	r := partsRequest{b}
	if r.APIKey() != (wire.ProduceBatchesRequest{}).APIKey() {
		t.Fatalf("API key %d", r.APIKey())
	}
	for range 2 {
		if got := r.AppendPayload([]byte("x")); !bytes.Equal(got[1:], wantPayload) {
			t.Fatalf("payload of %d bytes differs from produce_batches' of %d", len(got)-1, len(wantPayload))
		}
	}
}
