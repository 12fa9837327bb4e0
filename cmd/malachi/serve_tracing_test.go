package main

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/tracing/tracingtest"
)

// TestServeExportsTraces runs `malachi serve --otlp-endpoint` as a
// process: a produce and a fetch through it reach the collector as
// spans naming the node, and the spans still held when it stops are
// flushed before it exits.
func TestServeExportsTraces(t *testing.T) {
	t.Parallel()
	recv := tracingtest.NewReceiver(t)
	c := newCLI(t, "")
	addr, proc := startServeWith(t, c, "--otlp-endpoint", recv.Endpoint(), "--trace-sample", "1")
	c = newCLI(t, addr)
	c.ok("topic", "create", "traced")
	c.okIn("one\ntwo\n", "produce", "traced")
	c.ok("consume", "traced", "--max", "2")
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range recv.Spans() {
		if s.Node != "node-1" {
			t.Errorf("span %s names node %q", s.Name, s.Node)
		}
		names = append(names, s.Name)
	}
	for _, want := range []string{tracing.SpanProduce, tracing.SpanConsume, tracing.SpanFsync} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s span reached the collector by the node's exit; got %v", want, names)
		}
	}
}

// TestServeRefusesABadTraceSample: a ratio outside [0, 1] stops serve
// with a usage error before it opens anything.
func TestServeRefusesABadTraceSample(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	for _, ratio := range []string{"1.5", "NaN"} {
		out := c.fails(2, "serve", "--dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
			"--otlp-endpoint", "http://127.0.0.1:1", "--trace-sample", ratio)
		if !strings.Contains(out, "--trace-sample") {
			t.Fatalf("%s: the refusal does not name the flag: %q", ratio, out)
		}
	}
}

// TestExportErrorsAreRateLimited drives the handler with a manual clock:
// one message per interval, the next one counting those it left out.
func TestExportErrorsAreRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	h := &exportErrors{logger: slog.New(slog.NewTextHandler(&buf, nil)), every: time.Minute, now: func() time.Time { return now }}
	for range 5 {
		h.Handle(errors.New("collector down"))
	}
	if got := strings.Count(buf.String(), "exporting spans failed"); got != 1 {
		t.Fatalf("%d messages for 5 errors within the interval:\n%s", got, buf.String())
	}
	now = now.Add(time.Minute)
	h.Handle(errors.New("collector down"))
	if got := strings.Count(buf.String(), "exporting spans failed"); got != 2 || !strings.Contains(buf.String(), "unlogged_errors=4") {
		t.Fatalf("after the interval:\n%s", buf.String())
	}
}

// TestTracingOnLogsNoPassword: the endpoint is logged without the
// credentials a URL may hold.
func TestTracingOnLogsNoPassword(t *testing.T) {
	var buf bytes.Buffer
	f := tracingFlags{endpoint: "http://ops:s3cret@127.0.0.1:1/v1/traces", sample: 0.5}
	tr, err := f.open("node-1", slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	tr.ShutdownWithin(time.Second)
	if strings.Contains(buf.String(), "s3cret") || !strings.Contains(buf.String(), "127.0.0.1:1/v1/traces") {
		t.Fatalf("logged: %s", buf.String())
	}
}
