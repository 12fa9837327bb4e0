package client

import (
	"context"
	"runtime"
	"strconv"
	"testing"
)

// TestProducerV2PromisesHeapBound: a buffer full of small records, each
// with a promise, holds a heap within a small multiple of
// MaxBufferedBytes, the default MaxBufferedRecords notwithstanding: the
// copy of each record kept for its promise counts toward the bound. The
// node holds the first request unanswered, so the buffer only fills.
func TestProducerV2PromisesHeapBound(t *testing.T) {
	h, c := newHoldFirstV2(t, nil)
	const (
		maxBytes = 16 << 20
		factor   = 3
	)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	p := NewProducer(c, ProducerOptions{MaxBufferedBytes: maxBytes, MaxInFlight: 1})
	promise := func(Record, error) {}
	p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte("v")}, promise)
	release := h.waitHeld(t)
	// Once the buffer is full, a Produce whose context has ended adds
	// nothing to it: its record fails with ErrBufferFull.
	done, cancel := context.WithCancel(t.Context())
	cancel()
	n, buffered := 1, 0
	for ; ; n++ {
		if n > DefaultMaxBufferedRecords {
			t.Fatalf("%d records buffered and the buffer is not full", n)
		}
		p.mu.Lock()
		before := p.bufferedBytes
		p.mu.Unlock()
		p.Produce(done, "t", Record{Key: []byte("key-" + strconv.Itoa(n%26)), Value: []byte("12345678")}, promise)
		p.mu.Lock()
		grew := p.bufferedBytes > before
		buffered = p.bufferedBytes
		p.mu.Unlock()
		if !grew {
			break
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	grown := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("%d records, %d bytes buffered (bound %d); the heap grew %d bytes, %.2f times the bound", n, buffered, maxBytes, grown, float64(grown)/maxBytes)
	if buffered > maxBytes {
		t.Errorf("%d bytes buffered, bound %d", buffered, maxBytes)
	}
	if grown > factor*maxBytes {
		t.Errorf("the heap grew %d bytes with the buffer full, more than %d times MaxBufferedBytes (%d)", grown, factor, maxBytes)
	}
	release()
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestProducerV2ThinPartsHeapBound: records spread over many topics and
// ranges, a few to each range's batch, hold a heap within a small
// multiple of MaxBufferedBytes: each batch's first buffer and bookkeeping
// count toward the bound, which a buffer of one-record batches would
// otherwise pass many times over. The node holds the first request
// unanswered, so the buffer only fills.
func TestProducerV2ThinPartsHeapBound(t *testing.T) {
	const (
		topics   = 32
		ranges   = 1024
		maxBytes = 2 << 20
		factor   = 3
	)
	h, c := newHoldFirstV2(t, spanRoutes(ranges, 16))
	for i := range topics {
		if _, err := c.routes(t.Context(), "t"+strconv.Itoa(i)); err != nil {
			t.Fatal(err) // the client's routes are its own, not the buffer's
		}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	p := NewProducer(c, ProducerOptions{MaxBufferedBytes: maxBytes, MaxInFlight: 1})
	p.Produce(t.Context(), "t0", Record{Key: []byte("first"), Value: []byte("v")}, nil)
	release := h.waitHeld(t)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	n, buffered := 1, 0
	for ; ; n++ {
		if n > DefaultMaxBufferedRecords {
			t.Fatalf("%d records buffered and the buffer is not full", n)
		}
		p.mu.Lock()
		before := p.bufferedBytes
		p.mu.Unlock()
		key := []byte("key-" + strconv.Itoa(n))
		p.Produce(done, "t"+strconv.Itoa(n%topics), Record{Key: key, Value: []byte("12345678")}, nil)
		p.mu.Lock()
		grew := p.bufferedBytes > before
		buffered = p.bufferedBytes
		p.mu.Unlock()
		if !grew {
			break
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	grown := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("%d records over %d topics of %d ranges, %d bytes buffered (bound %d); the heap grew %d bytes, %.2f times the bound", n, topics, ranges, buffered, maxBytes, grown, float64(grown)/maxBytes)
	if buffered > maxBytes {
		t.Errorf("%d bytes buffered, bound %d", buffered, maxBytes)
	}
	if grown > factor*maxBytes {
		t.Errorf("the heap grew %d bytes with the buffer full, more than %d times MaxBufferedBytes (%d)", grown, factor, maxBytes)
	}
	release()
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}
