package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
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

// rangeTopic opens a broker on a MemFS with topic "t" of the given
// ranges, and stores batches of one record of size bytes per range.
func rangeTopic(t *testing.T, ranges, batches, size int) *Broker {
	t.Helper()
	b := openMem(t)
	if err := b.CreateTopic(context.Background(), "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	producePerRange(t, b, "t", keys, batches, size)
	return b
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
	const ranges = 64
	b := rangeTopic(t, ranges, 40, 500)

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
	const ranges = 16
	b := rangeTopic(t, ranges, 4, 24<<10)

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

// TestTurnsPassARangeTheScanBoundCut: one of 8 ranges is fed, before
// every page, more TTL-expired records than a page may scan; the other 7
// hold live records. The page that the scan bound cuts in the expiring
// range hands the turn on like one that took its share, so the live
// records are all served within a few rounds of turns, by Fetch (v1) and
// FetchBatches (v2). Holding the turn on the range that gave nothing (as
// one left with nothing for want of room is held) would return empty
// pages for as long as the feed lasts.
func TestTurnsPassARangeTheScanBoundCut(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) { passScanCut(t, v2) })
	}
}

func passScanCut(t *testing.T, v2 bool) {
	b, clk := openTTL(t, Config{FetchMaxBytes: 4 << 10, SegmentMaxBytes: 64 << 20})
	ctx := context.Background()
	const ranges = 8
	if err := b.CreateTopic(ctx, "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	pad := strings.Repeat(".", 60)
	feed := func(n int) {
		recs := make([]Record, n)
		for j := range recs {
			recs[j] = ttlRecord(keys[0], strconv.Itoa(j)+pad, "1")
		}
		if _, err := b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	feed(800)
	var live []Record
	for j := range 5 {
		for _, k := range keys[1:] {
			live = append(live, Record{Key: []byte(k), Value: []byte("live" + strconv.Itoa(j))})
		}
	}
	if _, err := b.Produce(ctx, "t", live); err != nil {
		t.Fatal(err)
	}
	var cur *string
	served := 0
	for page := 0; page < 4*ranges && served < len(live); page++ {
		// 600 records of ~80 B: more than the 32 KiB a page may scan.
		feed(600)
		clk.Advance(2 * time.Second)
		var recs []Record
		recs, cur = readPage(t, b, FetchRequest{Topic: "t", Cursor: cur, Max: 10}, v2)
		for _, r := range recs {
			if string(r.Key) == keys[0] {
				t.Fatalf("page %d served expired record %q", page, r.Value)
			}
		}
		served += len(recs)
	}
	if served != len(live) {
		t.Fatalf("%d pages served %d of the other ranges' %d live records", 4*ranges, served, len(live))
	}
}

// readPage reads one page by Fetch, or by FetchBatches with its batches
// decoded, and returns its records and cursor.
func readPage(t *testing.T, b *Broker, req FetchRequest, v2 bool) ([]Record, *string) {
	t.Helper()
	if !v2 {
		p, err := b.Fetch(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return p.Records, p.Cursor
	}
	p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: req})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	var recs []Record
	for _, rb := range p.Batches {
		if recs, err = segment.DecodeRecords(rb.Batch, recs); err != nil {
			t.Fatal(err)
		}
	}
	return recs, p.Cursor
}

// TestTurnsLeaveACaughtUpCursorAsItWas: once a reader over 16 ranges has
// read everything, its cursor handing on a turn, a page that finds
// nothing visits every range and hands on the turn it was handed, so its
// cursor is the one it was given, byte for byte: a client that reads on
// while the cursor moves stops there.
func TestTurnsLeaveACaughtUpCursorAsItWas(t *testing.T) {
	const ranges = 16
	// One record per range, four a page: every page stops, spent, at a
	// range boundary, the last one before the first range again.
	b := rangeTopic(t, ranges, 1, 100)
	var cur *string
	read := 0
	for range 4 * ranges {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cur, Max: 4}})
		if err != nil {
			t.Fatal(err)
		}
		read += len(p.Batches)
		p.Release()
		if len(p.Batches) == 0 {
			if read != ranges {
				t.Fatalf("an empty page after %d of %d batches", read, ranges)
			}
			if *p.Cursor != *cur {
				t.Fatalf("an empty page moved the cursor from %q to %q", *cur, *p.Cursor)
			}
			return
		}
		cur = p.Cursor
	}
	t.Fatalf("%d pages never came to an empty one (read %d batches)", 4*ranges, read)
}
