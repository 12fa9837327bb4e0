package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// conn is one client connection. The reader goroutine (serve) owns the
// socket's read side and the connection's state; the writer goroutine owns
// the write side. Request goroutines are tracked in wg so a drain can wait
// for them.
type conn struct {
	s  *Server
	nc net.Conn
	ip string
	br *bufio.Reader

	out   chan []byte   // frames for the writer
	slots chan struct{} // in-flight request slots
	// ctx lives as long as the socket can be written; reqCtx ends when the
	// reader stops, so long polls and streams give up then and answer.
	ctx       context.Context
	cancel    context.CancelFunc
	reqCtx    context.Context
	reqCancel context.CancelFunc
	wg        sync.WaitGroup // request goroutines
	draining  chan struct{}
	drainMu   sync.Once
	closeMu   sync.Once

	id     broker.Identity
	authed bool
	stream *broker.Subscription // set once the connection is in stream mode
}

func newConn(s *Server, nc net.Conn, ip string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	reqCtx, reqCancel := context.WithCancel(ctx)
	return &conn{
		reqCtx: reqCtx, reqCancel: reqCancel,
		s: s, nc: nc, ip: ip,
		br:       bufio.NewReaderSize(nc, 64<<10),
		out:      make(chan []byte, s.cfg.MaxInFlight+16),
		slots:    make(chan struct{}, s.cfg.MaxInFlight),
		ctx:      ctx,
		cancel:   cancel,
		draining: make(chan struct{}),
	}
}

// serve runs the connection until the client leaves, an error closes it,
// or the server drains it.
func (c *conn) serve() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	c.reqCancel()
	c.wg.Wait() // in-flight requests finish and queue their answers
	close(c.out)
	<-writerDone
	c.close()
}

// drain asks the connection to stop reading new requests; in-flight ones
// complete and are answered.
func (c *conn) drain() {
	c.drainMu.Do(func() {
		close(c.draining)
		c.nc.SetReadDeadline(time.Now())
	})
}

func (c *conn) close() {
	c.closeMu.Do(func() {
		c.cancel()
		c.nc.Close()
	})
}

func (c *conn) isDraining() bool {
	select {
	case <-c.draining:
		return true
	default:
		return false
	}
}

// readLoop reads frames until the connection ends. The first frame must
// authenticate; every later one is dispatched.
func (c *conn) readLoop() {
	var buf []byte
	for {
		timeout := c.s.cfg.IdleTimeout
		if !c.authed {
			timeout = c.s.cfg.AuthTimeout
		}
		if c.stream != nil {
			timeout = 0 // a stream lives as long as its socket
		}
		if c.isDraining() {
			return
		}
		if timeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(timeout))
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		body, err := wire.ReadFrame(c.br, c.s.cfg.MaxFrame, buf)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.send(wire.AppendErrorFrame(nil, 0, "frame_too_large"))
			}
			return
		}
		buf = body[:0]
		if !c.handleFrame(body) {
			return
		}
	}
}

// handleFrame processes one frame; false closes the connection.
func (c *conn) handleFrame(body []byte) bool {
	key, corr, payload, err := wire.ParseRequestHeader(body)
	if err != nil {
		if !c.authed {
			c.send(wire.AppendErrorFrame(nil, 0, "auth_required"))
			return false
		}
		c.send(wire.AppendErrorFrame(nil, 0, "malformed_request"))
		return true
	}
	if !c.authed {
		return c.authenticate(key, corr, payload)
	}
	req, err := wire.DecodeRequest(key, payload)
	if err != nil {
		reason := "malformed_request"
		if errors.Is(err, wire.ErrUnknownAPIKey) {
			reason = "unknown_api_key"
		}
		c.send(wire.AppendErrorFrame(nil, corr, reason))
		return true
	}
	if c.stream != nil {
		return c.handleStreamFrame(corr, req)
	}
	c.dispatch(corr, req)
	return true
}

// authenticate handles the first frame: only auth keys are accepted.
func (c *conn) authenticate(key uint16, corr uint32, payload []byte) bool {
	switch key {
	case wire.KeyAuth:
		req, err := wire.DecodeRequest(key, payload)
		if err != nil {
			c.send(wire.AppendErrorFrame(nil, corr, "malformed_request"))
			return false
		}
		a := req.(*wire.AuthRequest)
		id, err := c.s.b.Authenticate(deref(a.User), deref(a.Password))
		if err != nil {
			c.send(wire.AppendErrorFrame(nil, corr, reason(err)))
			return false
		}
		c.id, c.authed = id, true
		c.send(wire.AppendOKFrame(nil, corr, &wire.TokenResponse{Token: id.Token}))
		return true
	case wire.KeyMTLSAuth:
		c.send(wire.AppendErrorFrame(nil, corr, "mtls_auth_disabled"))
		return false
	case wire.KeyTokenAuth:
		c.send(wire.AppendErrorFrame(nil, corr, "oidc_auth_disabled"))
		return false
	default:
		c.send(wire.AppendErrorFrame(nil, corr, "auth_required"))
		return false
	}
}

// handleStreamFrame accepts only stream_ack once a subscription runs.
func (c *conn) handleStreamFrame(corr uint32, req wire.Request) bool {
	ack, ok := req.(*wire.StreamAckRequest)
	if !ok {
		c.send(wire.AppendErrorFrame(nil, corr, "unexpected_frame"))
		return true
	}
	if err := c.stream.Ack(c.reqCtx, ack.Cursor, int(ack.Count)); err != nil {
		return false
	}
	return true
}

// send queues a frame for the writer. Callers are request goroutines or
// the reader; they may block when the writer falls behind (backpressure).
func (c *conn) send(frame []byte) {
	select {
	case c.out <- frame:
	case <-c.ctx.Done():
	}
}

// sendAsync queues a frame from a callback that must not block (the
// segment store's commit goroutine): if the queue is full the frame is
// handed to a short-lived goroutine tracked by wg.
//
// REQUIRES: the caller holds a wg count of its own until this returns.
func (c *conn) sendAsync(frame []byte) {
	select {
	case c.out <- frame:
		return
	default:
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.send(frame)
	}()
}

// writeLoop writes queued frames, flushing when the queue runs dry so
// pipelined answers share syscalls.
func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	for frame := range c.out {
		c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if _, err := bw.Write(frame); err != nil {
			c.fail()
			continue
		}
		if len(c.out) == 0 {
			if err := bw.Flush(); err != nil {
				c.fail()
			}
		}
	}
	bw.Flush()
}

// fail closes the socket after a write error; the reader then ends.
func (c *conn) fail() {
	c.cancel()
	c.nc.Close()
}

// acquire takes an in-flight slot, or reports that the connection ended.
func (c *conn) acquire() bool {
	select {
	case c.slots <- struct{}{}:
		return true
	case <-c.ctx.Done():
		return false
	}
}

func (c *conn) release() { <-c.slots }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
