package broker

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
)

// wideBroker is a broker holding topic "wide" of 100,000 ranges (1,024
// initial ones split until there are that many), built once per test
// binary: the splits go straight to the metadata, as a split of a range
// with no data comes to.
var wideBroker = sync.OnceValues(func() (*Broker, error) {
	dir, err := os.MkdirTemp("", "malachi-describe-bench-")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	b, err := Open(ctx, Config{DataDir: dir})
	if err != nil {
		return nil, err
	}
	if err := b.CreateTopic(ctx, "wide", 24, 1024); err != nil {
		return nil, err
	}
	next, ranges := uint64(0), 1024
	for ranges < 100_000 {
		p, err := b.DescribeTopicPage("wide", PageQuery{After: next, Max: 1, Scan: 1 << 20, ActiveOnly: true})
		if err != nil {
			return nil, err
		}
		next = p.Ranges[0].ID
		if _, err := b.apply(ctx, metadata.Command{Kind: "split_range", Range: next}); err != nil {
			return nil, err
		}
		ranges += 2
	}
	return b, nil
})

func benchWide(b *testing.B) *Broker {
	br, err := wideBroker()
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// BenchmarkDescribeTopicPage is one page of 1,000 ranges from the middle
// of a topic of 100,000: it costs about the page.
func BenchmarkDescribeTopicPage(b *testing.B) {
	br := benchWide(b)
	first, err := br.DescribeTopicPage("wide", PageQuery{Max: 1, Scan: 1})
	if err != nil {
		b.Fatal(err)
	}
	after := first.Ranges[0].ID + 50_000
	b.ReportAllocs()
	for b.Loop() {
		p, err := br.DescribeTopicPage("wide", PageQuery{After: after, Max: 1000, Scan: 16_000, MaxSegments: 15_000, Segments: 15_000})
		if err != nil || len(p.Ranges) != 1000 {
			b.Fatalf("%d ranges, %v", len(p.Ranges), err)
		}
	}
}

// BenchmarkDescribeTopicPageActive is a page of active ranges only.
func BenchmarkDescribeTopicPageActive(b *testing.B) {
	br := benchWide(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.DescribeTopicPage("wide", PageQuery{Max: 1000, Scan: 8_000, ActiveOnly: true, MaxSegments: 15_000, Segments: 15_000}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDescribeTopicWhole is the whole description, what version 1
// and 2 of describe_topic build, for comparison.
func BenchmarkDescribeTopicWhole(b *testing.B) {
	br := benchWide(b)
	b.ReportAllocs()
	for b.Loop() {
		d, err := br.DescribeTopic("wide")
		if err != nil || len(d.Ranges) < 100_000 {
			b.Fatalf("%d ranges, %v", len(d.Ranges), err)
		}
	}
}
