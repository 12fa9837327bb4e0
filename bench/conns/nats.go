package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The NATS side speaks the NATS client protocol directly (INFO, CONNECT
// with user and password, SUB, PING/PONG, MSG): the module carries no
// NATS client, and the protocol needs a few lines. Every connection but
// the control one subscribes to wakeTopic, as an idle subscriber of a
// real application would, and has a reader goroutine that answers the
// server's PINGs and notes when a message arrives.

type nconn struct {
	nc  net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
	// got is sent the arrival time of each message (subscribers only).
	got chan time.Time
}

func (c *nconn) Close() error { return c.nc.Close() }

func (c *nconn) write(s string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	_, err := io.WriteString(c.nc, s)
	return err
}

func (c *nconn) line() (string, error) {
	s, err := c.br.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

// dialNATS connects, upgrades to TLS when tcfg is set (after the
// server's INFO, as NATS does), logs in, subscribes to subject unless it
// is empty, and returns once the server's PONG shows all of it was
// processed.
func dialNATS(ctx context.Context, addr string, tcfg *tls.Config, subject string) (*nconn, error) {
	d := net.Dialer{Timeout: ioTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &nconn{nc: nc, br: bufio.NewReaderSize(nc, 512)}
	nc.SetReadDeadline(time.Now().Add(ioTimeout))
	info, err := c.line()
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		nc.Close()
		return nil, fmt.Errorf("no INFO from %s: %q %v", addr, info, err)
	}
	if tcfg != nil {
		tc := tls.Client(nc, tcfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		c.nc, c.br = tc, bufio.NewReaderSize(tc, 512)
	}
	connect, _ := json.Marshal(map[string]any{
		"verbose": false, "pedantic": false, "user": benchUser, "pass": benchPassword,
		"tls_required": tcfg != nil, "name": "conns", "lang": "go", "version": "0", "protocol": 1,
	})
	msg := "CONNECT " + string(connect) + "\r\n"
	if subject != "" {
		msg += "SUB " + subject + " 1\r\n"
		c.got = make(chan time.Time, 1)
	}
	if err := c.write(msg + "PING\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.awaitPong(); err != nil {
		c.Close()
		return nil, err
	}
	c.nc.SetReadDeadline(time.Time{})
	if subject != "" {
		go c.readLoop()
	}
	return c, nil
}

// awaitPong reads until PONG, answering PINGs; -ERR is an error.
func (c *nconn) awaitPong() error {
	for {
		c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
		l, err := c.line()
		switch {
		case err != nil:
			return err
		case l == "PONG":
			return nil
		case l == "PING":
			if err := c.write("PONG\r\n"); err != nil {
				return err
			}
		case strings.HasPrefix(l, "-ERR"):
			return errors.New("nats: " + l)
		}
	}
}

// readLoop runs until the connection closes: it answers PINGs and
// reports each MSG's arrival.
func (c *nconn) readLoop() {
	for {
		l, err := c.line()
		if err != nil {
			return
		}
		switch {
		case l == "PING":
			if c.write("PONG\r\n") != nil {
				return
			}
		case strings.HasPrefix(l, "MSG "):
			now := time.Now()
			f := strings.Fields(l)
			n, err := strconv.Atoi(f[len(f)-1])
			if err != nil || n < 0 {
				return
			}
			if _, err := c.br.Discard(n + 2); err != nil {
				return
			}
			select {
			case c.got <- now:
			default: // a second message: only the first is timed
			}
		}
	}
}

// natsSide opens NATS connections: conns[0] is the control connection,
// not subscribed; the others subscribe to wakeTopic.
type natsSide struct {
	addr  string
	tcfg  *tls.Config
	conns []*nconn
}

func (n *natsSide) openFirst(ctx context.Context) error {
	c, err := dialNATS(ctx, n.addr, n.tcfg, "")
	if err != nil {
		return err
	}
	n.conns = append(n.conns, c)
	return nil
}

func (n *natsSide) openOne(ctx context.Context) (closer, error) {
	return dialNATS(ctx, n.addr, n.tcfg, wakeTopic)
}

// wake publishes one message on the control connection and times each
// subscriber's delivery from the publish's send and from the PONG that
// follows it (the server has processed the publish).
func (n *natsSide) wake(ctx context.Context, subs []*nconn) (wakeTimes, error) {
	at := make([]time.Time, len(subs))
	errs := make(chan error, len(subs))
	wctx, cancel := context.WithTimeout(ctx, wakeWaitMs*time.Millisecond)
	defer cancel()
	for i, s := range subs {
		go func() {
			select {
			case at[i] = <-s.got:
				errs <- nil
			case <-wctx.Done():
				errs <- errors.New("no message")
			}
		}()
	}
	sent := time.Now()
	if err := n.conns[0].write("PUB " + wakeTopic + " 7\r\nwake up\r\nPING\r\n"); err != nil {
		return wakeTimes{}, err
	}
	err := n.conns[0].awaitPong()
	acked := time.Now()
	if err != nil {
		return wakeTimes{}, err
	}
	if err := collect(ctx, errs, len(subs)); err != nil {
		return wakeTimes{}, fmt.Errorf("subscriber: %w", err)
	}
	return wakeTimes{sent: sent, acked: acked, at: at}, nil
}
