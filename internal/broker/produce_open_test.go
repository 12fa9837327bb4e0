package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// The first request into a topic opens the segments of all its ranges
// ahead of its appends, several at a time, and so does the first request
// after every range rolled at once (by age): every record lands, in order
// per key, and each range has exactly one active segment.
func TestProduceBatchesOpensRangesTogether(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	const ranges, keys = 64, 1024
	if err := b.CreateTopic(context.Background(), "t", 12, ranges); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		batches := routeBatches(t, b, "t", keyedRecords(keys, 2, round*2), segment.CodecNone)
		if len(batches) != ranges {
			t.Fatalf("round %d: %d batches, want one per range (%d)", round, len(batches), ranges)
		}
		res, err := produceBatches(t, b, "t", batches)
		if err != nil || res.n != keys*2 || res.rerouted != 0 {
			t.Fatalf("round %d: %+v %v", round, res, err)
		}
		active, sealed := 0, 0
		for _, in := range b.store.List() {
			if in.Sealed {
				sealed++
			} else {
				active++
			}
		}
		if active != ranges || sealed != round*ranges {
			t.Fatalf("round %d: %d active and %d sealed segments, want %d and %d", round, active, sealed, ranges, round*ranges)
		}
		b.rollHeads("roll failed", func(*head) bool { return true })
	}
	seen, _ := drainBatches(t, b, "t", nil, 0)
	requireExactly(t, seen, keys, 6)
}

// A record-by-record produce (wire v1) opens the ranges it routes to
// together too, and after a roll by age.
func TestProduceOpensRangesTogether(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	const ranges, keys = 32, 512
	if err := b.CreateTopic(context.Background(), "t", 12, ranges); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		n, err := b.Produce(context.Background(), "t", keyedRecords(keys, 2, round*2))
		if err != nil || n != keys*2 {
			t.Fatalf("round %d: %d records, %v", round, n, err)
		}
		active := 0
		for _, in := range b.store.List() {
			if !in.Sealed {
				active++
			}
		}
		if active != ranges {
			t.Fatalf("round %d: %d active segments, want %d", round, active, ranges)
		}
		b.rollHeads("roll failed", func(*head) bool { return true })
	}
	r := newReader(t, b, "t")
	r.drain()
	requireExactly(t, r.seen, keys, 4)
}

// TestOpenWorkersKeepTheirBound: reservations never pass openWorkersMax
// together, whatever many goroutines ask, and come back whole.
func TestOpenWorkersKeepTheirBound(t *testing.T) {
	var w openWorkers
	if got := w.take(openWorkersMax + 10); got != openWorkersMax {
		t.Fatalf("take(max+10) = %d, want %d", got, openWorkersMax)
	}
	if got := w.take(1); got != 0 {
		t.Fatalf("take at the bound = %d, want 0", got)
	}
	w.put(openWorkersMax)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := 0
	for range 64 {
		wg.Go(func() {
			for range 100 {
				n := w.take(openParallel)
				mu.Lock()
				held += n
				if held > openWorkersMax {
					t.Errorf("%d workers held, bound %d", held, openWorkersMax)
				}
				held -= n
				mu.Unlock()
				w.put(n)
			}
		})
	}
	wg.Wait()
	if n := w.n.Load(); n != 0 {
		t.Fatalf("%d workers still counted after every put", n)
	}
}

// TestProduceOpensItsHeadsWithNoWorkersLeft: with the node's open workers
// all taken, a first produce into a topic of 64 new ranges opens each head
// from its own append and stores every record; once workers are free
// again, openHeads opens a second new topic's heads ahead.
func TestProduceOpensItsHeadsWithNoWorkersLeft(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	if got := b.opens.take(openWorkersMax); got != openWorkersMax {
		t.Fatalf("took %d workers", got)
	}
	for i, topic := range []string{"t", "u"} {
		if i == 1 {
			b.opens.put(openWorkersMax)
		}
		if err := b.CreateTopic(ctx, topic, 8, 64); err != nil {
			t.Fatal(err)
		}
		recs := make([]Record, 2000)
		for j := range recs {
			recs[j] = Record{Key: []byte("k" + strconv.Itoa(j)), Value: []byte(strconv.Itoa(j))}
		}
		if _, err := b.Produce(ctx, topic, recs); err != nil {
			t.Fatalf("%s: %v", topic, err)
		}
		got := 0
		var cur *string
		for {
			p, err := b.Fetch(ctx, FetchRequest{Topic: topic, Cursor: cur, Max: 500})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Records) == 0 {
				break
			}
			got, cur = got+len(p.Records), p.Cursor
		}
		if got != len(recs) {
			t.Fatalf("%s: read %d of %d records", topic, got, len(recs))
		}
		// Without workers no head is marked tried ahead (a later request
		// may open them); with them, every head of the topic was.
		id, _ := b.topicID(topic)
		if n := preparedHeads(b, id); n != i*64 {
			t.Fatalf("%s: %d heads opened ahead, want %d", topic, n, i*64)
		}
	}
	if n := b.opens.n.Load(); n != 0 {
		t.Fatalf("%d open workers still counted", n)
	}
}

// preparedHeads counts the heads of topic that openHeads opened ahead.
func preparedHeads(b *Broker, topic uint64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, h := range b.mu.heads {
		h.mu.Lock()
		if h.topicID == topic && h.prepared {
			n++
		}
		h.mu.Unlock()
	}
	return n
}
