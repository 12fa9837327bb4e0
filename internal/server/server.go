// Package server is the client-protocol listener: it accepts TCP
// connections, enforces the auth-first rule, frame and connection limits,
// decodes wire v1 requests (plus the admin keys from 64) and dispatches them
// to the broker.
//
// Each connection has one reader goroutine, and a writer goroutine while
// it has answers to write; buffers are borrowed from pools while frames
// flow, so an idle connection costs its reader's stack and little else. The
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
// A byte budget bounds the same answers by size (budget.go): a fetch runs
// only when the largest answer it could give fits.
//
// Until a connection has authenticated its frames are capped at a few
// KiB and its read-ahead is small, so connections that never authenticate
// cost the node little. TLS, when configured, shares the client port with
// plaintext (tls.go). An accept error never stops the node: Serve backs
// off and accepts again.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Config bounds what clients may do. Zero values take the defaults;
// Listen refuses a configuration that is out of range.
type Config struct {
	// Addr is the listen address; default 127.0.0.1:4040.
	Addr string
	// MaxFrame caps a frame's length prefix; default 16 MiB.
	MaxFrame uint32
	// MaxPreAuthFrame caps a frame's length prefix until the connection
	// has authenticated; default 8 KiB, at most MaxFrame and 16 MiB.
	// Credentials and tokens fit easily; a peer that has not said who it
	// is cannot make the node buffer megabytes.
	MaxPreAuthFrame uint32
	// AuthTimeout is how long a new connection may take, from accept, to
	// finish its TLS handshake (if any) and authenticate.
	AuthTimeout time.Duration
	// IdleTimeout closes a connection that sends nothing for this long.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client; a write that does not
	// complete in time closes the connection.
	WriteTimeout time.Duration
	// MaxConns and MaxConnsPerIP cap concurrent connections (per client
	// IPv4 address, or IPv6 /64).
	MaxConns      int
	MaxConnsPerIP int
	// MaxPreAuthConns caps connections that have not logged in yet.
	// Default a tenth of MaxConns (at least 16).
	MaxPreAuthConns int
	// MaxInFlight caps the requests one connection may have outstanding,
	// counting those whose answers wait to be written; default 256.
	MaxInFlight int
	// MaxConnBytes is one connection's byte budget: answers waiting to be
	// written to it, plus the room held by fetches being worked on for
	// it; default 64 MiB, at least 64 KiB. A fetch starts only when the
	// largest answer it could produce fits in what is left (or when the
	// connection holds nothing, so one record larger than the budget can
	// still be fetched), and the reader stops admitting requests while
	// the answers alone fill the budget.
	MaxConnBytes int64
	// MaxConnRequestBytes bounds the request frames one connection holds:
	// those read and not yet handled, and produce_batches requests whose
	// batches are not yet durable (they are stored from the frame);
	// default 8 MiB, at least 64 KiB. While they fill it the reader waits
	// before reading the next frame's body, so TCP pushes back on the
	// client; a frame larger than the whole bound is read when the
	// connection holds no other.
	MaxConnRequestBytes int64
	// ShutdownGrace is how long Shutdown lets in-flight requests finish.
	ShutdownGrace time.Duration

	// TLSCertFile and TLSKeyFile (PEM) turn TLS on for the client port.
	// They are read again on ReloadTLS and whenever their modification
	// time or size changes; a reload that fails keeps the previous pair.
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile (PEM) makes the node ask TLS clients for a
	// certificate and verify one that is presented against these CAs;
	// clients without one still connect and authenticate another way.
	TLSClientCAFile string
	// TLSOnly refuses plaintext connections (tls_required, then close).
	// Without it the port accepts both, told apart by the first byte.
	TLSOnly bool
	// TLSReloadInterval is how often the TLS files are checked for
	// changes; default 5 s, negative to reload only on ReloadTLS.
	TLSReloadInterval time.Duration

	// Logger receives connection-level messages.
	Logger *slog.Logger
}

// Bounds Listen checks.
const (
	minFrame        = 1 << 10
	maxPreAuthFrame = 1 << 24 // so a plaintext first frame never starts with the TLS record byte 0x16
	minConnBytes    = 64 << 10
)

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:4040"
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = wire.DefaultMaxFrame
	}
	if c.MaxPreAuthFrame == 0 {
		c.MaxPreAuthFrame = min(8<<10, c.MaxFrame)
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
	if c.MaxPreAuthConns == 0 {
		c.MaxPreAuthConns = max(c.MaxConns/10, 16)
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 100
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 256
	}
	if c.MaxConnBytes == 0 {
		c.MaxConnBytes = 64 << 20
	}
	if c.MaxConnRequestBytes == 0 {
		c.MaxConnRequestBytes = 8 << 20
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.TLSReloadInterval == 0 {
		c.TLSReloadInterval = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate reports the first setting out of range, after defaults.
func (c Config) validate() error {
	switch {
	case c.MaxFrame < minFrame:
		return fmt.Errorf("server: MaxFrame %d is below %d", c.MaxFrame, minFrame)
	case c.MaxPreAuthFrame < wire.RequestHeaderSize || c.MaxPreAuthFrame > min(c.MaxFrame, maxPreAuthFrame):
		return fmt.Errorf("server: MaxPreAuthFrame %d is outside [%d, min(MaxFrame, %d)]", c.MaxPreAuthFrame, wire.RequestHeaderSize, maxPreAuthFrame)
	case c.AuthTimeout < 0, c.IdleTimeout < 0, c.WriteTimeout < 0, c.ShutdownGrace < 0:
		return errors.New("server: timeouts cannot be negative")
	case c.MaxConns < 1, c.MaxConnsPerIP < 1, c.MaxPreAuthConns < 1:
		return errors.New("server: MaxConns, MaxConnsPerIP and MaxPreAuthConns must be at least 1")
	case c.MaxInFlight < 1:
		return errors.New("server: MaxInFlight must be at least 1")
	case c.MaxConnBytes < minConnBytes:
		return fmt.Errorf("server: MaxConnBytes %d is below %d", c.MaxConnBytes, minConnBytes)
	case c.MaxConnRequestBytes < minConnBytes:
		return fmt.Errorf("server: MaxConnRequestBytes %d is below %d", c.MaxConnRequestBytes, minConnBytes)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("server: TLS needs both a certificate file and a key file")
	case c.TLSCertFile == "" && (c.TLSOnly || c.TLSClientCAFile != ""):
		return errors.New("server: TLSOnly and TLSClientCAFile need a certificate and key")
	}
	return nil
}

// Stats are the server's counters since it started, for metrics and
// tests.
type Stats struct {
	// AcceptErrors counts failed accepts (descriptor exhaustion and the
	// like); the server backs off and keeps listening.
	AcceptErrors uint64
	// TLSHandshakeErrors counts TLS handshakes that failed or timed out.
	TLSHandshakeErrors uint64
	// PlaintextRefused counts plaintext connections refused by TLSOnly.
	PlaintextRefused uint64
	// TLSReloadErrors counts certificate reloads that failed (the
	// previous certificate stays in use).
	TLSReloadErrors uint64
}

// Server accepts client connections for one broker.
type Server struct {
	cfg Config
	b   *broker.Broker
	ln  net.Listener
	tls *tlsFiles // nil without TLS

	// fetchReserve is the room a fetch holds in its connection's budget
	// while it runs: the largest answer it could produce.
	fetchReserve int64

	quit     chan struct{} // closed by Shutdown: ends accept back-off and the TLS watcher
	quitOnce sync.Once
	bg       sync.WaitGroup // the TLS watcher

	acceptErrors, handshakeErrors, plaintextRefused atomic.Uint64
	acceptLog                                       rateLog
	traffic                                         *trafficStats // stats.go

	mu struct {
		sync.Mutex
		conns    map[*conn]struct{}
		perIP    map[string]int
		preAuth  int // connections not yet logged in
		draining bool
	}
	wg sync.WaitGroup
}

// New returns a server for b; call Listen, then Serve.
func New(cfg Config, b *broker.Broker) *Server {
	s := &Server{cfg: cfg.withDefaults(), b: b, quit: make(chan struct{}), traffic: newTrafficStats()}
	s.mu.conns = make(map[*conn]struct{})
	s.mu.perIP = make(map[string]int)
	s.fetchReserve = fetchReserve(s.cfg.MaxFrame)
	return s
}

// Listen checks the configuration, loads the TLS files, and binds the
// listen address.
func (s *Server) Listen() error {
	if err := s.prepare(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		s.stopBackground()
		return fmt.Errorf("server: listen %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	return nil
}

// ListenOn is Listen on ln, bound by the caller (cfg.Addr is not used):
// a node binds its ports before it joins a cluster, so that a port taken
// fails it before any other node knows it. The server owns ln from then
// on, and closes it on error too.
func (s *Server) ListenOn(ln net.Listener) error {
	if err := s.prepare(); err != nil {
		_ = ln.Close()
		return err
	}
	s.ln = ln
	return nil
}

// prepare validates the configuration and sets up TLS; the start-up
// half of Listen, separate so tests can supply their own listener.
func (s *Server) prepare() error {
	if err := s.cfg.validate(); err != nil {
		return err
	}
	if s.cfg.TLSCertFile == "" {
		return nil
	}
	t, err := loadTLSFiles(s.cfg)
	if err != nil {
		return err
	}
	s.tls = t
	if s.cfg.TLSReloadInterval > 0 {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			t.watch(s.cfg.TLSReloadInterval, s.quit)
		}()
	}
	return nil
}

// stopBackground ends an accept back-off and the TLS watcher, and waits
// for the watcher.
func (s *Server) stopBackground() {
	s.quitOnce.Do(func() { close(s.quit) })
	s.bg.Wait()
}

// ReloadTLS reads the TLS files again now (the serve command calls it on
// SIGHUP). New handshakes use the new certificate; open connections keep
// theirs. On error the previous certificate stays in use.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return errors.New("server: TLS is not configured")
	}
	return s.tls.reload()
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		AcceptErrors:       s.acceptErrors.Load(),
		TLSHandshakeErrors: s.handshakeErrors.Load(),
		PlaintextRefused:   s.plaintextRefused.Load(),
	}
	if s.tls != nil {
		st.TLSReloadErrors = s.tls.reloadErrors.Load()
	}
	return st
}

// Accept back-off, as net/http: an accept error (EMFILE, ENFILE, ENOBUFS,
// ECONNABORTED ...) is usually the node out of some resource for a
// moment, and returning from Serve would stop the whole node over it.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
	acceptLogEvery   = 10 * time.Second
)

// Serve accepts connections until the listener closes (Shutdown). An
// accept error never ends it: the loop backs off, counts the error, logs
// it at most once per acceptLogEvery, and accepts again.
func (s *Server) Serve() error {
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.acceptErrors.Add(1)
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			if n, ok := s.acceptLog.allow(time.Now(), acceptLogEvery); ok {
				s.cfg.Logger.Error("accept failed; retrying", "err", err, "backoff", backoff, "suppressed", n)
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.quit:
				t.Stop()
				return nil
			}
			continue
		}
		backoff = 0
		s.admit(nc)
	}
}

// rateLog lets one message through per interval and counts the rest.
type rateLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many were suppressed since
// the last message that was logged.
func (r *rateLog) allow(now time.Time, every time.Duration) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < every {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return n, true
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
	case s.mu.preAuth >= s.cfg.MaxPreAuthConns:
		// Connections that have not logged in may hold only a share of
		// the node's, so clients that never log in cannot crowd out
		// those that do.
		reason = "global_limit_exceeded"
	case s.mu.perIP[ip] >= s.cfg.MaxConnsPerIP:
		reason = "connection_limit_exceeded"
	}
	if reason != "" {
		s.mu.Unlock()
		s.traffic.connRefused(reason)
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(wire.AppendErrorFrame(nil, 0, reason))
		nc.Close()
		return
	}
	c := newConn(s, nc, ip)
	s.mu.conns[c] = struct{}{}
	s.mu.perIP[ip]++
	s.mu.preAuth++
	s.wg.Add(1)
	s.mu.Unlock()
	s.traffic.accepted.Add(1)
	go func() {
		defer s.wg.Done()
		c.serve()
		s.forget(c)
	}()
}

// loggedIn moves c out of the not-yet-logged-in count, once.
func (s *Server) loggedIn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.countedAuthed {
		c.countedAuthed = true
		s.mu.preAuth--
	}
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !c.countedAuthed {
		s.mu.preAuth--
	}
	delete(s.mu.conns, c)
	s.mu.perIP[c.ip]--
	if s.mu.perIP[c.ip] <= 0 {
		delete(s.mu.perIP, c.ip)
	}
}

// ErrRequestsOutlived is returned by Shutdown when ctx ended before the
// requests of the connections it closed did.
var ErrRequestsOutlived = errors.New("server: requests still in flight when shutdown's deadline passed")

// Shutdown stops accepting, lets connections finish their in-flight
// requests for up to the grace period (or ctx), then closes them and
// waits, until ctx ends, for the requests still running to return. A
// request can outlive its closed connection: an append whose round waits
// for disk space returns only once space comes back or the store is
// closed, which its owner does after Shutdown. Shutdown then returns
// ErrRequestsOutlived instead of waiting for ever.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.mu.draining = true
	conns := make([]*conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.stopBackground()
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
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("%w: %w", ErrRequestsOutlived, ctx.Err()))
	}
}

// remoteIP is the client address that per-address limits and the login
// throttle count by: the IPv4 address, or an IPv6 address's /64 (a single
// site is routinely given a whole /64, so counting by full address would
// give one client unlimited addresses).
func remoteIP(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return addrKey(host)
}

func addrKey(host string) string {
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Is4() || ip.Is4In6() {
		return host
	}
	return netip.PrefixFrom(ip.WithZone(""), 64).Masked().String()
}
