package client

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Defaults of the Client options.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	DefaultRetryAttempts  = 5
	DefaultRetryBase      = 50 * time.Millisecond
	DefaultWireVersion    = 2
	// maxRetryDelay caps the exponential back-off between two attempts.
	maxRetryDelay = 2 * time.Second
)

// Option configures a Client; see Dial.
type Option func(*config)

// config holds every Client option. Keep it in step with the With*
// functions below and in auth.go.
type config struct {
	// auth is how each connection authenticates; the last of
	// WithCredentials, WithMTLSAuth, WithToken and WithTokenSource wins.
	auth           authMethod
	user, password string
	tokenSource    func(context.Context) (string, error)
	// resumeToken is the session token WithSessionToken gave.
	resumeToken string
	// tls is nil for plain TCP. Dial clones it and fills in ServerName.
	tls            *tls.Config
	dialTimeout    time.Duration
	requestTimeout time.Duration
	maxFrame       uint32
	retryAttempts  int
	retryBase      time.Duration
	// wireVersion is the highest wire version the client may speak.
	wireVersion int
	// dialRetry makes Dial dial again while the node refuses it for load.
	dialRetry bool
	// sess holds the resumption token and what the node serves; prepare makes
	// it, and every connection of the Client shares it.
	sess *session
	// pause waits between paced redials (sleep; tests count instead).
	pause func(ctx context.Context, d time.Duration) error
	// seeds, when set, are the addresses dialled in turn (WithSeeds).
	seeds   *seedList
	logger  *slog.Logger
	metrics Metrics
}

// seedList is the addresses a Client dials, the address given to Dial
// first; next is the one that answered last, where the next dial starts.
type seedList struct {
	addrs []string
	next  atomic.Int32
}

func defaultConfig() config {
	return config{
		dialTimeout:    DefaultDialTimeout,
		requestTimeout: DefaultRequestTimeout,
		maxFrame:       wire.DefaultMaxFrame,
		retryAttempts:  DefaultRetryAttempts,
		retryBase:      DefaultRetryBase,
		wireVersion:    DefaultWireVersion,
		pause:          sleep,
		logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// WithCredentials makes connections authenticate with a user and
// password (wire key 0). One way to authenticate is required, this or
// WithMTLSAuth, WithToken or WithTokenSource: the broker accepts nothing
// before authentication. If several are given, the last one applies.
//
// The password crosses the network as it is: use WithTLS unless the
// network is trusted.
func WithCredentials(user, password string) Option {
	return func(c *config) {
		c.auth, c.user, c.password, c.tokenSource = authPassword, user, password, nil
	}
}

// WithDialTimeout bounds connecting and authenticating (default 10 s).
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.dialTimeout = d
		}
	}
}

// WithRequestTimeout bounds how long a request waits for its answer once
// sent (default 30 s). A long poll (Fetch with Wait) gets its wait on top.
// The context passed to each call can only shorten it.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.requestTimeout = d
		}
	}
}

// WithMaxFrame sets the largest frame the client sends or accepts
// (default 16 MiB, the broker's default). Larger requests fail with
// ErrRequestTooLarge before anything is sent.
func WithMaxFrame(n uint32) Option {
	return func(c *config) {
		if n > 0 {
			c.maxFrame = n
		}
	}
}

// WithRetry sets how request methods retry retriable errors: at most
// attempts tries in all (1 disables retrying), sleeping base, 2*base,
// 4*base ... (capped at 2 s, with jitter) between them. The default is 5
// attempts from 50 ms.
func WithRetry(attempts int, base time.Duration) Option {
	return func(c *config) {
		c.retryAttempts = max(attempts, 1)
		if base > 0 {
			c.retryBase = base
		}
	}
}

// WithWireVersion sets the highest wire protocol version the client
// speaks: 1 or 2 (the default). Dial refuses other values.
//
// With 2, every connection first asks the node which api keys it serves
// (api_versions, pipelined ahead of the authentication frame, so it costs
// no round trip). If the node serves wire v2's batch keys, produces go out
// as stored batches, one per range (produce_batches, compressed if the
// Producer asks), and Fetch without Max reads stored batches
// (fetch_batches). Against an older node the client falls back to wire v1
// silently. Client.WireVersion reports what was negotiated.
// Subscriptions use wire v1's push stream (subscribe, key 5) either way.
//
// With 1 the client never sends a v2 key, not even api_versions: it
// behaves byte for byte as clients did before wire v2.
func WithWireVersion(v int) Option {
	return func(c *config) { c.wireVersion = v }
}

// WithTLSConfig is WithTLS, under the name other Go clients use.
func WithTLSConfig(cfg *tls.Config) Option { return WithTLS(cfg) }

// WithDialRetry makes Dial keep dialling while the node turns the login
// away for load (rate_limit_exceeded, connection_limit_exceeded,
// global_limit_exceeded), pacing the attempts as redials are paced (the
// node's retry-after hint plus up to half as much again, or exponential
// back-off with full jitter from 100 ms to 30 s), until it succeeds,
// fails otherwise or ctx ends. Without it Dial returns the refusal at
// once; RetryAfter reports the node's hint, if it gave one.
func WithDialRetry() Option {
	return func(c *config) { c.dialRetry = true }
}

// WithSeeds gives addresses to dial besides the one passed to Dial, for
// when that node is down: Dial and every later dial (redials, the poll
// connection, subscriptions) try the addresses in turn, starting with the
// last one that answered, until one connects. Every node serves every
// topic, so any of them will do.
func WithSeeds(addrs ...string) Option {
	return func(c *config) {
		if c.seeds == nil {
			c.seeds = &seedList{}
		}
		c.seeds.addrs = append(c.seeds.addrs, addrs...)
	}
}

// WithLogger sends the client's log to l: redials, addresses that failed,
// producer retries, at debug level; connections lost, at info. By default
// the client logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithMetrics makes the client report every request and every dial to m,
// for counters and histograms of the caller's choice; see Metrics.
func WithMetrics(m Metrics) Option {
	return func(c *config) { c.metrics = m }
}

// Metrics receives the client's measurements. Its methods are called on
// the client's own goroutines, often while a caller waits: they must be
// quick and must not block (count, observe, return).
type Metrics interface {
	// OnRequest is called once for every request attempt that was sent,
	// when it is answered or fails (a retried call reports each attempt).
	OnRequest(RequestEvent)
	// OnConnect is called for every connection the client dials, the
	// first and each later one (a reconnect), whether it succeeded or not.
	OnConnect(ConnectEvent)
}

// RequestEvent is one request attempt.
type RequestEvent struct {
	// Op names the request ("produce", "fetch", "commit", ...), as in
	// Error.Op; Topic is the topic it named, "" if none.
	Op, Topic string
	// Duration runs from sending to the answer or the failure; for a long
	// poll it includes the wait.
	Duration time.Duration
	// Err is nil for an ok answer.
	Err error
}

// ConnectEvent is one dial: TCP, TLS, negotiation and login.
type ConnectEvent struct {
	Addr     string
	Duration time.Duration
	Err      error
}
