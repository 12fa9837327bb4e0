package broker

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/vfs"
)

// openMem opens a broker on the in-memory filesystem with small segments,
// so rolls happen while tests read.
func openMem(t *testing.T) *Broker {
	t.Helper()
	b, err := Open(context.Background(), Config{DataDir: "/d", FS: vfs.NewMem(), SegmentMaxBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// keysPerRange returns one key for each active range of topic, and the
// range each key goes to.
func keysPerRange(t *testing.T, b *Broker, topic string) ([]string, map[string]uint64) {
	t.Helper()
	bits, routes, err := b.Routes(topic)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(routes))
	owner := map[string]uint64{}
	for i, found := 0, 0; found < len(routes); i++ {
		k := "k" + strconv.Itoa(i)
		pos := keyspace.Position([]byte(k), bits)
		for j, r := range routes {
			if pos >= r.Start && pos < r.End && keys[j] == "" {
				keys[j], owner[k] = k, r.Range
				found++
			}
		}
	}
	return keys, owner
}

// produceEach writes n records to every range, each key's values 0..n-1.
func produceEach(t *testing.T, b *Broker, topic string, keys []string, n int) {
	t.Helper()
	var recs []Record
	for i := range n {
		for _, k := range keys {
			recs = append(recs, Record{Key: []byte(k), Value: []byte(strconv.Itoa(i))})
		}
	}
	if _, err := b.Produce(context.Background(), topic, recs); err != nil {
		t.Fatal(err)
	}
}

// TestFetchTakesTurnsAcrossManyRanges: pages far smaller than the topic's
// ranges share the ranges out in turn, so over a window of pages every
// range gets its share, none twice before all have had one. Wire v1 and
// v2 alike.
func TestFetchTakesTurnsAcrossManyRanges(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	const ranges = 64
	if err := b.CreateTopic(ctx, "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, owner := keysPerRange(t, b, "t")
	produceEach(t, b, "t", keys, 40)

	perRange := map[uint64]int{}
	var cur *string
	for range 2 * ranges / 8 { // two records per range, in pages of 8
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: 8})
		if err != nil {
			t.Fatal(err)
		}
		cur = p.Cursor
		for _, r := range p.Records {
			perRange[owner[string(r.Key)]]++
		}
	}
	for _, k := range keys {
		if n := perRange[owner[k]]; n != 2 {
			t.Fatalf("v1: after %d records in pages of 8, range %d gave %d, want 2 each: %v", 2*ranges, owner[k], n, perRange)
		}
	}

	// v2: batches of one record each (one produce per record and key).
	if err := b.CreateTopic(ctx, "v2", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, _ = keysPerRange(t, b, "v2")
	for range 3 {
		produceEach(t, b, "v2", keys, 1)
	}
	clear(perRange)
	cur = nil
	for range 2 * ranges / 8 {
		p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "v2", Cursor: cur, Max: 8}})
		if err != nil {
			t.Fatal(err)
		}
		cur = p.Cursor
		for _, rb := range p.Batches {
			perRange[rb.Range]++
		}
	}
	if len(perRange) != ranges {
		t.Fatalf("v2: %d of %d ranges served over a window of pages: %v", len(perRange), ranges, perRange)
	}
	for id, n := range perRange {
		if n != 2 {
			t.Fatalf("v2: range %d gave %d batches, want 2 each: %v", id, n, perRange)
		}
	}
}

// TestFollowerSeesEveryRangeAfterIdle: a reader at the end of every range
// (which the node then remembers as idle) still gets each record appended
// later, to any range, through segment rolls, and through a split.
func TestFollowerSeesEveryRangeAfterIdle(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 16); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	var cur *string
	drain := func() int {
		n := 0
		for {
			p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: 1000})
			if err != nil {
				t.Fatal(err)
			}
			cur = p.Cursor
			if len(p.Records) == 0 {
				return n
			}
			n += len(p.Records)
		}
	}
	drain()
	for round := range 20 {
		// One key at a time: only its range has anything new.
		k := keys[round%len(keys)]
		big := make([]byte, 300) // a few records fill a 1 KiB segment
		for i := range 5 {
			if _, err := b.Produce(ctx, "t", []Record{{Key: []byte(k), Value: append([]byte(strconv.Itoa(i)), big...)}}); err != nil {
				t.Fatal(err)
			}
		}
		if round == 10 {
			if _, err := b.SplitRange(ctx, "t", 0); err != nil {
				t.Fatal(err)
			}
		}
		if n := drain(); n != 5 {
			t.Fatalf("round %d: read %d records appended to the range of %s, want 5", round, n, k)
		}
	}
}

// TestIdleRangesSeeTheNextAppend: once a read has found every range at
// its end (and the node remembers them idle), a record appended to any one
// of them is in the next page, which a long poll returns at once.
func TestIdleRangesSeeTheNextAppend(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 64); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	produceEach(t, b, "t", keys, 1)
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 1000})
	if err != nil || len(p.Records) != len(keys) {
		t.Fatalf("first page: %d records, %v", len(p.Records), err)
	}
	for i, k := range []string{keys[40], keys[3], keys[63]} {
		if p, err = b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: p.Cursor, Max: 1000}); err != nil || len(p.Records) != 0 {
			t.Fatalf("at the end: %d records, %v", len(p.Records), err)
		}
		if _, err := b.Produce(ctx, "t", []Record{{Key: []byte(k), Value: []byte(strconv.Itoa(i))}}); err != nil {
			t.Fatal(err)
		}
		p, err = b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: p.Cursor, Max: 1000, Wait: time.Hour})
		if err != nil || len(p.Records) != 1 || string(p.Records[0].Key) != k {
			t.Fatalf("after appending to the range of %s: %d records, %v", k, len(p.Records), err)
		}
	}
}

// TestCursorOverManyRanges: a topic's cursor carries an entry per active
// range; past 4,096 ranges it still decodes (it used to pass the entry
// limit), and it stays a few bytes per range.
func TestCursorOverManyRanges(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 16, 1024); err != nil {
		t.Fatal(err)
	}
	// Splits make the rest: a topic is created with at most 1,024.
	const ranges = 4096 + 64
	for {
		_, routes, _ := b.Routes("t")
		if len(routes) >= ranges {
			break
		}
		for _, r := range routes[:min(len(routes), ranges-len(routes))] {
			if _, err := b.SplitRange(ctx, "t", r.Range); err != nil {
				t.Fatal(err)
			}
		}
	}
	end, err := b.EndCursor("t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cursor of %d ranges: %d bytes", ranges, len(end))
	if len(end) > 5*ranges {
		t.Errorf("cursor of %d ranges is %d bytes, want at most %d", ranges, len(end), 5*ranges)
	}
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: &end, Max: 10})
	if errors.Is(err, ErrInvalidCursor) {
		t.Fatalf("the node refused its own cursor of %d ranges (%d bytes)", ranges, len(end))
	}
	if err != nil || len(p.Records) != 0 || p.Cursor == nil {
		t.Fatalf("fetch at the end: %d records, %v", len(p.Records), err)
	}
}
