package broker

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// BenchmarkFetchManyRanges reads a topic of 100,000 keyed records from
// the start, at 1 to 1,024 ranges: the cost per record should not grow with
// the ranges. Records are produced in requests of 10,000 spread over the
// ranges, as a client batching per range stores them.
func BenchmarkFetchManyRanges(b *testing.B) {
	for _, ranges := range []int{1, 64, 256, 1024} {
		for _, v2 := range []bool{true, false} {
			b.Run(fmt.Sprintf("ranges=%d/v2=%v", ranges, v2), func(b *testing.B) {
				benchFetch(b, ranges, v2)
			})
		}
	}
}

func benchFetch(b *testing.B, ranges int, v2 bool) {
	br, err := Open(context.Background(), Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	if err := br.CreateTopic(ctx, "t", 16, ranges); err != nil {
		b.Fatal(err)
	}
	const records = 100_000
	value := make([]byte, 128)
	for i := 0; i < records; i += 10_000 {
		recs := make([]Record, 10_000)
		for j := range recs {
			recs[j] = Record{Key: []byte(strconv.Itoa((i + j) % 100_000)), Value: value}
		}
		if _, err := br.Produce(ctx, "t", recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		var cur *string
		for got := 0; got < records; {
			n := 0
			if v2 {
				p, err := br.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cur}})
				if err != nil {
					b.Fatal(err)
				}
				cur = p.Cursor
				for _, rb := range p.Batches {
					n += batchRecords(b, rb.Batch)
				}
				p.Release() // as the server does once the page is written
			} else {
				p, err := br.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: 1000})
				if err != nil {
					b.Fatal(err)
				}
				cur, n = p.Cursor, len(p.Records)
			}
			if n == 0 {
				b.Fatalf("an empty page after %d of %d records", got, records)
			}
			got += n
		}
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "rec/s")
}

func batchRecords(b *testing.B, batch []byte) int {
	h, err := segment.ParseHeader(batch)
	if err != nil {
		b.Fatal(err)
	}
	return int(h.RecordCount)
}
