package broker

import (
	"context"
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
