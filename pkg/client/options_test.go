package client

// The options of Dial that reach past one connection: seed addresses,
// the logger, the metrics hooks, and the node's own frame limit. Against
// scripted nodes (fakeBroker).

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func statusOK(fc *fakeConn, corr uint32, req wire.Request) {
	fc.ok(corr, wire.StatusResponse{NodeID: "n"})
}

// TestSeedsTriedInTurn: Dial goes on to the next address when the first
// cannot be reached, and redials start from the address that answered
// last.
func TestSeedsTriedInTurn(t *testing.T) {
	a, b := startFake(t, statusOK), startFake(t, statusOK)
	c, err := Dial(t.Context(), deadAddr(t), WithCredentials("u", "p"),
		WithSeeds(a.ln.Addr().String(), b.ln.Addr().String()))
	if err != nil {
		t.Fatalf("dial with a dead first address: %v", err)
	}
	defer c.Close()
	if a.authCount() != 1 || b.authCount() != 0 {
		t.Fatalf("logins: first seed %d, second %d; want 1, 0", a.authCount(), b.authCount())
	}
	a.ln.Close()
	a.dropAll()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("call after the first seed went away: %v", err)
	}
	if b.authCount() != 1 {
		t.Fatalf("second seed logins: %d, want 1", b.authCount())
	}
}

// TestSeedsEachNameTheirHost: with TLS and no ServerName, the handshake
// with each address names that address's host (server name indication,
// and the name the certificate is checked against), and the caller's
// config is left as it was.
func TestSeedsEachNameTheirHost(t *testing.T) {
	cfg := &tls.Config{}
	for _, host := range []string{"node-a.example", "node-b.example"} {
		nc := &stubConn{}
		if _, err := handshake(t.Context(), nc, cfg, host+":4040"); err == nil {
			t.Fatal("handshake over a stub connection succeeded")
		}
		if !bytes.Contains(nc.written, []byte(host)) {
			t.Fatalf("ClientHello for %s does not name it", host)
		}
	}
	if cfg.ServerName != "" {
		t.Fatalf("the caller's config was changed: ServerName %q", cfg.ServerName)
	}
}

// stubConn is a net.Conn that keeps what is written and fails reads.
type stubConn struct {
	net.Conn
	written []byte
}

func (c *stubConn) Read([]byte) (int, error) { return 0, errors.New("stub") }
func (c *stubConn) Write(p []byte) (int, error) {
	c.written = append(c.written, p...)
	return len(p), nil
}
func (c *stubConn) Close() error { return nil }

// TestLoggerReportsLostConnection: WithLogger hears of a connection that
// broke and was dialled again.
func TestLoggerReportsLostConnection(t *testing.T) {
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	l := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &out}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := startFake(t, statusOK)
	c := dialFake(t, f, WithLogger(l))
	f.dropAll()
	waitDropped(t, c)
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(out.String(), "connection lost") {
		t.Fatalf("log: %q", out.String())
	}
}

// waitDropped waits until the client's connection has noticed it broke.
func waitDropped(t *testing.T, c *Client) {
	t.Helper()
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	select {
	case <-cn.done:
	case <-t.Context().Done():
		t.Fatal("connection not dropped")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// metricsLog records what WithMetrics reports.
type metricsLog struct {
	mu       sync.Mutex
	requests []RequestEvent
	connects []ConnectEvent
}

func (m *metricsLog) OnRequest(e RequestEvent) {
	m.mu.Lock()
	m.requests = append(m.requests, e)
	m.mu.Unlock()
}
func (m *metricsLog) OnConnect(e ConnectEvent) {
	m.mu.Lock()
	m.connects = append(m.connects, e)
	m.mu.Unlock()
}

// TestMetricsHooks: every request attempt and every dial reaches the
// hooks, named, with its outcome.
func TestMetricsHooks(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		if _, ok := req.(*wire.DescribeTopicRequest); ok {
			fc.refuse(corr, wire.ReasonNoSuchTopic)
			return
		}
		statusOK(fc, corr, req)
	})
	m := &metricsLog{}
	c := dialFake(t, f, WithMetrics(m))
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.DescribeTopic(t.Context(), "orders")
	f.dropAll()
	waitDropped(t, c)
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.connects) != 2 || m.connects[0].Err != nil || m.connects[1].Err != nil {
		t.Fatalf("connects: %+v, want 2 without errors", m.connects)
	}
	if len(m.requests) != 3 {
		t.Fatalf("requests: %+v, want 3", m.requests)
	}
	r := m.requests[1]
	if r.Op != "describe_topic" || r.Topic != "orders" || !errors.Is(r.Err, ErrNoSuchTopic) || m.requests[0].Op != "status" || m.requests[0].Err != nil {
		t.Fatalf("requests: %+v", m.requests)
	}
}

// TestNodeFrameLimitFailsOnlyTheRequest: a request over the frame limit
// the node announced (smaller than the client's) fails alone before it is
// sent: the node would refuse it with frame_too_large and close the
// connection under every other call.
func TestNodeFrameLimitFailsOnlyTheRequest(t *testing.T) {
	fv := &fakeV2{t: t, lim: batchfmt.ProduceLimits{MaxRawBytes: 256 << 10, MaxRecords: 4096, MaxHeaders: 1024}}
	f := startFakeWith(t, fakeOptions{versions: fv.versions(16 << 10)}, fv.handle)
	c := dialFake(t, f)
	if c.WireVersion() != 2 {
		t.Fatal("not wire v2")
	}
	_, err := c.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: make([]byte, 32<<10)})
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("produce over the node's frame limit: %v, want ErrRequestTooLarge", err)
	}
	if n, err := c.Produce(context.Background(), "t", Record{Key: []byte("k"), Value: []byte("v")}); err != nil || n != 1 {
		t.Fatalf("produce after it: %d, %v", n, err)
	}
	if f.authCount() != 1 {
		t.Fatalf("%d logins, want 1: the connection was dropped", f.authCount())
	}
}
