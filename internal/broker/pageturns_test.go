package broker

import (
	"bytes"
	"context"
	"testing"
)

// producePerRange stores, for every key (one per range), batches of one
// record of size bytes: each Produce call is one batch per range.
func producePerRange(t *testing.T, b *Broker, topic string, keys []string, batches, size int) {
	t.Helper()
	value := bytes.Repeat([]byte{'v'}, size)
	for range batches {
		recs := make([]Record, len(keys))
		for i, k := range keys {
			recs[i] = Record{Key: []byte(k), Value: value}
		}
		if _, err := b.Produce(context.Background(), topic, recs); err != nil {
			t.Fatal(err)
		}
	}
}

// servedInTurn follows a reader's cursor over pages of maxBytes and
// returns, page by page, the ranges each served, in the order it served
// them.
func servedInTurn(t *testing.T, b *Broker, topic string, pages, maxBytes int) [][]uint64 {
	t.Helper()
	var cur *string
	var out [][]uint64
	for range pages {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: topic, Cursor: cur}, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		cur = p.Cursor
		var served []uint64
		for _, rb := range p.Batches {
			if len(served) == 0 || served[len(served)-1] != rb.Range {
				served = append(served, rb.Range)
			}
		}
		p.Release()
		out = append(out, served)
	}
	return out
}

// TestTurnsServeEveryRangeWhateverThePagesHold: a reader behind on 64
// busy ranges, whose pages all hold about the same number of records
// (32 KiB pages of 500 B batches), is served the ranges
// in turns of turnRanges (and the rest of a page to one more), each page
// going on where the last stopped (the first from the first range): 16
// pages serve every range, and the next 16 every range again.
// Where a page starts used to follow the sum of the cursor's offsets, and
// with pages of q*n records it moved q ranges a page and missed ranges.
func TestTurnsServeEveryRangeWhateverThePagesHold(t *testing.T) {
	b := openMem(t)
	const ranges = 64
	if err := b.CreateTopic(context.Background(), "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	producePerRange(t, b, "t", keys, 40, 500)

	pages := servedInTurn(t, b, "t", 2*ranges/turnRanges, 32<<10)
	for round := range 2 {
		seen := map[uint64]int{}
		for i, served := range pages[round*ranges/turnRanges : (round+1)*ranges/turnRanges] {
			// turnRanges shares, and what they left of the page to the
			// next range: a turn moves on by one or the other.
			if len(served) != turnRanges && len(served) != turnRanges+1 {
				t.Fatalf("round %d, page %d served ranges %v, want %d or %d", round, i, served, turnRanges, turnRanges+1)
			}
			for _, r := range served {
				seen[r]++
			}
		}
		if len(seen) != ranges {
			t.Fatalf("round %d: %d pages served %d of %d ranges: %v", round, ranges/turnRanges, len(seen), ranges, seen)
		}
	}
}

// TestTurnsComeBackToARangeLeftWithNothing: with batches larger than a
// share, a page takes two ranges' first batches and has no room for the
// third's. That third range gave nothing, so the next page starts with
// it: over 8 pages the 16 ranges are served in order, each once. Passing
// it instead would skip the same ranges round after round.
func TestTurnsComeBackToARangeLeftWithNothing(t *testing.T) {
	b := openMem(t)
	const ranges = 16
	if err := b.CreateTopic(context.Background(), "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	producePerRange(t, b, "t", keys, 4, 24<<10)

	pages := servedInTurn(t, b, "t", ranges/2+1, 64<<10)
	seen := map[uint64]int{}
	for i, served := range pages[:ranges/2] {
		if len(served) != 2 {
			t.Fatalf("page %d served ranges %v, want two 24 KiB batches in a page of 64 KiB", i, served)
		}
		for _, r := range served {
			seen[r]++
		}
	}
	if len(seen) != ranges {
		t.Fatalf("%d pages served %d of %d ranges: %v", ranges/2, len(seen), ranges, seen)
	}
	if first := pages[0][0]; pages[ranges/2][0] != first {
		t.Fatalf("the second round starts at range %d, the first at %d", pages[ranges/2][0], first)
	}
}
