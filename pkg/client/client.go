package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Client is a connection to a Malachi broker. It is safe for concurrent
// use: every method may be called from many goroutines, and their requests
// are pipelined on one TCP connection. If the connection breaks, the next
// call dials again with the same credentials.
type Client struct {
	addr string
	cfg  config

	mu sync.Mutex // guards the following
	// cur is the connection requests use; nil before a redial.
	cur *conn
	// dialing is non-nil while one caller redials; it is closed when that
	// dial ends, so the others wait for it instead of dialing too.
	dialing chan struct{}
	subs    map[*Subscription]struct{}
	closed  bool

	// wire is what the last connection dialled negotiated.
	wire atomic.Pointer[wireInfo]
	// rc caches the route tables of topics produced to with wire v2.
	rc routeCache
}

// Dial connects to the broker at addr ("host:port"), over TLS if WithTLS
// is given, and authenticates. One way to authenticate is required:
// WithCredentials, WithMTLSAuth, WithToken or WithTokenSource. The
// connection stays open until Close.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.prepare(addr); err != nil {
		return nil, err
	}
	cn, err := dialPaced(ctx, addr, &cfg, cfg.dialRetry)
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, cfg: cfg, cur: cn, subs: make(map[*Subscription]struct{})}
	c.wire.Store(&cn.wire)
	return c, nil
}

// Addr returns the address the client dials.
func (c *Client) Addr() string { return c.addr }

// WireVersion returns the wire protocol version the client speaks on its
// connection: 2 when WithWireVersion allows it and the node serves wire
// v2's batch keys, else 1. It is negotiated anew on every connection the
// client dials (after a broken connection, the next call redials); before
// that redial it reports the last connection's.
func (c *Client) WireVersion() int { return c.wireInfo().version }

// wireInfo is what the current (or last) connection negotiated.
func (c *Client) wireInfo() *wireInfo { return c.wire.Load() }

// Close closes the connection and every Subscription made by the client.
// Calls still waiting fail with ErrClosed; later calls fail with ErrClosed
// at once. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cur := c.cur
	c.cur = nil
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	if cur != nil {
		cur.close(ErrClosed)
	}
	for s := range subs {
		s.Close()
	}
	return nil
}

// conn returns a usable connection, dialling a new one if the last broke.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if c.cur != nil && c.cur.usable() {
			cn := c.cur
			c.mu.Unlock()
			return cn, nil
		}
		if c.dialing == nil {
			return c.redialLocked(ctx)
		}
		wait := c.dialing
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// redialLocked dials a replacement connection.
//
// REQUIRES: c.mu held; it is released on return.
func (c *Client) redialLocked(ctx context.Context) (*conn, error) {
	done := make(chan struct{})
	c.dialing = done
	old := c.cur
	c.cur = nil
	c.mu.Unlock()
	if old != nil {
		old.close(ErrDisconnected)
	}
	// A node turning logins away for load (after a restart, say) is
	// waited for, as long as ctx allows.
	cn, err := dialPaced(ctx, c.addr, &c.cfg, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dialing = nil
	close(done)
	if err != nil {
		return nil, err
	}
	if c.closed {
		cn.close(ErrClosed) // takes no client lock
		return nil, ErrClosed
	}
	c.cur = cn
	c.wire.Store(&cn.wire)
	return cn, nil
}

// track registers s so Close closes it; false if the client is closed.
func (c *Client) track(s *Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.subs[s] = struct{}{}
	return true
}

func (c *Client) untrack(s *Subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.subs, s)
}

// decoder is a response payload type.
type decoder interface{ Decode(payload []byte) error }

// request describes one request for do.
type request struct {
	req wire.Request
	// resp decodes the answer; nil expects an empty payload.
	resp decoder
	// wait is a long poll's wait, added to the request timeout.
	wait time.Duration
	// resend marks requests that may be sent again after the connection
	// broke under them, because repeating them is harmless (reads,
	// commits) or allowed (produce is at-least-once).
	resend bool
}

// do sends r, retrying retriable failures with capped exponential
// back-off, and decodes the answer into r.resp.
func (c *Client) do(ctx context.Context, r request) error {
	_, err := c.doPick(ctx, func(*conn) (request, error) { return r, nil })
	return err
}

// doPick is do for a request that depends on the connection it goes out
// on (wire v1 or v2): pick chooses it, anew for every attempt, and an
// error from pick ends the call. It returns the request that was answered.
func (c *Client) doPick(ctx context.Context, pick func(cn *conn) (request, error)) (request, error) {
	var (
		r       request
		payload []byte
		err     error
		sent    bool
	)
	for attempt := 1; ; attempt++ {
		r, payload, sent, err = c.once(ctx, pick)
		if err == nil || attempt >= c.cfg.retryAttempts || !shouldRetry(err, sent, r.resend) {
			break
		}
		if werr := sleep(ctx, c.backoff(attempt)); werr != nil {
			return r, werr
		}
	}
	if err != nil {
		return r, err
	}
	resp := r.resp
	if resp == nil {
		resp = &wire.EmptyResponse{}
	}
	if err := resp.Decode(payload); err != nil {
		return r, fmt.Errorf("%w: %s answer: %w", ErrProtocol, wire.KeyName(r.req.APIKey()), err)
	}
	return r, nil
}

// once makes one attempt. sent is false when no connection could be had,
// so the request certainly did not reach the broker.
func (c *Client) once(ctx context.Context, pick func(cn *conn) (request, error)) (r request, payload []byte, sent bool, err error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return r, nil, false, err
	}
	if r, err = pick(cn); err != nil {
		return r, nil, false, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.requestTimeout+r.wait, ErrRequestTimeout)
	defer cancel()
	payload, err = cn.roundTrip(ctx, r.req)
	return r, payload, true, err
}

// shouldRetry decides whether a failed attempt is tried again.
func shouldRetry(err error, sent, resend bool) bool {
	if errors.Is(err, ErrClosed) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable
	}
	if errors.Is(err, ErrDisconnected) {
		return !sent || resend
	}
	return false
}

// backoff is the pause after the given failed attempt (1-based): base
// doubled per attempt, capped, with the upper half jittered so clients
// that failed together do not retry together.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.retryBase << min(attempt-1, 20)
	if d <= 0 || d > maxRetryDelay {
		d = maxRetryDelay
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// str returns a pointer to s: present on the wire, even when empty.
func str(s string) *string { return &s }

// optStr returns nil (absent on the wire) for "", else a pointer to s.
func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
