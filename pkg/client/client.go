package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Client is a connection to a Malachi broker. It is safe for concurrent
// use: every method may be called from many goroutines, and their requests
// are pipelined on one TCP connection. Long polls (a Fetch with Wait) go
// on a second connection, dialled on the first, so that they never hold up
// other calls. If a connection breaks, the next call dials again with the
// same credentials.
type Client struct {
	addr string
	cfg  config

	mu sync.Mutex // guards the following
	// cur is the connection requests use; nil before a redial.
	cur *conn
	// dialing is non-nil while one caller redials; it is closed when that
	// dial ends, so the others wait for it instead of dialing too.
	dialing chan struct{}
	// poll and pollDialing are cur and dialing for long polls; retired
	// holds poll connections replaced while their polls drain, for Close.
	poll        *conn
	pollDialing chan struct{}
	retired     []*conn
	subs        map[*Subscription]struct{}
	// closing refuses new subscriptions while Close closes the ones
	// there are; closed refuses every call.
	closing, closed bool
	closeOnce       sync.Once

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

// Close closes every Subscription made by the client, then the
// connection. Each Subscription's Close confirms the position of its last
// Ack with a commit, as Subscription.Close does; together they take at
// most the request timeout (WithRequestTimeout). Calls still waiting then
// fail with ErrClosed; later calls fail with ErrClosed at once. Close is
// idempotent: calls made while the first runs wait for it.
func (c *Client) Close() error {
	c.closeOnce.Do(c.close)
	return nil
}

func (c *Client) close() {
	c.mu.Lock()
	c.closing = true
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	// The subscriptions first: their commits need the connection.
	ctx, cancel := context.WithTimeoutCause(context.Background(), c.cfg.requestTimeout, ErrRequestTimeout)
	for s := range subs {
		s.close(ctx)
	}
	cancel()
	c.mu.Lock()
	c.closed = true
	conns := append(c.retired, c.cur, c.poll)
	c.cur, c.poll, c.retired = nil, nil, nil
	c.mu.Unlock()
	for _, cn := range conns {
		if cn != nil {
			cn.close(ErrClosed)
		}
	}
}

// conn returns a usable connection, dialling a new one if the last broke.
func (c *Client) conn(ctx context.Context) (*conn, error) {
	return c.laneConn(ctx, false)
}

// pollConn returns the connection of the poll lane, dialling it if need
// be. Long polls go there: the node holds a long poll's slot on its
// connection until the poll is answered (MaxInFlight on the node, 256 by
// default, and a byte budget), so that polls sharing the connection of
// other calls would hold those up. A poll lane connection whose caller
// gives up on a poll is retired (conn.forget).
func (c *Client) pollConn(ctx context.Context) (*conn, error) {
	return c.laneConn(ctx, true)
}

// laneConn returns the usable connection of a lane, dialling one if none.
func (c *Client) laneConn(ctx context.Context, poll bool) (*conn, error) {
	cur, dialing := &c.cur, &c.dialing
	if poll {
		cur, dialing = &c.poll, &c.pollDialing
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if *cur != nil && (*cur).usable() {
			cn := *cur
			c.mu.Unlock()
			return cn, nil
		}
		if *dialing == nil {
			return c.redialLocked(ctx, cur, dialing, poll)
		}
		wait := *dialing
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// redialLocked dials a replacement connection for a lane.
//
// REQUIRES: c.mu held; it is released on return.
func (c *Client) redialLocked(ctx context.Context, cur **conn, dialing *chan struct{}, poll bool) (*conn, error) {
	done := make(chan struct{})
	*dialing = done
	old := *cur
	*cur = nil
	if poll && old != nil {
		c.keepRetiredLocked(old)
	}
	c.mu.Unlock()
	if old != nil {
		if err := old.failure(); err != nil && !errors.Is(err, errRetired) {
			c.cfg.logger.Info("malachi: connection lost, dialling again", "addr", old.addr, "err", err)
		}
		if !poll {
			old.close(ErrDisconnected)
		}
		// A retired poll connection closes once its polls are answered.
	}
	// A node turning logins away for load (after a restart, say) is
	// waited for, as long as ctx allows.
	cn, err := dialPaced(ctx, c.addr, &c.cfg, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	*dialing = nil
	close(done)
	if err != nil {
		c.cfg.logger.Debug("malachi: dial failed", "addr", c.addr, "err", err)
		return nil, err
	}
	if c.closed {
		cn.close(ErrClosed) // takes no client lock
		return nil, ErrClosed
	}
	cn.poll = poll
	*cur = cn
	if !poll {
		c.wire.Store(&cn.wire)
	}
	return cn, nil
}

// keepRetiredLocked keeps a replaced poll connection for Close until it
// has closed itself, and forgets those that have.
//
// REQUIRES: c.mu held.
func (c *Client) keepRetiredLocked(old *conn) {
	c.retired = slices.DeleteFunc(c.retired, func(cn *conn) bool { return cn.failure() != nil })
	if old.failure() == nil {
		c.retired = append(c.retired, old)
	}
}

// track registers s so Close closes it; false if the client is closed.
func (c *Client) track(s *Subscription) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.closing {
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
	// stopOn is a retriable reason that this request must not retry:
	// retrying it on the same node cannot succeed.
	stopOn error
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
	return c.doOn(ctx, false, pick)
}

// doOn is doPick on a lane: the poll lane with poll (see pollConn).
// Errors name the operation and topic.
func (c *Client) doOn(ctx context.Context, poll bool, pick func(cn *conn) (request, error)) (request, error) {
	r, err := c.doPicked(ctx, poll, pick)
	if err != nil && r.req != nil {
		op, topic := requestOp(r.req)
		err = opError(op, topic, err)
	}
	return r, err
}

func (c *Client) doPicked(ctx context.Context, poll bool, pick func(cn *conn) (request, error)) (request, error) {
	var (
		r       request
		payload []byte
		err     error
		sent    bool
	)
	for attempt := 1; ; attempt++ {
		r, payload, sent, err = c.once(ctx, poll, pick)
		if err == nil || attempt >= c.cfg.retryAttempts || !shouldRetry(err, sent, r.resend) ||
			(r.stopOn != nil && errors.Is(err, r.stopOn)) {
			break
		}
		c.cfg.logger.Debug("malachi: request retried", "attempt", attempt, "err", err)
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
func (c *Client) once(ctx context.Context, poll bool, pick func(cn *conn) (request, error)) (r request, payload []byte, sent bool, err error) {
	cn, err := c.laneConn(ctx, poll)
	if err != nil {
		return r, nil, false, err
	}
	if r, err = pick(cn); err != nil {
		return r, nil, false, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.requestTimeout+r.wait, ErrRequestTimeout)
	defer cancel()
	payload, err = cn.roundTrip(ctx, r.req)
	if c.cfg.metrics != nil {
		op, topic := requestOp(r.req)
		c.requestDone(op, topic, start, err)
	}
	return r, payload, true, err
}

// requestDone reports one request attempt to the Metrics hook, if any.
func (c *Client) requestDone(op, topic string, start time.Time, err error) {
	if m := c.cfg.metrics; m != nil {
		m.OnRequest(RequestEvent{Op: op, Topic: topic, Duration: time.Since(start), Err: err})
	}
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
