// Package tracing makes a node's OpenTelemetry tracer and holds the names
// of its spans and attributes. Each node builds its own provider (never
// the otel global: several nodes may run in one process), exporting by
// OTLP over HTTP when an endpoint is set. Without one, the tracer is off:
// Begin and Start hand back the caller's context and a span that records
// nothing, without allocating, so the produce and fetch paths cost what
// they did before tracing existed; a request the tracer did not sample
// costs the same.
package tracing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Span names. The first four are the original system's; the others name
// the steps it did not trace.
const (
	SpanProduce       = "malachi.produce"            // a produce request, accepted to answered (server)
	SpanConsume       = "malachi.consume"            // a fetch request, accepted to answered (server)
	SpanBrokerProduce = "malachi.broker.produce"     // routing and enqueueing a produce, to its durability
	SpanCommit        = "malachi.replication.commit" // a replicated batch waiting for its quorum fsync
	SpanRoute         = "malachi.route"              // one range's share of a produce: local append or forward
	SpanForward       = "malachi.forward"            // one call carrying forwarded produces to a range's primary
	SpanAppend        = "malachi.append"             // a forwarded produce appended on the range's primary
	SpanReplicate     = "malachi.replicate"          // a batch stamped and shipped to a segment's followers
	SpanFollow        = "malachi.replication.append" // a follower taking a shipped batch, to its fsync
	SpanFsync         = "malachi.storage.fsync"      // a batch of a single-copy segment waiting for its fsync
	SpanRead          = "malachi.read"               // one page read across the reader's ranges
)

// EventClientGone marks a request's span whose client left before the
// answer: the request did not fail, nobody waits for it any more.
const EventClientGone = "client gone"

// Attribute keys.
const (
	AttrTopic     = attribute.Key("malachi.topic")
	AttrRecords   = attribute.Key("malachi.records")
	AttrBytes     = attribute.Key("malachi.bytes")
	AttrRange     = attribute.Key("malachi.range")
	AttrSegment   = attribute.Key("malachi.segment")
	AttrNode      = attribute.Key("malachi.node") // the resource's: the node that recorded the span
	AttrPeer      = attribute.Key("malachi.peer") // the other node of a step between nodes
	AttrBatches   = attribute.Key("malachi.batches")
	AttrForwarded = attribute.Key("malachi.forwarded")
	AttrBase      = attribute.Key("malachi.base")
)

// ServiceName is the service the resource names.
const ServiceName = "malachi"

// MaxAttributeBytes bounds a span attribute's value: a topic name or an
// error text a client chose is cut there, not exported whole.
const MaxAttributeBytes = 256

// ExportTimeout bounds one export of a batch of spans, its retries
// included (retryMaxElapsed is less).
const ExportTimeout = 5 * time.Second

// retryMaxElapsed bounds the retries of one export to the collector.
const retryMaxElapsed = 4 * time.Second

// Config says where a node's spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP collector: a URL (http:// or https://,
	// the path defaulting to /v1/traces) or host:port (plain HTTP).
	// Empty turns tracing off.
	Endpoint string
	// Sample is the ratio of new traces recorded, in [0, 1] (Begin). A
	// request whose parent was sampled, here or on another node, is
	// always recorded.
	Sample float64
	// Node names this node in the resource (service.instance.id).
	Node string
	// Exporter, when set, replaces the OTLP exporter (and Endpoint need
	// not be set).
	Exporter sdktrace.SpanExporter
}

// Tracer is a node's tracer. The nil *Tracer and a Tracer made without an
// endpoint are off.
//
// A trace is sampled once, where a request enters the cluster (Begin),
// at the configured ratio; every later step (Start) is recorded only
// under a sampled span, local or from another node. A request not
// sampled therefore costs what it costs with tracing off: no span, no
// allocation, and no trace context on the frames between nodes.
type Tracer struct {
	t        trace.Tracer
	provider *sdktrace.TracerProvider
	sample   float64
}

// New builds the tracer cfg describes; Shutdown flushes and stops it.
func New(cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" && cfg.Exporter == nil {
		return &Tracer{}, nil
	}
	if !(cfg.Sample >= 0 && cfg.Sample <= 1) { // NaN too: it would sample everything
		return nil, fmt.Errorf("tracing: sample ratio %v is outside [0, 1]", cfg.Sample)
	}
	exp := cfg.Exporter
	if exp == nil {
		opts, err := endpointOptions(cfg.Endpoint)
		if err != nil {
			return nil, err
		}
		if exp, err = otlptracehttp.New(context.Background(), opts...); err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", ServiceName),
		attribute.String("service.instance.id", cfg.Node),
		AttrNode.String(cfg.Node),
	)
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = MaxAttributeBytes
	p := sdktrace.NewTracerProvider(
		// The batcher's queue is bounded (2048 spans); spans beyond it
		// are dropped, never waited for (the SDK counts them only for
		// its debug log). One export, retries included, ends within
		// ExportTimeout, so a collector that does not answer holds
		// neither the batcher nor Shutdown longer.
		sdktrace.WithBatcher(exp, sdktrace.WithExportTimeout(ExportTimeout)),
		sdktrace.WithSpanLimits(limits),
		// Begin and Start decide; the provider records what they start.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
		sdktrace.WithResource(res),
	)
	return &Tracer{t: p.Tracer("github.com/malachi-log/malachi"), provider: p, sample: cfg.Sample}, nil
}

// endpointOptions reads an endpoint as a URL or host:port.
func endpointOptions(endpoint string) ([]otlptracehttp.Option, error) {
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing: endpoint %q: %w", endpoint, err)
	}
	if u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("tracing: endpoint %q: want http://host:port[/path], https://... or host:port", endpoint)
	}
	path := u.Path
	if path == "" || path == "/" {
		path = "/v1/traces"
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path),
		otlptracehttp.WithTimeout(ExportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond,
			MaxInterval: 2 * time.Second, MaxElapsedTime: retryMaxElapsed})}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	return opts, nil
}

// RedactEndpoint is endpoint as it may be logged: without the user and
// password a URL may hold (the exporter does not send them either).
func RedactEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.User == nil {
		if i := strings.LastIndex(endpoint, "@"); i >= 0 {
			return endpoint[i+1:] // unparsable, or host:port with a user
		}
		return endpoint
	}
	u.User = nil
	return u.String()
}

// On reports whether spans may be recorded.
func (t *Tracer) On() bool { return t != nil && t.t != nil }

// offSpan is the span Start returns when off: it records nothing, and
// ending it does nothing (ctx's own span, which a caller may still end,
// is never handed out in its place).
var offSpan = trace.SpanFromContext(context.Background())

// Begin starts the span of a request entering the cluster (a client's
// produce or fetch): under ctx's span when it has one, as Start, else as
// the root of a new trace, sampled at the ratio. Not sampled, or off, it
// returns ctx unchanged and a span that records nothing, and allocates
// nothing.
func (t *Tracer) Begin(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !t.On() {
		return ctx, offSpan
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		return t.Start(ctx, name, kind)
	}
	if t.sample <= 0 || (t.sample < 1 && rand.Float64() >= t.sample) {
		return ctx, offSpan
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind))
}

// Start starts the span of a step of a request: a child of ctx's span,
// recorded when that span is sampled (here or on the node that sent the
// request). Otherwise, or off, it returns ctx unchanged and a span that
// records nothing, and allocates nothing.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !t.On() || !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, offSpan
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind))
}

// StartLinked is Start with links to other spans: a step done once for
// several requests (a forwarded call carrying several produces) is the
// child of the first and links the others.
func (t *Tracer) StartLinked(ctx context.Context, name string, kind trace.SpanKind, links []trace.Link) (context.Context, trace.Span) {
	if !t.On() || !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, offSpan
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithLinks(links...))
}

// Shutdown flushes the spans not exported yet and stops the exporter,
// within ctx.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ForceFlush exports the spans ended so far, within ctx.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil || t.provider == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// ShutdownWithin is Shutdown bounded by d: a collector that does not
// answer must not hold a node's stop.
func (t *Tracer) ShutdownWithin(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return t.Shutdown(ctx)
}

// End records err on span, when there is one and the span records, and
// ends it.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
