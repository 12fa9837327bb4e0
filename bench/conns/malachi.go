package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// The Malachi side speaks the wire protocol directly, as the node's own
// connection-cost test does: the first connection logs in with the
// password and every other one resumes its session token (session_auth),
// so that 10,000 connections come up in seconds rather than after 10,000
// argon2id hashes. What the node holds per connection is the same either
// way.

const (
	benchUser     = "app"
	benchPassword = "app123"
	wakeTopic     = "wake"
	// wakeWaitMs is the long poll's wait: long enough for every waiter to
	// be parked before the first gives up.
	wakeWaitMs = 30000
	ioTimeout  = 30 * time.Second
)

type mconn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialMalachi(ctx context.Context, addr string, tcfg *tls.Config) (*mconn, error) {
	d := net.Dialer{Timeout: ioTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcfg != nil {
		tc := tls.Client(nc, tcfg)
		hctx, cancel := context.WithTimeout(ctx, ioTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tc
	}
	return &mconn{nc: nc, br: bufio.NewReaderSize(nc, 512)}, nil
}

func (c *mconn) send(frames ...[]byte) error {
	var out []byte
	for _, f := range frames {
		out = append(out, f...)
	}
	c.nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	_, err := c.nc.Write(out)
	return err
}

// recv reads one answer: its correlation id and ok payload, or the
// node's refusal as an error.
func (c *mconn) recv(timeout time.Duration) (uint32, []byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	body, err := wire.ReadFrame(c.br, 0, nil)
	if err != nil {
		return 0, nil, err
	}
	corr, code, payload, err := wire.ParseResponse(body)
	switch {
	case err != nil:
		return 0, nil, err
	case code == wire.CodeErrorHint:
		reason, ms, _ := wire.DecodeHintError(payload)
		return corr, nil, fmt.Errorf("refused: %s (retry after %d ms)", reason, ms)
	case code != wire.CodeOK:
		reason, _ := wire.DecodeError(payload)
		return corr, nil, fmt.Errorf("refused: %s", reason)
	}
	return corr, payload, nil
}

// call sends req and wants its ok answer.
func (c *mconn) call(corr uint32, req wire.Request) ([]byte, error) {
	if err := c.send(wire.AppendRequestFrame(nil, corr, req)); err != nil {
		return nil, err
	}
	got, payload, err := c.recv(ioTimeout)
	if err == nil && got != corr {
		err = fmt.Errorf("answer to %d, want %d", got, corr)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wire.KeyName(req.APIKey()), err)
	}
	return payload, nil
}

// login logs in with the password and returns the token it was given.
func (c *mconn) login() (string, error) {
	user, pass := benchUser, benchPassword
	payload, err := c.call(1, wire.AuthRequest{User: &user, Password: &pass})
	if err != nil {
		return "", err
	}
	var tok wire.TokenResponse
	if err := tok.Decode(payload); err != nil {
		return "", err
	}
	return tok.Token, nil
}

// resume logs in with a session token, which must resume (no hash).
func (c *mconn) resume(token string) error {
	payload, err := c.call(1, wire.SessionAuthRequest{Token: &token})
	if err != nil {
		return err
	}
	var resp wire.SessionAuthResponse
	if err := resp.Decode(payload); err != nil {
		return err
	}
	if !resp.Resumed {
		return fmt.Errorf("session_auth did not resume")
	}
	return nil
}

// malachiSide opens Malachi connections: conns[0] logs in by password
// and is the control connection; the others resume its session.
type malachiSide struct {
	addr  string
	tcfg  *tls.Config
	token string
	conns []*mconn
}

func (m *malachiSide) openFirst(ctx context.Context) error {
	c, err := dialMalachi(ctx, m.addr, m.tcfg)
	if err != nil {
		return err
	}
	if m.token, err = c.login(); err != nil {
		c.nc.Close()
		return err
	}
	m.conns = append(m.conns, c)
	return nil
}

func (m *malachiSide) openOne(ctx context.Context) (closer, error) {
	c, err := dialMalachi(ctx, m.addr, m.tcfg)
	if err != nil {
		return nil, err
	}
	if err := c.resume(m.token); err != nil {
		c.nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *mconn) Close() error { return c.nc.Close() }

// park leaves a long-poll fetch waiting on every waiter. A request
// answered behind the fetch shows the node has read the fetch and parked
// it.
func (m *malachiSide) park(ctx context.Context, waiters []*mconn) error {
	topic := wakeTopic
	if _, err := m.conns[0].call(2, wire.CreateTopicRequest{Topic: &topic, Bits: 8}); err != nil {
		return err
	}
	fetch := wire.AppendRequestFrame(nil, 3, wire.FetchRequest{Topic: &topic, Max: 10, WaitMs: wakeWaitMs})
	list := wire.AppendRequestFrame(nil, 4, wire.ListTopicsRequest{})
	return forEach(ctx, len(waiters), 16, func(i int) error {
		w := waiters[i]
		if err := w.send(fetch, list); err != nil {
			return err
		}
		corr, _, err := w.recv(ioTimeout)
		if err == nil && corr != 4 {
			err = fmt.Errorf("answer to %d before the list_topics behind the fetch", corr)
		}
		return err
	})
}

// wake produces one record on the control connection and times each
// parked fetch's answer from the produce's send and from its ack.
func (m *malachiSide) wake(ctx context.Context, waiters []*mconn) (wakeTimes, error) {
	at := make([]time.Time, len(waiters))
	errs := make(chan error, len(waiters))
	for i, w := range waiters {
		go func() {
			corr, _, err := w.recv(wakeWaitMs * time.Millisecond)
			if err == nil && corr != 3 {
				err = fmt.Errorf("answer to %d, want the fetch's", corr)
			}
			at[i] = time.Now()
			errs <- err
		}()
	}
	topic := wakeTopic
	sent := time.Now()
	_, err := m.conns[0].call(5, wire.ProduceRequest{Topic: &topic, Records: []wire.Record{{Key: []byte("k"), Value: []byte("wake up")}}})
	acked := time.Now()
	if err != nil {
		return wakeTimes{}, err
	}
	if err := collect(ctx, errs, len(waiters)); err != nil {
		return wakeTimes{}, fmt.Errorf("waiter: %w", err)
	}
	return wakeTimes{sent: sent, acked: acked, at: at}, nil
}
