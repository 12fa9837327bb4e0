package broker

// Skips told to readers, and the rule that nothing moves a reader past a
// record that still exists and has not expired.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// rangeSegments is a range's segments as the metadata lists them.
func rangeSegments(b *Broker, topic string, rangeID uint64) []metadata.Segment {
	var segs []metadata.Segment
	id, _ := b.topicID(topic)
	_ = b.plane.ViewTopic(id, func(st *metadata.State) { segs = st.RangeSegments(rangeID) })
	return segs
}

// deleteFront deletes a range's n oldest segments as the retention sweep
// does (the metadata first, then the file), without waking readers: their
// plans still list the segments.
func deleteFront(t *testing.T, b *Broker, topic string, rangeID uint64, n int, reason string) {
	t.Helper()
	segs := rangeSegments(b, topic, rangeID)
	if len(segs) <= n || segs[n-1].Active {
		t.Fatalf("range %d has %d segments, cannot delete %d sealed ones", rangeID, len(segs), n)
	}
	for _, s := range segs[:n] {
		if _, err := b.apply(context.Background(), metadata.Command{Kind: metadata.KindDeleteSegment, Segment: s.ID, Reason: reason}); err != nil {
			t.Fatal(err)
		}
		if err := b.store.Delete(storage.SegmentID(s.ID)); err != nil {
			t.Fatal(err)
		}
	}
}

// skipTopic makes a one-range topic of records valued by offset over
// several sealed segments, and returns its range.
func skipTopic(t *testing.T, b *Broker) uint64 {
	t.Helper()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i += 100 {
		var recs []Record
		for j := i; j < i+100; j++ {
			recs = append(recs, Record{Key: []byte("k"), Value: []byte(strconv.Itoa(j) + strings.Repeat(".", 40))})
		}
		if _, err := b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	_, routes, _ := b.Routes("t")
	return routes[0].Range
}

func offsetOf(t *testing.T, r Record) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimRight(string(r.Value), "."), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSkipToldOnceAndReaderContinues(t *testing.T) {
	b, _ := openTTL(t, Config{})
	ctx := context.Background()
	rid := skipTopic(t, b)
	first, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil || len(first.Records) != 10 {
		t.Fatalf("%d records, %v", len(first.Records), err)
	}
	v2first, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Max: 10}})
	if err != nil || len(v2first.Batches) != 1 {
		t.Fatalf("%d batches, %v", len(v2first.Batches), err)
	}
	deleteFront(t, b, "t", rid, 2, "retention")
	base := rangeSegments(b, "t", rid)[0].Base

	// Wire v1: the page reads on from the oldest record left and tells
	// the records the reader had not read.
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: first.Cursor, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if p.Skipped != base-10 || p.SkippedBound {
		t.Fatalf("skipped %d (bound %v), want %d exactly", p.Skipped, p.SkippedBound, base-10)
	}
	if len(p.Records) == 0 || offsetOf(t, p.Records[0]) != base {
		t.Fatalf("page after the hole starts at %v, want offset %d", p.Records, base)
	}
	again, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: p.Cursor, Max: 1000})
	if err != nil || again.Skipped != 0 || offsetOf(t, again.Records[0]) != base+10 {
		t.Fatalf("next page: skipped %d, %v", again.Skipped, err)
	}
	rest, _ := fetchAll(t, b, "t", again.Cursor)
	if got := uint64(len(again.Records)+len(rest)) + base + 10; got != 600 {
		t.Fatalf("reader ended at %d, want 600", got)
	}

	// Wire v2, from its own position.
	bp, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: v2first.Cursor}})
	if err != nil || len(bp.Batches) == 0 {
		t.Fatalf("v2 page: %d batches, %v", len(bp.Batches), err)
	}
	recs, err := segment.DecodeRecords(bp.Batches[0].Batch, nil)
	if err != nil || offsetOf(t, recs[0]) != base {
		t.Fatalf("v2 page after the hole: %v", err)
	}
	if bp.Skipped != base-10 || bp.SkippedBound {
		t.Fatalf("v2 skipped %d (bound %v), want %d", bp.Skipped, bp.SkippedBound, base-10)
	}

	// A reader that never read the range missed nothing.
	fresh, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil || fresh.Skipped != 0 || offsetOf(t, fresh.Records[0]) != base {
		t.Fatalf("new reader: skipped %d, %v", fresh.Skipped, err)
	}
}

// Records TTL reclaimed never count as skips.
func TestSkipNeverCountsTTLDeletes(t *testing.T) {
	b, _ := openTTL(t, Config{})
	ctx := context.Background()
	rid := skipTopic(t, b)
	first, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	deleteFront(t, b, "t", rid, 2, "ttl")
	base := rangeSegments(b, "t", rid)[0].Base
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: first.Cursor, Max: 10})
	if err != nil || p.Skipped != 0 || offsetOf(t, p.Records[0]) != base {
		t.Fatalf("skipped %d, records %d, %v", p.Skipped, len(p.Records), err)
	}
}

// A group's describe shows the records its commits passed after they were
// deleted.
func TestSkipCountedForGroup(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	rid := skipTopic(t, b)
	g := "g"
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Group: &g, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, "t", g, *p.Cursor); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	deleteFront(t, b, "t", rid, 3, "retention")
	base := rangeSegments(b, "t", rid)[0].Base
	if st, err := b.DescribeGroup("t", g); err != nil || st.Skipped != 0 {
		t.Fatalf("before the commit past the hole: %+v, %v", st, err)
	}
	p, err = b.Fetch(ctx, FetchRequest{Topic: "t", Group: &g, Max: 10})
	if err != nil || p.Skipped != base-10 {
		t.Fatalf("page skipped %d, want %d, %v", p.Skipped, base-10, err)
	}
	if err := b.Commit(ctx, "t", g, *p.Cursor); err != nil {
		t.Fatal(err)
	}
	// The records were deleted after the group's last commit: it might
	// have read them first for all the metadata knows, so the count is
	// told as an upper bound.
	st, err := b.DescribeGroup("t", g)
	if err != nil || st.Skipped != base-10 || !st.SkippedBound {
		t.Fatalf("describe: %+v, want %d skipped as an upper bound, %v", st, base-10, err)
	}
}

// The scenario of Pulsar #26504: a reader far behind a TTL boundary, on a
// topic that keeps records for long, while the retention sweep fires at
// random moments. It must read every record that has not expired, in
// order, and be told of no skip: TTL filters, it never moves a reader.
func TestTTLReaderBehindBoundaryReadsEveryUnexpiredRecord(t *testing.T) {
	swept := 0
	for seed := uint64(1); seed <= 10; seed++ {
		swept += readBehindTTL(t, seed)
	}
	if swept == 0 {
		t.Fatal("the sweep never deleted a segment: the scenario did not run")
	}
}

func readBehindTTL(t *testing.T, seed uint64) int {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 99))
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	// Chunks alternate: records with a one-minute TTL, then records with
	// none or a TTL of an hour (never reached here).
	var keep []int
	for c := 0; c < 20; c++ {
		var recs []Record
		for i := c * 100; i < (c+1)*100; i++ {
			ttl := "60000"
			if c%2 == 1 {
				ttl = []string{"", "3600000"}[i%2]
				keep = append(keep, i)
			}
			recs = append(recs, ttlRecord("k", strconv.Itoa(i)+strings.Repeat(".", 30), ttl))
		}
		if _, err := b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	v2 := seed%2 == 0
	var (
		cur     *string
		got     []int
		deleted int
	)
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			t.Fatalf("seed %d: the reader did not reach the end", seed)
		}
		clk.Advance(time.Duration(rng.IntN(5000)) * time.Millisecond)
		if rng.IntN(10) < 3 {
			deleted += b.sweepRetention(ctx)
		}
		now := clk.Now().UnixMilli()
		recs, next, skipped := readOnePage(t, b, cur, v2, 1+rng.IntN(60))
		if skipped != 0 {
			t.Fatalf("seed %d: told %d skipped records; only TTL deleted anything", seed, skipped)
		}
		cur = next
		for _, r := range recs {
			if r.Expiry != 0 && r.Expiry <= now {
				t.Fatalf("seed %d: record %s served %d ms after it expired", seed, r.Value, now-r.Expiry)
			}
			got = append(got, int(offsetOf(t, r)))
		}
		if len(recs) == 0 && clk.Now().UnixMilli() > 1_700_000_000_000+60_000 {
			break
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("seed %d: %d read after %d", seed, got[i], got[i-1])
		}
	}
	have := map[int]bool{}
	for _, v := range got {
		have[v] = true
	}
	for _, v := range keep {
		if !have[v] {
			t.Fatalf("seed %d: record %d never expires but the reader missed it (read %d records)", seed, v, len(got))
		}
	}
	return deleted
}

// readOnePage is one page of at most max records on either wire.
func readOnePage(t *testing.T, b *Broker, cur *string, v2 bool, max int) ([]Record, *string, uint64) {
	t.Helper()
	ctx := context.Background()
	if !v2 {
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: max})
		if err != nil {
			t.Fatal(err)
		}
		return p.Records, p.Cursor, p.Skipped
	}
	p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cur, Max: max}})
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for _, rb := range p.Batches {
		if recs, err = segment.DecodeRecords(rb.Batch, recs); err != nil {
			t.Fatal(err)
		}
	}
	return recs, p.Cursor, p.Skipped
}

// A subscription tells the skip on the first page it pushes past the hole.
func TestSkipToldBySubscription(t *testing.T) {
	b, _ := openTTL(t, Config{})
	ctx := context.Background()
	rid := skipTopic(t, b)
	g := "g"
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Group: &g, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, "t", g, *p.Cursor); err != nil {
		t.Fatal(err)
	}
	deleteFront(t, b, "t", rid, 2, "retention")
	base := rangeSegments(b, "t", rid)[0].Base
	for _, v2 := range []bool{false, true} {
		var sub *Subscription
		if v2 {
			sub, err = b.SubscribeBatchesAs(Identity{}, "t", &g, nil, 1000, 1<<20)
		} else {
			sub, err = b.Subscribe("t", &g, nil, 1000, 100)
		}
		if err != nil {
			t.Fatal(err)
		}
		var first Page
		stop := errors.New("first page")
		if err := sub.Run(ctx, func(p Page) error { first = p; return stop }); !errors.Is(err, stop) {
			t.Fatalf("run: %v", err)
		}
		recs := first.Records
		if v2 {
			if recs, err = segment.DecodeRecords(first.Batches[0].Batch, nil); err != nil {
				t.Fatal(err)
			}
		}
		if first.Skipped != base-10 || first.SkippedBound || offsetOf(t, recs[0]) != base {
			t.Fatalf("v2 %v: first page skipped %d (bound %v), starts at %d; want %d skipped, start %d",
				v2, first.Skipped, first.SkippedBound, offsetOf(t, recs[0]), base-10, base)
		}
	}
}

// A range all of whose segments retention deleted (the last one rolled by
// age first) tells a reader left behind at once, not only once a new
// record arrives, and then serves what is produced next without counting
// it again.
func TestSkipToldWhenEverySegmentIsDeleted(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	rid := skipTopic(t, b)
	first, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil || len(first.Records) != 10 {
		t.Fatalf("%d records, %v", len(first.Records), err)
	}
	clk.Advance(8 * 24 * time.Hour) // past the default segment age
	b.RollDue()
	segs := rangeSegments(b, "t", rid)
	for _, s := range segs {
		if s.Active {
			t.Fatalf("segment %d still active after the age roll", s.ID)
		}
		if _, err := b.apply(ctx, metadata.Command{Kind: metadata.KindDeleteSegment, Segment: s.ID, Reason: "retention"}); err != nil {
			t.Fatal(err)
		}
		if err := b.store.Delete(storage.SegmentID(s.ID)); err != nil {
			t.Fatal(err)
		}
	}
	for _, v2 := range []bool{false, true} {
		recs, cur, skipped := readOnePage(t, b, first.Cursor, v2, 10)
		if len(recs) != 0 || skipped != 590 {
			t.Fatalf("v2=%v: %d records, skipped %d, want none and 590", v2, len(recs), skipped)
		}
		if _, _, again := readOnePage(t, b, cur, v2, 10); again != 0 {
			t.Fatalf("v2=%v: the skip was told twice (%d)", v2, again)
		}
	}
	p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: first.Cursor, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "t", []Record{{Key: []byte("k"), Value: []byte("600")}}); err != nil {
		t.Fatal(err)
	}
	recs, _, skipped := readOnePage(t, b, p.Cursor, false, 10)
	if len(recs) != 1 || offsetOf(t, recs[0]) != 600 || skipped != 0 {
		t.Fatalf("after the hole: %d records, skipped %d", len(recs), skipped)
	}
}
