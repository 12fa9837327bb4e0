package broker

// Per-message TTL: the node stamps each record's expiry from its own clock
// at produce and drops expired records at read, on both wire versions.

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// openTTL opens a broker on a manual clock, on a real data directory.
func openTTL(t *testing.T, cfg Config) (*Broker, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	cfg.DataDir, cfg.Clock = t.TempDir(), clk
	if cfg.SegmentMaxBytes == 0 {
		cfg.SegmentMaxBytes = 4 << 10
	}
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, clk
}

func hdr(k, v string) segment.Header { return segment.Header{Key: []byte(k), Value: []byte(v)} }

// ttlRecord is a record keyed k with value v and, when ttl is not "", a
// TTL header.
func ttlRecord(k, v, ttl string) Record {
	r := Record{Key: []byte(k), Value: []byte(v)}
	if ttl != "" {
		r.Headers = []segment.Header{hdr(retention.TTLHeader, ttl)}
	}
	return r
}

func headerValue(r Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if string(h.Key) == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// fetchAll reads a topic with Fetch from cur until a page is empty and
// returns the records and the cursor after them.
func fetchAll(t *testing.T, b *Broker, topic string, cur *string) ([]Record, *string) {
	t.Helper()
	var out []Record
	for {
		p, err := b.Fetch(context.Background(), FetchRequest{Topic: topic, Cursor: cur, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if p.Skipped != 0 {
			t.Fatalf("a page told %d skipped records; nothing was deleted", p.Skipped)
		}
		cur = p.Cursor
		if len(p.Records) == 0 {
			return out, cur
		}
		out = append(out, p.Records...)
	}
}

// fetchAllBatches is fetchAll over wire v2; it also returns the batches.
func fetchAllBatches(t *testing.T, b *Broker, topic string, cur *string) ([]Record, [][]byte, *string) {
	t.Helper()
	var (
		out     []Record
		batches [][]byte
	)
	for {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: topic, Cursor: cur}})
		if err != nil {
			t.Fatal(err)
		}
		cur = p.Cursor
		if len(p.Batches) == 0 {
			return out, batches, cur
		}
		for _, rb := range p.Batches {
			batches = append(batches, rb.Batch)
			if out, err = segment.DecodeRecords(rb.Batch, out); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func valuesOf(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func sameValues(t *testing.T, what string, recs []Record, want ...string) {
	t.Helper()
	got := valuesOf(recs)
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

func TestTTLServedBeforeExpiryAndDroppedAfter(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	now := clk.Now().UnixMilli()
	recs := []Record{ttlRecord("a", "1", "1000"), ttlRecord("a", "2", ""), ttlRecord("a", "3", "5000")}
	if _, err := b.Produce(ctx, "t", recs); err != nil {
		t.Fatal(err)
	}
	got, _ := fetchAll(t, b, "t", nil)
	sameValues(t, "before expiry", got, "1", "2", "3")
	for i, want := range []int64{now + 1000, 0, now + 5000} {
		if got[i].Expiry != want {
			t.Fatalf("record %d: expiry %d, want %d", i, got[i].Expiry, want)
		}
		if v, ok := headerValue(got[i], retention.ExpiryHeader); ok {
			t.Fatalf("record %d: an expiry header %q; the expiry lives in the record's field", i, v)
		}
	}
	clk.Advance(999 * time.Millisecond)
	got, _ = fetchAll(t, b, "t", nil)
	sameValues(t, "1 ms before the first expiry", got, "1", "2", "3")
	clk.Advance(time.Millisecond)
	got, _ = fetchAll(t, b, "t", nil)
	sameValues(t, "at the first expiry", got, "2", "3")
	v2, _, _ := fetchAllBatches(t, b, "t", nil)
	sameValues(t, "at the first expiry, wire v2", v2, "2", "3")
	clk.Advance(4 * time.Second)
	got, _ = fetchAll(t, b, "t", nil)
	sameValues(t, "after both expiries", got, "2")
	v2, _, _ = fetchAllBatches(t, b, "t", nil)
	sameValues(t, "after both expiries, wire v2", v2, "2")
}

// A page whose every record has expired still moves the cursor on, and
// the next page serves what follows.
func TestTTLAllExpiredPageAdvancesCursor(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "v1", true: "v2"}[v2], func(t *testing.T) {
			b, clk := openTTL(t, Config{})
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
				t.Fatal(err)
			}
			var recs []Record
			for i := 0; i < 300; i++ {
				recs = append(recs, ttlRecord("k", strconv.Itoa(i), "100"))
			}
			if _, err := b.Produce(ctx, "t", recs); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Second)
			var cur *string
			if v2 {
				p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t"}})
				if err != nil || len(p.Batches) != 0 {
					t.Fatalf("expired page: %d batches, %v", len(p.Batches), err)
				}
				cur = p.Cursor
			} else {
				p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 1000})
				if err != nil || len(p.Records) != 0 {
					t.Fatalf("expired page: %d records, %v", len(p.Records), err)
				}
				cur = p.Cursor
			}
			end, err := b.EndCursor("t")
			if err != nil {
				t.Fatal(err)
			}
			if *cur != end {
				t.Fatal("the all-expired page did not move the cursor to the end")
			}
			if _, err := b.Produce(ctx, "t", []Record{ttlRecord("k", "next", "")}); err != nil {
				t.Fatal(err)
			}
			var got []Record
			if v2 {
				got, _, _ = fetchAllBatches(t, b, "t", cur)
			} else {
				got, _ = fetchAll(t, b, "t", cur)
			}
			sameValues(t, "after the expired page", got, "next")
		})
	}
}

// Without a TTL header and without a topic default, nothing ever expires.
func TestTTLNoneNeverDropped(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	recs := []Record{ttlRecord("a", "1", ""), ttlRecord("a", "2", "junk"), ttlRecord("a", "3", "-5"), ttlRecord("a", "4", "0")}
	if _, err := b.Produce(ctx, "t", recs); err != nil {
		t.Fatal(err)
	}
	clk.Advance(200 * 365 * 24 * time.Hour)
	got, _ := fetchAll(t, b, "t", nil)
	sameValues(t, "two hundred years on", got, "1", "2", "3", "4")
	for _, r := range got {
		if r.Expiry != 0 {
			t.Fatalf("record %s has expiry %d", r.Value, r.Expiry)
		}
	}
}

// The topic's default_ttl_ms applies to records without a header of
// their own; a header overrides it.
func TestTTLTopicDefault(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.DefinePolicy(ctx, "short", map[string]metadata.PolicyValue{metadata.FieldDefaultTTL: {Int: 1000}}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	name := "short"
	if err := b.BindTopicPolicy(ctx, "t", &name); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "t", []Record{ttlRecord("a", "default", ""), ttlRecord("a", "own", "60000")}); err != nil {
		t.Fatal(err)
	}
	batches := routeBatches(t, b, "t", []Record{ttlRecord("a", "v2-default", "")}, segment.CodecNone)
	if _, err := produceBatches(t, b, "t", batches); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	got, _ := fetchAll(t, b, "t", nil)
	sameValues(t, "after the default TTL", got, "own")
}

// The client's timestamp plays no part in the expiry.
func TestTTLIgnoresProducerTimestamp(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	now := clk.Now().UnixMilli()
	past, future := ttlRecord("a", "past", "1000"), ttlRecord("a", "future", "1000")
	past.Timestamp, future.Timestamp = 1, now+100*365*24*3600*1000
	if _, err := b.Produce(ctx, "t", []Record{past, future}); err != nil {
		t.Fatal(err)
	}
	batches := routeBatches(t, b, "t", []Record{{Key: []byte("a"), Value: []byte("v2-past"), Timestamp: 1,
		Headers: []segment.Header{hdr(retention.TTLHeader, "1000")}}}, segment.CodecNone)
	if _, err := produceBatches(t, b, "t", batches); err != nil {
		t.Fatal(err)
	}
	got, _ := fetchAll(t, b, "t", nil)
	sameValues(t, "before expiry", got, "past", "future", "v2-past")
	for _, r := range got {
		if r.Expiry != now+1000 {
			t.Fatalf("%s: expiry %d, want the node clock + TTL %d", r.Value, r.Expiry, now+1000)
		}
	}
	clk.Advance(time.Second)
	got, _ = fetchAll(t, b, "t", nil)
	sameValues(t, "after expiry", got)
}

// A client cannot forge the expiry header: it is removed, and replaced by
// the node's own on a record with a TTL.
func TestTTLForgedExpiryHeaderReplaced(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	now := clk.Now().UnixMilli()
	forged := func(v, ttl string) Record {
		r := ttlRecord("a", v, ttl)
		r.Headers = append(r.Headers, hdr(retention.ExpiryHeader, "1"), hdr("app", "x"))
		return r
	}
	if _, err := b.Produce(ctx, "t", []Record{forged("v1-none", ""), forged("v1-ttl", "5000")}); err != nil {
		t.Fatal(err)
	}
	batches := routeBatches(t, b, "t", []Record{forged("v2-none", ""), forged("v2-ttl", "5000")}, segment.CodecZstd)
	if _, err := produceBatches(t, b, "t", batches); err != nil {
		t.Fatal(err)
	}
	for _, wire := range []string{"v1", "v2"} {
		var got []Record
		if wire == "v1" {
			got, _ = fetchAll(t, b, "t", nil)
		} else {
			got, _, _ = fetchAllBatches(t, b, "t", nil)
		}
		sameValues(t, wire+": forged expiry does not hide records", got, "v1-none", "v1-ttl", "v2-none", "v2-ttl")
		for i, r := range got {
			n := 0
			for _, h := range r.Headers {
				if string(h.Key) == retention.ExpiryHeader {
					n++
				}
			}
			app, _ := headerValue(r, "app")
			switch {
			case app != "x":
				t.Fatalf("%s record %d lost its own header", wire, i)
			case n != 0:
				t.Fatalf("%s record %d kept a client's expiry header", wire, i)
			case i%2 == 0 && r.Expiry != 0:
				t.Fatalf("%s record %d: expiry %d; want none", wire, i, r.Expiry)
			case i%2 == 1 && r.Expiry != now+5000:
				t.Fatalf("%s record %d: expiry %d; want %d", wire, i, r.Expiry, now+5000)
			}
		}
	}
}

// A v2 batch on a topic without TTL, with no reserved header, is stored
// and served as the producer built it. A TTL batch is served as stored
// until one of its records expires, then filtered.
func TestTTLBatchesVerbatimUntilExpiry(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	plain := routeBatches(t, b, "t", keyedRecords(2, 5, 0), segment.CodecZstd)
	sent := bytes.Clone(plain[0].Batch)
	if _, err := produceBatches(t, b, "t", plain); err != nil {
		t.Fatal(err)
	}
	var mixed []Record
	for i := 0; i < 6; i++ {
		ttl := ""
		if i%2 == 0 {
			ttl = "1000"
		}
		mixed = append(mixed, ttlRecord("m", "m"+strconv.Itoa(i), ttl))
	}
	if _, err := produceBatches(t, b, "t", routeBatches(t, b, "t", mixed, segment.CodecZstd)); err != nil {
		t.Fatal(err)
	}
	_, got, _ := fetchAllBatches(t, b, "t", nil)
	if len(got) != 2 || !bytes.Equal(got[0], sent) {
		t.Fatalf("%d batches; the plain batch served as produced: %v", len(got), len(got) > 0 && bytes.Equal(got[0], sent))
	}
	stamped := got[1]
	if h, _ := segment.ParseHeader(stamped); h.Codec() != segment.CodecZstd || !h.HasExpiry() || h.MaxExpiry != 0 {
		t.Fatalf("stamped batch header %+v: want zstd, the expiry flag, max expiry 0 (some records never expire)", h)
	}
	clk.Advance(999 * time.Millisecond)
	_, again, _ := fetchAllBatches(t, b, "t", nil)
	if len(again) != 2 || !bytes.Equal(again[1], stamped) {
		t.Fatal("a batch none of whose records expired was not served as stored")
	}
	clk.Advance(time.Millisecond)
	recs, after, _ := fetchAllBatches(t, b, "t", nil)
	if len(after) != 2 || !bytes.Equal(after[0], sent) {
		t.Fatal("the plain batch is no longer served as produced")
	}
	if h, _ := segment.ParseHeader(after[1]); h.Codec() != segment.CodecNone || h.RecordCount != 3 {
		t.Fatalf("filtered batch header %+v: want 3 records re-encoded", h)
	}
	sameValues(t, "after expiry", recs[10:], "m1", "m3", "m5")
}

// After a split, reads of the parent for each child's slice drop expired
// records and keep only the slice's keys.
func TestTTLWithSliceFilterAfterSplit(t *testing.T) {
	b, clk := openTTL(t, Config{})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	want := map[string][]string{}
	for i := 0; i < 200; i++ {
		k := "k" + strconv.Itoa(i%16)
		ttl := ""
		if i%3 == 0 {
			ttl = "1000"
		} else {
			want[k] = append(want[k], strconv.Itoa(i))
		}
		recs = append(recs, ttlRecord(k, strconv.Itoa(i), ttl))
	}
	if _, err := b.Produce(ctx, "t", recs); err != nil {
		t.Fatal(err)
	}
	_, routes, _ := b.Routes("t")
	if _, err := b.SplitRange(ctx, "t", routes[0].Range); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	for _, wire := range []string{"v1", "v2"} {
		var got []Record
		if wire == "v1" {
			got, _ = fetchAll(t, b, "t", nil)
		} else {
			got, _, _ = fetchAllBatches(t, b, "t", nil)
		}
		per := map[string][]string{}
		for _, r := range got {
			per[string(r.Key)] = append(per[string(r.Key)], string(r.Value))
		}
		for k, w := range want {
			if strconv.Quote(join(per[k])) != strconv.Quote(join(w)) {
				t.Fatalf("%s: key %s read %v, want %v", wire, k, per[k], w)
			}
		}
		if len(got) != 200-67 {
			t.Fatalf("%s: %d records, want %d", wire, len(got), 200-67)
		}
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for _, x := range s {
		b.WriteString(x)
		b.WriteByte(',')
	}
	return b.String()
}

// A node-wide default TTL applies to topics bound to no policy.
func TestTTLNodeDefault(t *testing.T) {
	b, clk := openTTL(t, Config{Retention: retention.Defaults{retention.FieldDefaultTTL: {Int: 1000}}})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "t", []Record{ttlRecord("a", "default", ""), ttlRecord("a", "own", "60000")}); err != nil {
		t.Fatal(err)
	}
	got, _ := fetchAll(t, b, "t", nil)
	sameValues(t, "before the default TTL", got, "default", "own")
	clk.Advance(time.Second)
	got, _ = fetchAll(t, b, "t", nil)
	sameValues(t, "after the default TTL", got, "own")
}
