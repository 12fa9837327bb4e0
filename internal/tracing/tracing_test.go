package tracing_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/tracing/tracingtest"
)

// TestOffAllocatesNothing runs what the produce and fetch paths do per
// request with tracing off, or on for a request not sampled, and counts
// the allocations: none.
func TestOffAllocatesNothing(t *testing.T) {
	off, err := tracing.New(tracing.Config{})
	if err != nil {
		t.Fatal(err)
	}
	recv := tracingtest.NewReceiver(t)
	unsampled := newTracer(t, recv, 0, "node-1")
	for name, tr := range map[string]*tracing.Tracer{"nil": nil, "no endpoint": off, "on, not sampled": unsampled} {
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			c, span := tr.Begin(ctx, tracing.SpanProduce, trace.SpanKindServer)
			if span.IsRecording() {
				span.SetAttributes(tracing.AttrTopic.String("t"), tracing.AttrRecords.Int(1))
			}
			c2, span2 := tr.StartLinked(c, tracing.SpanForward, trace.SpanKindClient, nil)
			_ = trace.SpanContextFromContext(c2)
			if s := trace.SpanFromContext(c2); s.IsRecording() {
				s.SetAttributes(tracing.AttrForwarded.Bool(true))
			}
			tracing.End(span2, errors.ErrUnsupported)
			tracing.End(span, nil)
		})
		if allocs != 0 {
			t.Errorf("%s tracer: %v allocations per request, want 0", name, allocs)
		}
	}
	if off.On() || !unsampled.On() {
		t.Error("On does not tell a tracer without an endpoint from one with")
	}
}

// TestOffLeavesTheCallersSpan checks that a tracer that is off neither
// hands out nor ends the span already in the context.
func TestOffLeavesTheCallersSpan(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	on := newTracer(t, recv, 1, "node-1")
	ctx, parent := on.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
	var off *tracing.Tracer
	c, span := off.Start(ctx, tracing.SpanRoute, trace.SpanKindInternal)
	if c != ctx || span.IsRecording() {
		t.Fatal("an off tracer changed the context or gave a recording span")
	}
	span.End()
	if !parent.IsRecording() {
		t.Fatal("ending an off tracer's span ended the caller's")
	}
	parent.End()
}

func newTracer(t *testing.T, recv *tracingtest.Receiver, sample float64, node string) *tracing.Tracer {
	t.Helper()
	tr, err := tracing.New(tracing.Config{Endpoint: recv.Endpoint(), Sample: sample, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.ShutdownWithin(5 * time.Second) })
	return tr
}

// TestExportsOverOTLP sends spans through the real OTLP/HTTP exporter to
// the receiver: names, the node, parents, errors and links arrive.
func TestExportsOverOTLP(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	tr := newTracer(t, recv, 1, "node-7")
	ctx, root := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
	root.SetAttributes(tracing.AttrTopic.String("orders"))
	_, other := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
	_, child := tr.StartLinked(ctx, tracing.SpanForward, trace.SpanKindClient, []trace.Link{{SpanContext: other.SpanContext()}})
	tracing.End(child, errors.New("node-2 unreachable"))
	other.End()
	root.End()
	if err := tr.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 3 {
		t.Fatalf("received %d spans, want 3: %+v", len(spans), spans)
	}
	byID := map[string]tracingtest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
		if s.Node != "node-7" {
			t.Errorf("span %s from node %q", s.Name, s.Node)
		}
	}
	fwd := byID[child.SpanContext().SpanID().String()]
	if fwd.Name != tracing.SpanForward || fwd.ParentID != root.SpanContext().SpanID().String() || !fwd.Error {
		t.Errorf("forward span %+v", fwd)
	}
	if len(fwd.Links) != 1 || fwd.Links[0] != other.SpanContext().SpanID().String() {
		t.Errorf("forward span links %v", fwd.Links)
	}
	if r := byID[root.SpanContext().SpanID().String()]; r.Attrs["malachi.topic"] != "orders" || r.ParentID != "" {
		t.Errorf("root span %+v", r)
	}
}

// TestSampling: a trace is begun at the ratio and followed wherever its
// parent was sampled, and a step never begins a trace of its own.
func TestSampling(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	never, always := newTracer(t, recv, 0, "node-1"), newTracer(t, recv, 1, "node-2")
	bg := context.Background()
	remote := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(bg, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: flags, Remote: true}))
	}
	for _, c := range []struct {
		what  string
		start func() trace.Span
		want  bool
	}{
		{"a new trace at ratio 0", func() trace.Span { _, s := never.Begin(bg, tracing.SpanProduce, trace.SpanKindServer); return s }, false},
		{"a new trace at ratio 1", func() trace.Span { _, s := always.Begin(bg, tracing.SpanProduce, trace.SpanKindServer); return s }, true},
		{"a step without a parent", func() trace.Span { _, s := always.Start(bg, tracing.SpanAppend, trace.SpanKindServer); return s }, false},
		{"a step under a sampled remote parent, ratio 0", func() trace.Span {
			_, s := never.Start(remote(trace.FlagsSampled), tracing.SpanAppend, trace.SpanKindServer)
			return s
		}, true},
		{"a request under a sampled remote parent, ratio 0", func() trace.Span {
			_, s := never.Begin(remote(trace.FlagsSampled), tracing.SpanProduce, trace.SpanKindServer)
			return s
		}, true},
		{"a request under an unsampled remote parent, ratio 1", func() trace.Span {
			_, s := always.Begin(remote(0), tracing.SpanProduce, trace.SpanKindServer)
			return s
		}, false},
	} {
		span := c.start()
		if span.IsRecording() != c.want {
			t.Errorf("%s: recording %v, want %v", c.what, span.IsRecording(), c.want)
		}
		if c.want && !span.SpanContext().IsValid() {
			t.Errorf("%s: no trace id", c.what)
		}
		span.End()
	}
}

// TestSamplingRatio: Begin samples about the configured share of new
// traces.
func TestSamplingRatio(t *testing.T) {
	tr := newTracer(t, tracingtest.NewReceiver(t), 0.1, "node-1")
	const n = 20000
	sampled := 0
	for range n {
		_, span := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
		if span.IsRecording() {
			sampled++
		}
		span.End()
	}
	// 0.1 of 20,000 is 2,000 with a standard deviation of about 42.
	if sampled < 1700 || sampled > 2300 {
		t.Fatalf("%d of %d new traces sampled at 0.1", sampled, n)
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, cfg := range []tracing.Config{
		{Endpoint: "http://127.0.0.1:4318", Sample: 1.5},
		{Endpoint: "http://127.0.0.1:4318", Sample: -0.1},
		{Endpoint: "http://127.0.0.1:4318", Sample: math.NaN()},
		{Endpoint: "ftp://collector:4318", Sample: 0.5},
		{Endpoint: "http://", Sample: 0.5},
	} {
		if _, err := tracing.New(cfg); err == nil {
			t.Errorf("%+v was taken", cfg)
		}
	}
	for _, ep := range []string{"127.0.0.1:4318", "http://collector:4318", "https://collector/v1/traces"} {
		tr, err := tracing.New(tracing.Config{Endpoint: ep, Sample: 0.01})
		if err != nil || !tr.On() {
			t.Errorf("%s: %v", ep, err)
			continue
		}
		tr.ShutdownWithin(time.Second)
	}
}

// TestShutdownIsBounded: a collector that never answers does not hold a
// node's stop past the bound.
func TestShutdownIsBounded(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	recv.Stall(t)
	tr := newTracer(t, recv, 1, "node-1")
	_, span := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
	span.End()
	if err := tr.ShutdownWithin(200 * time.Millisecond); err == nil {
		t.Fatal("shutdown reported a flush a stalled collector could not have taken")
	}
}

// TestAttributeValuesAreBounded: a value a client chose (a topic name, an
// error text) is exported cut to MaxAttributeBytes.
func TestAttributeValuesAreBounded(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	tr := newTracer(t, recv, 1, "node-1")
	_, span := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
	span.SetAttributes(tracing.AttrTopic.String(strings.Repeat("t", 10_000)))
	span.End()
	if err := tr.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 1 {
		t.Fatalf("received %d spans", len(spans))
	}
	if got := len(spans[0].Attrs["malachi.topic"]); got != tracing.MaxAttributeBytes {
		t.Fatalf("topic attribute of %d bytes, want %d", got, tracing.MaxAttributeBytes)
	}
}

func TestRedactEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:secret@collector:4318/v1/traces": "http://collector:4318/v1/traces",
		"https://token@collector":                     "https://collector",
		"user:secret@collector:4318":                  "collector:4318",
		"collector:4318":                              "collector:4318",
		"http://collector:4318":                       "http://collector:4318",
	} {
		if got := tracing.RedactEndpoint(in); got != want {
			t.Errorf("RedactEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStalledExportEnds: after a shutdown that gave up on a collector
// that never answers, the export still under way (its retries included)
// ends by itself within the export bound, leaving no exporter goroutine.
func TestStalledExportEnds(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	recv.Stall(t)
	tr, err := tracing.New(tracing.Config{Endpoint: recv.Endpoint(), Sample: 1, Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Begin(context.Background(), tracing.SpanProduce, trace.SpanKindServer)
	span.End()
	if err := tr.ShutdownWithin(100 * time.Millisecond); err == nil {
		t.Fatal("shutdown reported a flush a stalled collector could not have taken")
	}
	// The bound is ExportTimeout; the deadline leaves it room on a busy
	// machine, and is far below the SDK's defaults (30 s, a minute of
	// retries).
	deadline := time.After(3 * tracing.ExportTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for exporting() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("an export is still running %v after shutdown", 3*tracing.ExportTimeout)
		}
	}
}

// exporting reports whether a goroutine is inside the OTLP exporter or
// the batch span processor.
func exporting() bool {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	return strings.Contains(stacks, "otlptracehttp") || strings.Contains(stacks, "sdk/trace.(*batchSpanProcessor)")
}
