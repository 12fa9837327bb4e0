package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/wire"
)

// authNode is a broker and its server on a loopback port, for the
// authentication tests. clock is the broker's (a manual clock, so tests
// move lockouts and expiries forward by hand) unless bcfg sets one; the
// server's own deadlines use the wall clock.
type authNode struct {
	s     *Server
	b     *broker.Broker
	clock *clock.Manual
}

func startAuthNode(t testing.TB, bcfg broker.Config, scfg Config) *authNode {
	t.Helper()
	ctx := context.Background()
	mc := clock.NewManual(time.Now())
	bcfg.DataDir = t.TempDir()
	if bcfg.Clock == nil {
		bcfg.Clock = mc
	}
	if bcfg.Logger == nil {
		bcfg.Logger = slog.New(slog.DiscardHandler)
	}
	if scfg.Logger == nil {
		scfg.Logger = bcfg.Logger
	}
	b, err := broker.Open(ctx, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		b.Close()
		t.Fatal(err)
	}
	scfg.Addr = "127.0.0.1:0"
	s := New(scfg, b)
	if err := s.Listen(); err != nil {
		b.Close()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.Serve()
	}()
	t.Cleanup(func() {
		s.Shutdown(context.Background())
		<-served
		b.Close()
	})
	return &authNode{s: s, b: b, clock: mc}
}

// rawClient speaks the protocol over one connection.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (n *authNode) dial(t testing.TB) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", n.s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (n *authNode) dialTLS(t *testing.T, cfg *tls.Config) *rawClient {
	t.Helper()
	nc, err := tls.Dial("tcp", n.s.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawClient) send(corr uint32, req wire.Request) {
	c.t.Helper()
	if _, err := c.nc.Write(wire.AppendRequestFrame(nil, corr, req)); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one answer: its correlation id, ok payload or error reason,
// or the read error.
func (c *rawClient) recv() (corr uint32, payload []byte, reason string, err error) {
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	body, err := wire.ReadFrame(c.br, 0, nil)
	if err != nil {
		return 0, nil, "", err
	}
	corr, code, payload, err := wire.ParseResponse(body)
	if err != nil {
		return 0, nil, "", err
	}
	if code != wire.CodeOK {
		reason, _ = wire.DecodeError(payload)
		return corr, nil, reason, nil
	}
	return corr, payload, "", nil
}

// ok sends req and wants an ok answer.
func (c *rawClient) ok(corr uint32, req wire.Request) []byte {
	c.t.Helper()
	c.send(corr, req)
	got, payload, reason, err := c.recv()
	if err != nil || reason != "" || got != corr {
		c.t.Fatalf("%s on %d: answer to %d, reason %q, err %v", wire.KeyName(req.APIKey()), corr, got, reason, err)
	}
	return payload
}

// refused sends req and wants the error reason want.
func (c *rawClient) refused(corr uint32, req wire.Request, want string) {
	c.t.Helper()
	c.send(corr, req)
	got, _, reason, err := c.recv()
	if err != nil || reason != want || got != corr {
		c.t.Fatalf("%s on %d: answer to %d, reason %q, err %v; want %q", wire.KeyName(req.APIKey()), corr, got, reason, err, want)
	}
}

// closed wants the server to have closed the connection.
func (c *rawClient) closed() {
	c.t.Helper()
	_, _, reason, err := c.recv()
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		c.t.Fatalf("connection still open: reason %q, err %v", reason, err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func (c *rawClient) login(user, pass string) {
	c.t.Helper()
	c.ok(1, &wire.AuthRequest{User: &user, Password: &pass})
}

func (n *authNode) login(t *testing.T, user, pass string) *rawClient {
	t.Helper()
	c := n.dial(t)
	c.login(user, pass)
	return c
}

func str(s string) *string { return &s }

func createUserReq(user, pass string, perms ...string) *wire.CreateUserRequest {
	r := &wire.CreateUserRequest{User: &user, Password: &pass}
	for _, p := range perms {
		r.Perms = append(r.Perms, str(p))
	}
	return r
}

func produceReq(topic, value string) *wire.ProduceRequest {
	return &wire.ProduceRequest{Topic: &topic, Records: []wire.Record{{Key: []byte("k"), Value: []byte(value)}}}
}

func fetchReq(topic string) *wire.FetchRequest {
	return &wire.FetchRequest{Topic: &topic, Max: 10}
}
