package broker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// A page reads at most scanFactor x FetchMaxBytes of segments, delivered
// or passed over: a long run of expired records that retention cannot
// reclaim (a segment also holding a record without a TTL) costs a reader
// several short pages, each answered at once with its cursor moved, even
// on a long poll, and never one request that reads all of it. Every
// unexpired record still comes, in order.
func TestPageScanIsBounded(t *testing.T) {
	b, clk := openTTL(t, Config{FetchMaxBytes: 4 << 10, SegmentMaxBytes: 64 << 20})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat(".", 60)
	for i := 0; i < 20; i++ {
		var recs []Record
		for j := 0; j < 100; j++ {
			recs = append(recs, ttlRecord("k", strconv.Itoa(i*100+j)+pad, "1"))
		}
		if _, err := b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Produce(ctx, "t", []Record{{Key: []byte("k"), Value: []byte("last")}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // every record but the last has expired
	for _, v2 := range []bool{false, true} {
		var (
			cur   *string
			got   []string
			pages int
		)
		for len(got) == 0 {
			if pages++; pages > 100 {
				t.Fatalf("v2=%v: no record after %d pages", v2, pages)
			}
			// A long poll on a manual clock that nobody advances: were a
			// cut page held instead of answered, this would never return.
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			req := FetchRequest{Topic: "t", Cursor: cur, Max: 10, Wait: time.Minute}
			var recs []Record
			if v2 {
				p, err := b.FetchBatches(pctx, FetchBatchesRequest{FetchRequest: req})
				if err != nil {
					cancel()
					t.Fatalf("v2 page %d: %v", pages, err)
				}
				for _, rb := range p.Batches {
					if recs, err = segment.DecodeRecords(rb.Batch, recs); err != nil {
						t.Fatal(err)
					}
				}
				cur = p.Cursor
			} else {
				p, err := b.Fetch(pctx, req)
				if err != nil {
					cancel()
					t.Fatalf("page %d: %v", pages, err)
				}
				recs, cur = p.Records, p.Cursor
			}
			cancel()
			for _, r := range recs {
				got = append(got, string(r.Value))
			}
		}
		if len(got) != 1 || got[0] != "last" {
			t.Fatalf("v2=%v: read %v, want only the unexpired record", v2, got)
		}
		// 2,000 records of ~80 bytes are ~160 KiB; a page reads ~32 KiB.
		if pages < 3 {
			t.Fatalf("v2=%v: the expired run was read in %d pages; the scan bound did not cut it", v2, pages)
		}
	}
}
