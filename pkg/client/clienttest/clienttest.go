// Package clienttest runs a real Malachi node in process for tests: a
// broker on a temporary directory and its client-protocol server on a
// loopback port, with the development users seeded:
//
//	admin/admin123 (admin), producer/producer123, consumer/consumer123,
//	app/app123
//
// Nothing is faked: requests travel over TCP through the same server and
// broker a deployment runs, records are fsynced to disk, and Restart
// reopens the same directory, so tests of durability mean something.
//
//	func TestX(t *testing.T) {
//		n := clienttest.Start(t)
//		c := n.Client(t, "admin", "admin123")
//		if err := c.CreateTopic(t.Context(), "orders"); err != nil {
//			t.Fatal(err)
//		}
//		...
//	}
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/server"
	"github.com/malachi-log/malachi/pkg/client"
)

// Option configures Start and New.
type Option func(*options)

type options struct {
	dataDir         string
	logger          *slog.Logger
	segmentMaxBytes int64
	sessionTimeout  time.Duration
	// TLS on the client port, as `malachi serve --tls-*` sets it.
	tlsCert, tlsKey, tlsClientCA string
	tlsOnly                      bool
	mtlsAuth                     bool
}

// WithDataDir keeps the node's data in dir, which Close leaves in place.
func WithDataDir(dir string) Option {
	return func(o *options) { o.dataDir = dir }
}

// WithLogger sends the node's log to l (default: discarded).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithSegmentMaxBytes rolls a range's active segment once it holds n
// bytes (the broker's floor is 1 KiB), so tests can see several segments
// without writing 64 MiB.
func WithSegmentMaxBytes(n int64) Option {
	return func(o *options) { o.segmentMaxBytes = n }
}

// WithGroupSessionTimeout sets how long a silent group member keeps its
// ranges.
func WithGroupSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.sessionTimeout = d }
}

// WithTLS serves TLS on the client port with the PEM certificate and key
// files; plaintext connections are still accepted unless WithTLSOnly.
// With clientCAFile (may be ""), TLS clients are asked for a certificate,
// verified against it when given. Clients then dial with client.WithTLS.
func WithTLS(certFile, keyFile, clientCAFile string) Option {
	return func(o *options) { o.tlsCert, o.tlsKey, o.tlsClientCA = certFile, keyFile, clientCAFile }
}

// WithTLSOnly refuses plaintext connections (they get tls_required);
// it needs WithTLS.
func WithTLSOnly() Option {
	return func(o *options) { o.tlsOnly = true }
}

// WithMTLSAuth enables mtls_auth: a client that presents a certificate
// the listener verified logs in as the user its subject CN names. It
// needs WithTLS with a client CA.
func WithMTLSAuth() Option {
	return func(o *options) { o.mtlsAuth = true }
}

// Node is one in-process broker and server.
type Node struct {
	dir    string
	ownDir bool // dir was made by New and is removed by Close
	opts   options

	mu   sync.Mutex // guards the following
	b    *broker.Broker
	srv  *server.Server
	addr string
	done chan struct{} // closed when Serve returns
}

// Start opens a node on t.TempDir() (see New) and closes it in
// t.Cleanup.
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	opts = append([]Option{WithDataDir(t.TempDir())}, opts...)
	n, err := New(opts...)
	if err != nil {
		t.Fatalf("clienttest: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// New opens a broker, seeds the development users and serves it on
// 127.0.0.1 at a free port. Without WithDataDir it uses a new temporary
// directory, removed by Close. Tests use Start; New serves examples and
// programs that have no testing.TB.
func New(opts ...Option) (*Node, error) {
	n := &Node{opts: options{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	for _, o := range opts {
		o(&n.opts)
	}
	n.dir = n.opts.dataDir
	if n.dir == "" {
		dir, err := os.MkdirTemp("", "malachi-clienttest-")
		if err != nil {
			return nil, err
		}
		n.dir, n.ownDir = dir, true
	}
	b, err := n.open()
	if err != nil {
		n.removeDir()
		return nil, err
	}
	if _, err := b.SeedUsers(context.Background(), true, ""); err != nil {
		b.Close()
		n.removeDir()
		return nil, fmt.Errorf("seed users: %w", err)
	}
	if err := n.serve(b, "127.0.0.1:0"); err != nil {
		b.Close()
		n.removeDir()
		return nil, err
	}
	return n, nil
}

// Close stops the server and the broker and removes a temporary data
// directory New created. Idempotent.
func (n *Node) Close() error {
	err := n.stop()
	n.removeDir()
	return err
}

func (n *Node) removeDir() {
	if n.ownDir {
		os.RemoveAll(n.dir)
	}
}

// Addr returns the server's address, "127.0.0.1:port".
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addr
}

// AuthStats returns the running broker's login gauges: HashesPeak stays
// 0 until a login checks a password (session_auth resumes hash nothing).
// A restart starts them from zero.
func (n *Node) AuthStats() broker.AuthStats {
	n.mu.Lock()
	b := n.b
	n.mu.Unlock()
	if b == nil {
		return broker.AuthStats{}
	}
	return b.AuthStats()
}

// DataDir returns the broker's data directory.
func (n *Node) DataDir() string { return n.dir }

// Client dials the node as user and closes the client in t.Cleanup.
// Extra options follow the credentials.
func (n *Node) Client(t testing.TB, user, password string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts = append([]client.Option{client.WithCredentials(user, password)}, opts...)
	c, err := client.Dial(ctx, n.Addr(), opts...)
	if err != nil {
		t.Fatalf("clienttest: dial as %s: %v", user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Restart stops the server and the broker, then reopens the broker on the
// same directory and serves it on the same port if it is still free, else
// on a new one (see Addr). Clients dialled before keep working if the port
// was kept: they dial again on their next call.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	if err := n.restart(); err != nil {
		t.Fatalf("clienttest: restart: %v", err)
	}
}

func (n *Node) restart() error {
	old := n.Addr()
	if err := n.stop(); err != nil {
		return err
	}
	b, err := n.open()
	if err != nil {
		return err
	}
	if err := n.serve(b, old); err != nil {
		if err := n.serve(b, "127.0.0.1:0"); err != nil {
			b.Close()
			return err
		}
	}
	return nil
}

func (n *Node) open() (*broker.Broker, error) {
	cfg := broker.Config{
		DataDir:             n.dir,
		Logger:              n.opts.logger,
		SegmentMaxBytes:     n.opts.segmentMaxBytes,
		GroupSessionTimeout: n.opts.sessionTimeout,
	}
	cfg.Auth.MTLS.Enabled = n.opts.mtlsAuth
	b, err := broker.Open(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("open broker: %w", err)
	}
	return b, nil
}

// serve starts a server for b on addr.
func (n *Node) serve(b *broker.Broker, addr string) error {
	srv := server.New(server.Config{
		Addr: addr, Logger: n.opts.logger,
		TLSCertFile: n.opts.tlsCert, TLSKeyFile: n.opts.tlsKey, TLSClientCAFile: n.opts.tlsClientCA,
		TLSOnly: n.opts.tlsOnly,
	}, b)
	if err := srv.Listen(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve()
	}()
	n.mu.Lock()
	n.b, n.srv, n.addr, n.done = b, srv, srv.Addr().String(), done
	n.mu.Unlock()
	return nil
}

// stop shuts the server down, then closes the broker. Idempotent.
func (n *Node) stop() error {
	n.mu.Lock()
	b, srv, done := n.b, n.srv, n.done
	n.b, n.srv, n.done = nil, nil, nil
	n.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serr := srv.Shutdown(ctx)
	<-done
	if errors.Is(serr, net.ErrClosed) {
		serr = nil
	}
	return errors.Join(serr, b.Close())
}
