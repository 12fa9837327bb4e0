package client

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

// Sync is a test hook: it returns once every page the broker pushed
// before it handled a probe frame is queued for Next, and reports how many
// pages are queued. The broker answers a non-ack frame in stream mode with
// unexpected_frame, on the same connection and after the pushes it had
// already queued, and the reader queues frames in arrival order.
func (s *Subscription) Sync(ctx context.Context) (queued int, err error) {
	_, err = s.cn.roundTrip(ctx, wire.StatusRequest{})
	if !errors.Is(err, ErrUnexpectedFrame) {
		return 0, fmt.Errorf("probe in stream mode: got %v, want unexpected_frame", err)
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return len(s.st.q), nil
}

// NewTestPKI writes a throwaway CA, a server certificate for localhost and
// 127.0.0.1 and a client certificate for clientCN, for the external tests
// of TLS against a real node.
func NewTestPKI(t *testing.T, clientCN string) (caFile, serverCert, serverKey, clientCert, clientKey string) {
	p := newTestPKI(t, clientCN)
	return p.caFile, p.serverCertFile, p.serverKeyFile, p.clientCert, p.clientKey
}

// CachedRanges returns how many ranges the client's copy of topic's
// routes holds (wire v2), 0 when it holds none.
func CachedRanges(c *Client, topic string) int {
	c.rc.mu.Lock()
	e := c.rc.m[topic]
	c.rc.mu.Unlock()
	if e == nil {
		return 0
	}
	if t := e.table.Load(); t != nil {
		return len(t.ranges)
	}
	return 0
}

// Resumed reports whether the client's current connection logged in by
// its session token (session_auth, resumed), without a password hash.
func Resumed(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur != nil && c.cur.resumed
}

// Pending counts the calls waiting for their answers on the client's
// connections, the poll lane's included.
func Pending(c *Client) int {
	c.mu.Lock()
	conns := []*conn{c.cur, c.poll}
	c.mu.Unlock()
	n := 0
	for _, cn := range conns {
		if cn != nil {
			cn.mu.Lock()
			n += len(cn.pending)
			cn.mu.Unlock()
		}
	}
	return n
}

// PollLane reports on the connection long polls last used: whether there
// is one, and whether it is still open (a retired one closes once its
// polls are answered).
func PollLane(c *Client) (dialled, open bool) {
	c.mu.Lock()
	cn := c.poll
	c.mu.Unlock()
	if cn == nil {
		return false, false
	}
	return true, cn.failure() == nil
}
