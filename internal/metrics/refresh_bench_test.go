package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
)

// BenchmarkTopicFigures10kRanges measures the per-topic figures of a
// refresh on a node with 10 topics of 1,024 ranges: LedTopics, which
// adds up counts under the metadata lock, against ListTopics, which
// builds every topic's full description first.
func BenchmarkTopicFigures10kRanges(b *testing.B) {
	ctx := context.Background()
	br, err := broker.Open(ctx, broker.Config{DataDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	for i := range 10 {
		if err := br.CreateTopic(ctx, fmt.Sprintf("t%d", i), 16, 1024); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("LedTopics", func(b *testing.B) {
		for b.Loop() {
			if got := br.LedTopics(); len(got) != 10 || got[0].Ranges != 1024 {
				b.Fatalf("%d topics", len(got))
			}
		}
	})
	b.Run("ListTopics", func(b *testing.B) {
		for b.Loop() {
			br.ListTopics()
		}
	})
}
