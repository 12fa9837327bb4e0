package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// Produce benchmarks: 128-byte records over 1000 keys into a topic of
// four ranges on an in-process node (which shares the machine's CPUs with
// the client), through a Producer with its defaults and through
// Client.Produce with 100 records per call. ns/op and MB/s are per
// record, acknowledged (fsynced) included.
//
//	go test ./pkg/client -run XXX -bench 'Produce' -benchtime 200000x

const benchValueSize = 128

func benchRecords(n int) []client.Record { return benchRecordsKeyed(n, 1000) }

// benchRecordsKeyed is benchRecords with keys over keys values.
func benchRecordsKeyed(n, keys int) []client.Record {
	recs := make([]client.Record, n)
	for i := range recs {
		v := fmt.Appendf(nil, `{"user":%d,"action":"click","page":"/product/%d","session":"%08x"}`, i%1000, i%5000, i*2654435761)
		for len(v) < benchValueSize {
			v = append(v, ' ')
		}
		recs[i] = client.Record{Key: fmt.Appendf(nil, "user-%d", i%keys), Value: v[:benchValueSize]}
	}
	return recs
}

func benchProducer(b *testing.B, version int, codec client.Codec) {
	benchProducerRanges(b, version, codec, 4, 1000)
}

// benchProducerRanges is benchProducer into a topic of ranges ranges,
// with keys over keys values.
func benchProducerRanges(b *testing.B, version int, codec client.Codec, ranges, keys int) {
	n := clienttest.Start(b)
	c := n.Client(b, "admin", "admin123", client.WithWireVersion(version))
	if c.WireVersion() != version {
		b.Fatalf("wire version %d, want %d", c.WireVersion(), version)
	}
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", client.WithRanges(ranges)); err != nil {
		b.Fatal(err)
	}
	recs := benchRecordsKeyed(100_000, keys)
	p := client.NewProducer(c, client.ProducerOptions{Compression: codec})
	var failed atomic.Int64
	promise := func(_ client.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	b.SetBytes(benchValueSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Produce(ctx, "bench", recs[i%len(recs)], promise)
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if err := p.Close(ctx); err != nil || failed.Load() > 0 {
		b.Fatalf("close: %v, %d failed", err, failed.Load())
	}
}

func benchSync(b *testing.B, version int) {
	n := clienttest.Start(b)
	c := n.Client(b, "admin", "admin123", client.WithWireVersion(version))
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench", client.WithRanges(4)); err != nil {
		b.Fatal(err)
	}
	const per = 100
	recs := benchRecords(10_000)
	b.SetBytes(benchValueSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += per {
		j := (i / per * per) % len(recs)
		if _, err := c.Produce(ctx, "bench", recs[j:j+min(per, b.N-i)]...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProduceV1(b *testing.B) {
	b.Run("producer", func(b *testing.B) { benchProducer(b, 1, client.CompressionNone) })
	b.Run("sync100", func(b *testing.B) { benchSync(b, 1) })
}

func BenchmarkProduceV2(b *testing.B) {
	b.Run("producer", func(b *testing.B) { benchProducer(b, 2, client.CompressionNone) })
	b.Run("producer-1024-ranges", func(b *testing.B) { benchProducerRanges(b, 2, client.CompressionNone, 1024, 100_000) })
	b.Run("producer-zstd", func(b *testing.B) { benchProducer(b, 2, client.CompressionZstd) })
	b.Run("producer-s2", func(b *testing.B) { benchProducer(b, 2, client.CompressionS2) })
	b.Run("producer-lz4", func(b *testing.B) { benchProducer(b, 2, client.CompressionLZ4) })
	b.Run("sync100", func(b *testing.B) { benchSync(b, 2) })
}

// Consume benchmarks: the topic of benchRecords (128-byte values) read
// whole, over and over, from an in-process node: with Fetch (a decoded
// Record per record), FetchBatches (walked with Each, pages released)
// and a Fetcher (the next fetch sent on the head of the previous answer).
// ns/op and MB/s are per record read.
//
//	go test ./pkg/client -run XXX -bench 'Consume' -benchtime 2000000x
func benchConsume(b *testing.B, version int, read func(c *client.Client, cursor string) (int, string)) {
	n := clienttest.Start(b)
	c := n.Client(b, "admin", "admin123", client.WithWireVersion(version))
	ctx := context.Background()
	if err := c.CreateTopic(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	recs := benchRecords(10_000)
	for range 20 {
		if _, err := c.Produce(ctx, "bench", recs...); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(benchValueSize)
	b.ReportAllocs()
	b.ResetTimer()
	cursor := ""
	for got := 0; got < b.N; {
		n, next := read(c, cursor)
		if n == 0 {
			next = "" // the end of the topic: from its start again
		}
		got += n
		cursor = next
	}
}

func BenchmarkConsumeV2(b *testing.B) {
	b.Run("fetch", func(b *testing.B) {
		benchConsume(b, 2, func(c *client.Client, cursor string) (int, string) {
			page, err := c.Fetch(context.Background(), "bench", client.FetchOptions{Cursor: cursor})
			if err != nil {
				b.Fatal(err)
			}
			return len(page.Records), page.Cursor
		})
	})
	b.Run("fetchbatches", func(b *testing.B) {
		benchConsume(b, 2, func(c *client.Client, cursor string) (int, string) {
			page, err := c.FetchBatches(context.Background(), "bench", client.FetchOptions{Cursor: cursor})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			if err := page.Each(func(*client.Record) { n++ }); err != nil {
				b.Fatal(err)
			}
			page.Release()
			return n, page.Cursor
		})
	})
	b.Run("fetcher", func(b *testing.B) {
		var f *client.Fetcher
		defer func() {
			if f != nil {
				f.Close()
			}
		}()
		benchConsume(b, 2, func(c *client.Client, cursor string) (int, string) {
			if f == nil || cursor == "" {
				if f != nil {
					f.Close()
				}
				f = c.NewFetcher("bench", client.FetchOptions{})
			}
			page, err := f.Next(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			if err := page.Each(func(*client.Record) { n++ }); err != nil {
				b.Fatal(err)
			}
			page.Release()
			return n, page.Cursor
		})
	})
}

func BenchmarkConsumeV1(b *testing.B) {
	benchConsume(b, 1, func(c *client.Client, cursor string) (int, string) {
		page, err := c.Fetch(context.Background(), "bench", client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			b.Fatal(err)
		}
		return len(page.Records), page.Cursor
	})
}
