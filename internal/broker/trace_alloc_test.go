package broker

import (
	"context"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/tracing/tracingtest"
	"github.com/malachi-log/malachi/internal/vfs"
	"go.opentelemetry.io/otel/trace"
)

// openTraced opens a single node on the in-memory filesystem with tr
// (nil: tracing off) and a topic of one range.
func openTraced(t testing.TB, tr *tracing.Tracer) *Broker {
	t.Helper()
	b, err := Open(context.Background(), Config{DataDir: "/d", FS: vfs.NewMem(), Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic(context.Background(), "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	return b
}

func tracerAt(t testing.TB, sample float64) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(tracing.Config{Endpoint: tracingtest.NewReceiver(t).Endpoint(), Sample: sample, Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.ShutdownWithin(5 * time.Second) })
	return tr
}

// produceAllocs counts the allocations of a produce of one record made
// as a client request (a span begun by tr) through b.
func produceAllocs(t *testing.T, tr *tracing.Tracer, b *Broker) float64 {
	recs := []Record{{Key: []byte("k"), Value: []byte("v")}}
	return testing.AllocsPerRun(200, func() {
		ctx, request := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
		if _, err := b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
		request.End()
	})
}

// TestProduceTracingAllocations: a produce not sampled (tracing on at
// ratio 0) allocates what it does with tracing off, and a sampled one
// more (its spans, which the count would show were they started for
// every produce).
func TestProduceTracingAllocations(t *testing.T) {
	unsampledTracer, sampledTracer := tracerAt(t, 0), tracerAt(t, 1)
	off := produceAllocs(t, nil, openTraced(t, nil))
	unsampled := produceAllocs(t, unsampledTracer, openTraced(t, unsampledTracer))
	sampled := produceAllocs(t, sampledTracer, openTraced(t, sampledTracer))
	t.Logf("allocations per produce: off %v, not sampled %v, sampled %v", off, unsampled, sampled)
	if unsampled != off || sampled <= off {
		t.Fatalf("allocations per produce: off %v, not sampled %v, sampled %v: want the first two equal, the third above", off, unsampled, sampled)
	}
}

// BenchmarkProduceTracing is one produce of one record on a single node,
// as a client request, with tracing off, on at 1% and on for every
// produce.
func BenchmarkProduceTracing(bm *testing.B) {
	for _, c := range []struct {
		name   string
		sample float64
		on     bool
	}{{"off", 0, false}, {"sample-1pct", 0.01, true}, {"sample-all", 1, true}} {
		bm.Run(c.name, func(bm *testing.B) {
			var tr *tracing.Tracer
			if c.on {
				tr = tracerAt(bm, c.sample)
			}
			b := openTraced(bm, tr)
			recs := []Record{{Key: []byte("k"), Value: []byte("v")}}
			bm.ReportAllocs()
			for bm.Loop() {
				ctx, request := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
				if _, err := b.Produce(ctx, "t", recs); err != nil {
					bm.Fatal(err)
				}
				request.End()
			}
		})
	}
}

// fetchAllocs counts the allocations of a fetch of five records made as
// a client request (a span begun by tr) through b.
func fetchAllocs(t *testing.T, tr *tracing.Tracer, b *Broker) float64 {
	for range 10 {
		if _, err := b.Produce(context.Background(), "t", []Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	return testing.AllocsPerRun(200, func() {
		ctx, request := tr.Begin(context.Background(), tracing.SpanConsume, trace.SpanKindServer)
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 5})
		if err != nil || len(p.Records) != 5 {
			t.Fatalf("fetch: %d records, %v", len(p.Records), err)
		}
		request.End()
	})
}

// TestFetchTracingAllocations is TestProduceTracingAllocations for a
// fetch.
func TestFetchTracingAllocations(t *testing.T) {
	unsampledTracer, sampledTracer := tracerAt(t, 0), tracerAt(t, 1)
	off := fetchAllocs(t, nil, openTraced(t, nil))
	unsampled := fetchAllocs(t, unsampledTracer, openTraced(t, unsampledTracer))
	sampled := fetchAllocs(t, sampledTracer, openTraced(t, sampledTracer))
	t.Logf("allocations per fetch: off %v, not sampled %v, sampled %v", off, unsampled, sampled)
	if unsampled != off || sampled <= off {
		t.Fatalf("allocations per fetch: off %v, not sampled %v, sampled %v: want the first two equal, the third above", off, unsampled, sampled)
	}
}
