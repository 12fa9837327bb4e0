package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/malachi-log/malachi/internal/tracing"
)

// defaultTraceSample is the ratio of new traces recorded once an
// endpoint is set: enough to follow slow produces on a busy node at a
// cost the benchmarks cannot tell from none (docs/operations.md).
const defaultTraceSample = 0.01

// traceFlushTimeout bounds the flush of the last spans when the node
// stops: a collector that does not answer must not hold the stop.
const traceFlushTimeout = 5 * time.Second

// tracingFlags are serve's OpenTelemetry settings. Tracing is off unless
// --otlp-endpoint is set.
type tracingFlags struct {
	endpoint string
	sample   float64
}

func (t *tracingFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&t.endpoint, "otlp-endpoint", envString("MALACHI_OTLP_ENDPOINT", ""), "export traces by OTLP over HTTP to this collector (http://host:4318, path /v1/traces by default); empty: tracing off (env MALACHI_OTLP_ENDPOINT)")
	fl.Float64Var(&t.sample, "trace-sample", envFloat("MALACHI_TRACE_SAMPLE", defaultTraceSample), "ratio of new traces recorded, 0 to 1; a request traced by another node is always followed (env MALACHI_TRACE_SAMPLE)")
}

// open builds the node's tracer; without an endpoint it is off.
func (t *tracingFlags) open(node string, logger *slog.Logger) (*tracing.Tracer, error) {
	if !(t.sample >= 0 && t.sample <= 1) { // NaN too
		return nil, usageErr("--trace-sample %v: want a ratio from 0 to 1", t.sample)
	}
	tr, err := tracing.New(tracing.Config{Endpoint: t.endpoint, Sample: t.sample, Node: node})
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	if tr.On() {
		logger.Info("tracing on", "otlp_endpoint", tracing.RedactEndpoint(t.endpoint), "sample", t.sample)
		setOtelErrorHandler.Do(func() {
			otel.SetErrorHandler(&exportErrors{logger: logger, every: exportErrorInterval, now: time.Now})
		})
	}
	return tr, nil
}

// setOtelErrorHandler installs the process's OpenTelemetry error handler
// once: it is a global of the SDK, shared by every tracer.
var setOtelErrorHandler sync.Once

// exportErrorInterval is the least time between two logged exporter
// errors: a collector that is down fails every batch.
const exportErrorInterval = time.Minute

// exportErrors logs the SDK's errors (failed exports, mostly) at most
// once per interval, with the count of those left unlogged since.
type exportErrors struct {
	logger *slog.Logger
	every  time.Duration
	now    func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Handle is otel.ErrorHandler's.
func (e *exportErrors) Handle(err error) {
	e.mu.Lock()
	now := e.now()
	if !e.last.IsZero() && now.Sub(e.last) < e.every {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	suppressed := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.logger.Warn("tracing: exporting spans failed", "err", err, "unlogged_errors", suppressed)
}

// closeTracer flushes the spans not exported yet, within traceFlushTimeout.
func closeTracer(tr *tracing.Tracer, logger *slog.Logger) {
	if err := tr.ShutdownWithin(traceFlushTimeout); err != nil {
		logger.Warn("tracing: the last spans were not all exported", "err", err)
	}
}

// envFloat reads a decimal number from the environment.
func envFloat(name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		badEnv(name, v, "a number such as 0.01")
		return def
	}
	return x
}
