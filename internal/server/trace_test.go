package server

import (
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/tracing/tracingtest"
	"github.com/malachi-log/malachi/internal/wire"
)

// TestConsumeSpanOfAClientThatLeft: a long poll whose client disconnects
// ends its span without an error, with a "client gone" event.
func TestConsumeSpanOfAClientThatLeft(t *testing.T) {
	recv := tracingtest.NewReceiver(t)
	tr, err := tracing.New(tracing.Config{Endpoint: recv.Endpoint(), Sample: 1, Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.ShutdownWithin(5 * time.Second) })
	n := startAuthNode(t, broker.Config{Tracer: tr}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("quiet"), Bits: 8})
	c := n.login(t, "admin", "admin123")
	c.send(2, &wire.FetchRequest{Topic: str("quiet"), Max: 10, WaitMs: 600_000})
	c.nc.Close()
	var consume *tracingtest.Span
	waitFor(t, "the consume span", func() {}, func() bool {
		if err := tr.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, s := range recv.Spans() {
			if s.Name == tracing.SpanConsume {
				consume = &s
				return true
			}
		}
		return false
	})
	if consume.Error || !slices.Contains(consume.Events, tracing.EventClientGone) {
		t.Fatalf("consume span of a client that left: %+v", *consume)
	}
}
