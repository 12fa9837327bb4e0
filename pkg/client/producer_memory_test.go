package client

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/slab"
)

// TestProducerV2PromisesHeapBound: a buffer full of small records, each
// with a promise, holds a heap within a small multiple of
// MaxBufferedBytes, the default MaxBufferedRecords notwithstanding: the
// copy of each record kept for its promise counts toward the bound. The
// node holds the first request unanswered, so the buffer only fills.
func TestProducerV2PromisesHeapBound(t *testing.T) {
	h, c := newHoldFirstV2(t, nil)
	promise := func(Record, error) {}
	n, buffered, grown := fillHeld(t, h, c, 16<<20, promise, func(n int) (string, []byte) {
		return "t", []byte("key-" + strconv.Itoa(n%26))
	})
	checkHeapBound(t, buffered, grown, 16<<20)
	t.Logf("%d records", n)
}

// TestProducerV2ThinPartsHeapBound: records spread over many topics and
// ranges, a few to each range's batch, hold a heap within a small
// multiple of MaxBufferedBytes: each batch's first buffer and bookkeeping
// count toward the bound, which a buffer of one-record batches would
// otherwise pass many times over. The node holds the first request
// unanswered, so the buffer only fills.
func TestProducerV2ThinPartsHeapBound(t *testing.T) {
	const topics, ranges = 32, 1024
	h, c := newHoldFirstV2(t, spanRoutes(ranges, 16))
	for i := range topics {
		if _, err := c.routes(t.Context(), "t"+strconv.Itoa(i)); err != nil {
			t.Fatal(err) // the client's routes are its own, not the buffer's
		}
	}
	n, buffered, grown := fillHeld(t, h, c, 2<<20, nil, func(n int) (string, []byte) {
		return "t" + strconv.Itoa(n%topics), []byte("key-" + strconv.Itoa(n))
	})
	checkHeapBound(t, buffered, grown, 2<<20)
	t.Logf("%d records over %d topics of %d ranges", n, topics, ranges)
}

// fillHeld produces, with MaxBufferedBytes maxBytes, one record that the
// node h holds unanswered and then records to where(n) until the buffer
// takes no more; it answers how many, the bytes buffered, and how much
// the heap grew meanwhile, with the parts' chunks mapped apart from it.
// Once the buffer is full, a Produce whose context has ended adds nothing
// to it: its record fails with ErrBufferFull. The producer is closed when
// the test ends.
func fillHeld(t *testing.T, h *holdFirstV2, c *Client, maxBytes int, promise func(Record, error), where func(n int) (string, []byte)) (n, buffered int, grown int64) {
	t.Helper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	_, chunks0 := slab.Stats()
	p := NewProducer(c, ProducerOptions{MaxBufferedBytes: maxBytes, MaxInFlight: 1})
	topic, _ := where(0)
	p.Produce(t.Context(), topic, Record{Key: []byte("first"), Value: []byte("v")}, promise)
	release := h.waitHeld(t)
	done, cancel := context.WithCancel(t.Context())
	cancel()
	for n = 1; ; n++ {
		if n > DefaultMaxBufferedRecords {
			t.Fatalf("%d records buffered and the buffer is not full", n)
		}
		p.mu.Lock()
		before := p.bufferedBytes
		p.mu.Unlock()
		topic, key := where(n)
		p.Produce(done, topic, Record{Key: key, Value: []byte("12345678")}, promise)
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
	offHeap := 0
	if _, chunks1 := slab.Stats(); slab.OffHeap {
		offHeap = chunks1 - chunks0 // the parts' chunks, mapped apart from the heap
	}
	t.Cleanup(func() {
		release()
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return n, buffered, int64(m1.HeapAlloc) - int64(m0.HeapAlloc) + int64(offHeap)
}

// checkHeapBound checks that a full buffer stays within MaxBufferedBytes
// and holds a heap within three times it.
func checkHeapBound(t *testing.T, buffered int, grown int64, maxBytes int) {
	t.Helper()
	const factor = 3
	t.Logf("%d bytes buffered (bound %d); the heap grew %d bytes, %.2f times the bound", buffered, maxBytes, grown, float64(grown)/float64(maxBytes))
	if buffered > maxBytes {
		t.Errorf("%d bytes buffered, bound %d", buffered, maxBytes)
	}
	if grown > factor*int64(maxBytes) {
		t.Errorf("the heap grew %d bytes with the buffer full, more than %d times MaxBufferedBytes (%d)", grown, factor, maxBytes)
	}
}
