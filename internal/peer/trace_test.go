package peer

// Trace contexts riding frames: the codec (a traced frame round trips, an
// untraced one is the old frame byte for byte, a zero id is refused), and
// both transports handing a Call's or a SendContext's context to the
// handler on the other node.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func testSpanContext(sampled bool) trace.SpanContext {
	cfg := trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 1, 2},
	}
	if sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	return trace.NewSpanContext(cfg)
}

func TestTracedFrameRoundTrip(t *testing.T) {
	for _, sampled := range []bool{true, false} {
		sc := testSpanContext(sampled)
		buf := encodeTracedFrame(kindMessage, ChannelReplication, 0, sc, []byte("append"))
		f, n, err := readFrame(bufio.NewReader(bytes.NewReader(buf)), minFrameBytes)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(buf) || string(f.payload) != "append" || f.ch != ChannelReplication {
			t.Fatalf("decoded %+v (%d bytes)", f, n)
		}
		if f.sc.TraceID() != sc.TraceID() || f.sc.SpanID() != sc.SpanID() || f.sc.IsSampled() != sampled || !f.sc.IsRemote() {
			t.Fatalf("trace context %v, sent %v", f.sc, sc)
		}
		if got := binary.BigEndian.Uint32(buf); int(got) != frameBytes(traceBytes+len("append")) {
			t.Fatalf("length prefix %d", got)
		}
	}
}

func TestUntracedFrameIsTheOldFrame(t *testing.T) {
	payload := []byte("raft batch")
	old := encodeFrame(kindRequest, ChannelForward, 42, payload)
	if !bytes.Equal(encodeTracedFrame(kindRequest, ChannelForward, 42, trace.SpanContext{}, payload), old) {
		t.Fatal("a frame without a trace context differs from the old frame")
	}
	if binary.BigEndian.Uint16(old[10:]) != 0 {
		t.Fatal("an untraced frame sets a flag")
	}
	f, _, err := readFrame(bufio.NewReader(bytes.NewReader(old)), minFrameBytes)
	if err != nil || f.sc.IsValid() || string(f.payload) != "raft batch" {
		t.Fatalf("old frame decoded as %+v, %v", f, err)
	}
}

func TestTracedFrameRefusals(t *testing.T) {
	reseal := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[crcStart:], castagnoli))
		return b
	}
	zero := encodeTracedFrame(kindMessage, ChannelRaft, 0, testSpanContext(true), []byte("x"))
	clear(zero[headerSize : headerSize+16]) // a zero trace id
	short := encodeFrame(kindMessage, ChannelRaft, 0, []byte("short"))
	binary.BigEndian.PutUint16(short[10:], flagTrace) // flagged, but 5 bytes follow
	unknown := encodeFrame(kindMessage, ChannelRaft, 0, []byte("x"))
	binary.BigEndian.PutUint16(unknown[10:], 2)
	for name, buf := range map[string][]byte{"zero trace id": reseal(zero), "short context": reseal(short), "unknown flag": reseal(unknown)} {
		if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(buf)), minFrameBytes); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want a malformed frame", name, err)
		}
	}
}

// TestTraceContextCrossesNodes checks, on both transports, that a Call's
// context and a SendContext's reach the handlers on the other node as
// their remote parent, and that frames sent without one arrive without.
func TestTraceContextCrossesNodes(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			got := make(chan trace.SpanContext, 4)
			ts := im.start(t, 2, func(c *Config) { c.TraceContext = true }, func(tr Transport) {
				tr.HandleCall(ChannelForward, func(ctx context.Context, _ uint64, req []byte) ([]byte, error) {
					got <- trace.SpanContextFromContext(ctx)
					return req, nil
				})
				tr.HandleContext(ChannelReplication, func(ctx context.Context, _ uint64, _ []byte) {
					got <- trace.SpanContextFromContext(ctx)
				})
			})
			sc := testSpanContext(true)
			ctx := trace.ContextWithSpanContext(t.Context(), sc)
			if resp, err := ts[0].Call(ctx, 2, ChannelForward, []byte("ping")); err != nil || string(resp) != "ping" {
				t.Fatalf("call: %q %v", resp, err)
			}
			expectContext(t, got, sc)
			if err := ts[0].SendContext(ctx, 2, ChannelReplication, []byte("append")); err != nil {
				t.Fatal(err)
			}
			expectContext(t, got, sc)
			if err := ts[0].Send(2, ChannelReplication, []byte("append")); err != nil {
				t.Fatal(err)
			}
			expectContext(t, got, trace.SpanContext{})
			if _, err := ts[0].Call(t.Context(), 2, ChannelForward, []byte("ping")); err != nil {
				t.Fatal(err)
			}
			expectContext(t, got, trace.SpanContext{})
		})
	}
}

func expectContext(t *testing.T, got <-chan trace.SpanContext, want trace.SpanContext) {
	t.Helper()
	select {
	case sc := <-got:
		if sc.TraceID() != want.TraceID() || sc.SpanID() != want.SpanID() || sc.TraceFlags() != want.TraceFlags() {
			t.Fatalf("handler saw %v, want %v", sc, want)
		}
		if want.IsValid() && !sc.IsRemote() {
			t.Fatal("the received context is not marked remote")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called")
	}
}
