package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// conn is one client connection. The reader goroutine (serve) owns the
// socket's read side and the connection's state; the writer goroutine owns
// the write side. Request goroutines and produces waiting for durability
// are tracked in wg so a drain can wait for them.
//
// Slots bound what a connection may owe its client. The reader takes one
// before it admits a request (and before any frame it sends of its own);
// the request keeps it until its answer is queued, and the answer keeps it
// until the writer has written it. out has room for every slot, so queueing
// an answer never blocks: produce answers are queued from the segment
// store's commit goroutine, which must not wait for a client. A client that
// does not read therefore leaves every slot with an answer the writer cannot
// get rid of, and the reader, waiting for a slot, stops reading: TCP pushes
// back on the client. The writer's deadline then closes the connection.
type conn struct {
	s  *Server
	nc net.Conn
	ip string
	br *bufio.Reader

	out   chan []byte   // frames for the writer, each holding a slot
	slots chan struct{} // MaxInFlight answer slots
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

	// Gauges tests read to check the bounds above: goroutines this
	// connection started that have not ended (its writer, request
	// goroutines, a subscription); slots whose frame is not queued yet; and
	// whether the writer is writing a frame, which is where it waits when
	// the socket is full.
	goroutines atomic.Int32
	owed       atomic.Int32
	writing    atomic.Bool
}

func newConn(s *Server, nc net.Conn, ip string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	reqCtx, reqCancel := context.WithCancel(ctx)
	return &conn{
		reqCtx: reqCtx, reqCancel: reqCancel,
		s: s, nc: nc, ip: ip,
		br:       bufio.NewReaderSize(nc, 64<<10),
		out:      make(chan []byte, s.cfg.MaxInFlight),
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
	c.goroutines.Add(1)
	go func() {
		defer close(writerDone)
		defer c.goroutines.Add(-1)
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
		if timeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(timeout))
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		// Checked after the deadline is set: a drain that set its own
		// deadline just before ours replaced it is seen here.
		if c.isDraining() {
			return
		}
		body, err := wire.ReadFrame(c.br, c.s.cfg.MaxFrame, buf)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.reply(wire.AppendErrorFrame(nil, 0, "frame_too_large"))
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
			c.reply(wire.AppendErrorFrame(nil, 0, "auth_required"))
			return false
		}
		return c.reply(wire.AppendErrorFrame(nil, 0, "malformed_request"))
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
		return c.reply(wire.AppendErrorFrame(nil, corr, reason))
	}
	if c.stream != nil {
		return c.handleStreamFrame(corr, req)
	}
	// Waiting here for a slot is the connection's backpressure: the reader
	// reads nothing more until an earlier answer has been written.
	if !c.acquire() {
		return false
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
			c.reply(wire.AppendErrorFrame(nil, corr, "malformed_request"))
			return false
		}
		a := req.(*wire.AuthRequest)
		id, err := c.s.b.Authenticate(deref(a.User), deref(a.Password))
		if err != nil {
			c.reply(wire.AppendErrorFrame(nil, corr, reason(err)))
			return false
		}
		c.id, c.authed = id, true
		c.reply(wire.AppendOKFrame(nil, corr, &wire.TokenResponse{Token: id.Token}))
		return true
	case wire.KeyMTLSAuth:
		c.reply(wire.AppendErrorFrame(nil, corr, "mtls_auth_disabled"))
		return false
	case wire.KeyTokenAuth:
		c.reply(wire.AppendErrorFrame(nil, corr, "oidc_auth_disabled"))
		return false
	default:
		c.reply(wire.AppendErrorFrame(nil, corr, "auth_required"))
		return false
	}
}

// handleStreamFrame accepts only stream_ack once a subscription runs.
func (c *conn) handleStreamFrame(corr uint32, req wire.Request) bool {
	ack, ok := req.(*wire.StreamAckRequest)
	if !ok {
		return c.reply(wire.AppendErrorFrame(nil, corr, "unexpected_frame"))
	}
	if err := c.stream.Ack(c.reqCtx, ack.Cursor, int(ack.Count)); err != nil {
		return false
	}
	return true
}

// acquire takes a slot. It blocks while every slot is taken — by requests
// still being worked on or by answers the client has not read yet — and
// reports false if the connection fails or starts draining first.
func (c *conn) acquire() bool {
	select {
	case c.slots <- struct{}{}:
	default:
		select {
		case c.slots <- struct{}{}:
		case <-c.ctx.Done():
			return false
		case <-c.draining:
			return false
		}
	}
	c.owed.Add(1)
	return true
}

// queue hands a frame to the writer. The caller holds a slot, which passes
// to the frame; out has room for every slot, so this never blocks.
func (c *conn) queue(frame []byte) {
	c.owed.Add(-1)
	c.out <- frame
}

// unused gives back a slot that will carry no frame.
func (c *conn) unused() {
	c.owed.Add(-1)
	<-c.slots
}

// reply takes a slot and queues frame, for the frames the reader and a
// subscription send; false if the connection failed or drains first.
func (c *conn) reply(frame []byte) bool {
	if !c.acquire() {
		return false
	}
	c.queue(frame)
	return true
}

// writeLoop writes queued frames, flushing when the queue runs dry so
// pipelined answers share syscalls. Each frame's slot is given back once
// the frame is written (or dropped, after the socket failed).
func (c *conn) writeLoop() {
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	for frame := range c.out {
		if c.ctx.Err() == nil {
			c.write(bw, frame)
		}
		<-c.slots
	}
	if c.ctx.Err() == nil {
		bw.Flush()
	}
}

// write buffers one frame, flushing when nothing else is queued. A write
// that does not complete within the write timeout fails the connection.
func (c *conn) write(bw *bufio.Writer, frame []byte) {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	c.writing.Store(true)
	_, err := bw.Write(frame)
	if err == nil && len(c.out) == 0 {
		err = bw.Flush()
	}
	c.writing.Store(false)
	if err != nil {
		c.fail()
	}
}

// fail closes the socket after a write error; the reader then ends.
func (c *conn) fail() {
	c.cancel()
	c.nc.Close()
}

// spawn runs f on a request goroutine, tracked by wg so serve waits for it.
func (c *conn) spawn(f func()) {
	c.wg.Add(1)
	c.goroutines.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.goroutines.Add(-1)
		f()
	}()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
