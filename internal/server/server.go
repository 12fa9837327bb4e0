// Package server is the client-protocol listener: it accepts TCP
// connections, enforces the auth-first rule, frame and connection limits,
// decodes wire v1 requests (plus the admin keys from 64) and dispatches them
// to the broker.
//
// Each connection has one reader goroutine and one writer goroutine. The
// reader submits produces inline, in arrival order (so pipelined produces
// keep their per-key order), and hands every other request to a goroutine;
// long polls therefore do not block the connection. Responses carry their
// correlation id and may complete out of order, as the protocol allows.
//
// The per-connection in-flight limit counts a request from the moment it is
// read until its answer has been written to the socket. When it is reached
// the reader stops reading, so a client that pipelines faster than it reads
// its answers is held back by TCP instead of costing the node memory or
// goroutines, and one that stops reading is closed after the write timeout.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Config bounds what clients may do. Zero values take the defaults.
type Config struct {
	// Addr is the listen address; default 127.0.0.1:4040.
	Addr string
	// MaxFrame caps a frame's length prefix; default 16 MiB.
	MaxFrame uint32
	// AuthTimeout is how long a new connection may take to authenticate.
	AuthTimeout time.Duration
	// IdleTimeout closes a connection that sends nothing for this long.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client; a write that does not
	// complete in time closes the connection.
	WriteTimeout time.Duration
	// MaxConns and MaxConnsPerIP cap concurrent connections.
	MaxConns      int
	MaxConnsPerIP int
	// MaxInFlight caps the requests one connection may have outstanding,
	// counting those whose answers wait to be written; default 256.
	MaxInFlight int
	// ShutdownGrace is how long Shutdown lets in-flight requests finish.
	ShutdownGrace time.Duration
	// Logger receives connection-level messages.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:4040"
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = wire.DefaultMaxFrame
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 10 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 10000
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 100
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 256
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Server accepts client connections for one broker.
type Server struct {
	cfg Config
	b   *broker.Broker
	ln  net.Listener

	mu struct {
		sync.Mutex
		conns    map[*conn]struct{}
		perIP    map[string]int
		draining bool
	}
	wg sync.WaitGroup
}

// New returns a server for b; call Listen, then Serve.
func New(cfg Config, b *broker.Broker) *Server {
	s := &Server{cfg: cfg.withDefaults(), b: b}
	s.mu.conns = make(map[*conn]struct{})
	s.mu.perIP = make(map[string]int)
	return s
}

// Listen binds the listen address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: listen %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until the listener closes (Shutdown).
func (s *Server) Serve() error {
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("server: accept: %w", err)
		}
		backoff = 0
		s.admit(nc)
	}
}

// admit applies the connection caps and starts the connection.
func (s *Server) admit(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	ip := remoteIP(nc)
	s.mu.Lock()
	reason := ""
	switch {
	case s.mu.draining:
		reason = "shutting_down"
	case len(s.mu.conns) >= s.cfg.MaxConns:
		reason = "global_limit_exceeded"
	case s.mu.perIP[ip] >= s.cfg.MaxConnsPerIP:
		reason = "connection_limit_exceeded"
	}
	if reason != "" {
		s.mu.Unlock()
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(wire.AppendErrorFrame(nil, 0, reason))
		nc.Close()
		return
	}
	c := newConn(s, nc, ip)
	s.mu.conns[c] = struct{}{}
	s.mu.perIP[ip]++
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.forget(c)
	}()
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mu.conns, c)
	s.mu.perIP[c.ip]--
	if s.mu.perIP[c.ip] <= 0 {
		delete(s.mu.perIP, c.ip)
	}
}

// Shutdown stops accepting, lets connections finish their in-flight
// requests for up to the grace period (or ctx), then closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.mu.draining = true
	conns := make([]*conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	for _, c := range conns {
		c.drain()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	grace := time.NewTimer(s.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return err
	case <-grace.C:
	case <-ctx.Done():
	}
	for _, c := range conns {
		c.close()
	}
	<-done
	return err
}

func remoteIP(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return host
}
