package peer

// The trace capability of the handshake: a node that predates trace
// contexts refuses a flagged frame by closing the connection, so it is
// sent none; a node that does not trace neither sends nor passes on a
// trace context.

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// olderAcceptor listens as node id speaking the frames of a node that
// predates trace contexts: its hello answer has no capability byte, and
// a frame with any flag set makes it close the connection, as its
// decoder did. It echoes requests and counts frames, flagged ones and
// accepted connections.
type olderAcceptor struct {
	addr                   string
	frames, flagged, conns atomic.Int64
}

func startOlderAcceptor(t *testing.T, id uint64) *olderAcceptor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &olderAcceptor{addr: ln.Addr().String()}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.conns.Add(1)
			a.serve(t, c, id) // one connection at a time, as the dialler keeps one
		}
	}()
	return a
}

func (a *olderAcceptor) serve(t *testing.T, c net.Conn, id uint64) {
	defer c.Close()
	br := bufio.NewReader(c)
	if _, _, err := readFrame(br, maxHelloBytes); err != nil {
		t.Errorf("older acceptor: reading the hello: %v", err)
		return
	}
	ack := binary.BigEndian.AppendUint16(nil, protocolVersion)
	ack = binary.BigEndian.AppendUint64(ack, id)
	ack = append(ack, 1) // accepted; no capability byte
	if _, err := c.Write(encodeFrame(kindHelloAck, 0, 0, ack)); err != nil {
		return
	}
	for {
		var prefix [lengthSize]byte
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(prefix[:]))
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		a.frames.Add(1)
		if binary.BigEndian.Uint16(body[6:]) != 0 {
			a.flagged.Add(1)
			return // the older decoder's refusal
		}
		f, err := decodeBody(body)
		if err != nil {
			t.Errorf("older acceptor: %v", err)
			return
		}
		if f.kind == kindRequest {
			if _, err := c.Write(encodeFrame(kindResponse, 0, f.id, f.payload)); err != nil {
				return
			}
		}
	}
}

func tracedContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(t.Context(), testSpanContext(true)), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func TestTracedFramesToOlderNode(t *testing.T) {
	older := startOlderAcceptor(t, 2)
	cfg := testConfig(1)
	cfg.TraceContext = true
	tr := newTCP(t, cfg, nil)
	tr.SetAddr(2, older.addr)
	// The first call is queued before the handshake says what node 2
	// takes: its context is dropped as it is written.
	if resp, err := tr.Call(tracedContext(t), 2, ChannelForward, []byte("first")); err != nil || string(resp) != "first" {
		t.Fatalf("traced call queued before the handshake: %q %v", resp, err)
	}
	for i := range 3 {
		if err := tr.SendContext(tracedContext(t), 2, ChannelReplication, []byte("append")); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Call(tracedContext(t), 2, ChannelForward, []byte("again")); err != nil {
			t.Fatalf("traced call %d: %v", i, err)
		}
	}
	if n := older.flagged.Load(); n != 0 {
		t.Fatalf("the older node received %d flagged frames", n)
	}
	if got := older.frames.Load(); got != 7 {
		t.Fatalf("the older node read %d frames, want 7", got)
	}
	ns := tr.Stats().Nodes[2]
	if !ns.Connected || ns.TraceContext || older.conns.Load() != 1 {
		t.Fatalf("stats %+v after %d connections; want one connection, up, without the capability", ns, older.conns.Load())
	}
}

func TestTraceCapabilityDeclared(t *testing.T) {
	for _, on := range []bool{true, false} {
		ts := startTCP(t, 2, func(c *Config) { c.TraceContext = on }, func(tr Transport) {
			tr.HandleCall(ChannelForward, func(_ context.Context, _ uint64, req []byte) ([]byte, error) { return req, nil })
		})
		if _, err := ts[0].Call(tracedContext(t), 2, ChannelForward, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if got := ts[0].Stats().Nodes[2].TraceContext; got != on {
			t.Errorf("TraceContext %v: node 2 declared the capability: %v", on, got)
		}
	}
}

// TestNodeWithoutTracingPassesNoContext: a node that does not trace
// ignores a context it is sent (a handler sees none, so nothing it sends
// in turn carries the remote parent), and sends none itself, even to a
// node that takes them.
func TestNodeWithoutTracingPassesNoContext(t *testing.T) {
	got := make(chan trace.SpanContext, 2)
	off := newTCP(t, testConfig(1), func(tr *TCPTransport) {
		tr.HandleCall(ChannelForward, func(ctx context.Context, _ uint64, req []byte) ([]byte, error) {
			got <- trace.SpanContextFromContext(ctx)
			return req, nil
		})
	})
	c, br, ack := rawDial(t, off, hello{version: protocolVersion, from: 3, to: 1, cluster: "test"})
	if !ack.ok || ack.caps&capTrace != 0 {
		t.Fatalf("answer %+v: a node that does not trace declared the capability", ack)
	}
	if _, err := c.Write(encodeTracedFrame(kindRequest, ChannelForward, 1, testSpanContext(true), []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if f, _, err := readFrame(br, minFrameBytes); err != nil || f.kind != kindResponse {
		t.Fatalf("answer %+v %v", f, err)
	}
	expectContext(t, got, trace.SpanContext{})

	onCfg := testConfig(2)
	onCfg.TraceContext = true
	on := newTCP(t, onCfg, func(tr *TCPTransport) {
		tr.HandleCall(ChannelForward, func(ctx context.Context, _ uint64, req []byte) ([]byte, error) {
			got <- trace.SpanContextFromContext(ctx)
			return req, nil
		})
	})
	off.SetAddr(2, on.Addr())
	if _, err := off.Call(tracedContext(t), 2, ChannelForward, []byte("y")); err != nil {
		t.Fatal(err)
	}
	expectContext(t, got, trace.SpanContext{})
}

func TestStripTrace(t *testing.T) {
	payload := []byte("payload")
	traced := encodeTracedFrame(kindRequest, ChannelData, 9, testSpanContext(true), payload)
	plain := encodeFrame(kindRequest, ChannelData, 9, payload)
	if got := stripTrace(traced); string(got) != string(plain) {
		t.Fatalf("stripped frame\n%x\nwant\n%x", got, plain)
	}
	if got := stripTrace(plain); &got[0] != &plain[0] || string(got) != string(encodeFrame(kindRequest, ChannelData, 9, payload)) {
		t.Fatal("an untraced frame was changed")
	}
}
