package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// conn is one client connection. The reader goroutine (serve) owns the
// socket's read side and the connection's state; a writer goroutine runs
// while answers wait to be written and owns the write side then. Request
// goroutines and produces waiting for durability are tracked in wg so a
// drain can wait for them.
//
// An idle connection holds its reader goroutine, blocked on the next
// length prefix with no buffer, and nothing else: read-ahead, frame and
// write buffers are borrowed from node-wide pools while traffic flows
// (framepool.go), and the writer goroutine exists only while there is
// something to write.
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
// The out queue therefore never holds more than MaxInFlight frames.
//
// The byte budget (budget.go) bounds the same answers by size: a fetch
// reserves room for the largest answer it could give before it runs, and
// the reader also waits while queued answers fill the budget. A second
// budget bounds the request frames the connection holds: the reader
// charges each frame before it reads the body, and the charge stays until
// the frame is given back, which for produce_batches is once its batches
// are durable. Slots alone would let 256 such produces of a megabyte each
// wait for the disk.
type conn struct {
	// countedAuthed: c has left Server.mu.preAuth (guarded by Server.mu).
	countedAuthed bool
	s             *Server
	// raw is the accepted socket: deadlines and Close go to it from any
	// goroutine. nc is what frames are read from and written to — raw,
	// or the TLS connection over it — set by serve before the writer
	// starts and not changed after.
	raw      net.Conn
	nc       net.Conn
	ip       string
	accepted time.Time
	in       inbuf                               // reader goroutine only
	hdr      [4]byte                             // the length prefix being read; reader goroutine only
	tls      atomic.Pointer[tls.ConnectionState] // set once the handshake completes

	// out holds frames for the writer, each holding a slot; writerOn says
	// a writer goroutine runs and will take them. Guarded by outMu.
	outMu    sync.Mutex
	out      []outFrame
	writerOn bool
	writers  sync.WaitGroup // the writer goroutine, while it runs
	slots    chan struct{}  // MaxInFlight answer slots
	budget   *byteBudget
	requests *byteBudget // request frames held (MaxConnRequestBytes)
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

	// ident is who the connection authenticated as (auth.go); authed,
	// read only by the reader, says whether that happened yet.
	ident  atomic.Pointer[broker.Identity]
	authed bool
	// preAuthVersionCount counts api_versions frames before auth.
	preAuthVersionCount int
	// frame is the frame being handled, charged to requests; a handler
	// that keeps it past handleFrame sets it to nil and gives it back
	// (c.giveBack) when done. Reader goroutine only.
	frame  []byte
	stream *broker.Subscription // set once the connection is in stream mode

	// Gauges tests read to check the bounds above: goroutines this
	// connection started that have not ended (its writer, request
	// goroutines, a subscription); slots whose frame is not queued yet;
	// whether the writer is writing a frame, which is where it waits when
	// the socket is full; the buffer bytes the reader holds between
	// frames; and how many requests the reader has admitted.
	goroutines atomic.Int32
	owed       atomic.Int32
	writing    atomic.Bool
	readHeld   atomic.Int64
	admitted   atomic.Int64
}

func newConn(s *Server, nc net.Conn, ip string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	reqCtx, reqCancel := context.WithCancel(ctx)
	return &conn{
		reqCtx: reqCtx, reqCancel: reqCancel,
		s: s, raw: nc, ip: ip, accepted: time.Now(),
		slots:    make(chan struct{}, s.cfg.MaxInFlight),
		budget:   newByteBudget(s.cfg.MaxConnBytes),
		requests: newByteBudget(s.cfg.MaxConnRequestBytes),
		ctx:      ctx,
		cancel:   cancel,
		draining: make(chan struct{}),
	}
}

// tlsState returns the connection's TLS state once its handshake has
// completed, or nil for a plaintext connection. With a client CA
// configured (Server.verifiesClientCerts), a certificate the client
// presented has been verified against it: VerifiedChains[0][0] is the
// client's certificate. A client that presented none has empty
// PeerCertificates and VerifiedChains. It is set before the first frame
// is read and never changes.
func (c *conn) tlsState() *tls.ConnectionState { return c.tls.Load() }

// verifiesClientCerts reports whether TLS connections are asked for a
// client certificate that is verified against the configured CAs.
func (s *Server) verifiesClientCerts() bool { return s.tls != nil && s.cfg.TLSClientCAFile != "" }

// serve runs the connection until the client leaves, an error closes it,
// or the server drains it.
func (c *conn) serve() {
	if err := c.open(); err != nil {
		c.close()
		return
	}
	c.readLoop()
	c.in.release() // read-ahead a closing connection will not read
	c.reqCancel()
	c.wg.Wait()      // in-flight requests finish and queue their answers
	c.writers.Wait() // which the writer writes (or drops, if the socket failed)
	c.close()
}

// open settles what the connection speaks before any frame is read: with
// TLS configured, its first byte tells a TLS handshake from a plaintext
// frame (tls.go). The handshake must complete within the auth timeout,
// which runs from accept.
func (c *conn) open() error {
	c.nc = c.raw
	if c.s.tls != nil {
		c.raw.SetDeadline(c.accepted.Add(c.s.cfg.AuthTimeout))
		if c.isDraining() { // a drain's deadline set before ours was replaced
			return errConnEnding
		}
		var first [1]byte
		if _, err := io.ReadFull(c.raw, first[:]); err != nil {
			return err
		}
		sniffed := &sniffedConn{Conn: c.raw, first: first[:]}
		switch {
		case first[0] == recordTypeHandshake:
			tc := tls.Server(sniffed, c.s.tls.base)
			if err := tc.HandshakeContext(c.ctx); err != nil {
				c.s.handshakeErrors.Add(1)
				c.s.cfg.Logger.Debug("TLS handshake failed", "remote", c.raw.RemoteAddr(), "err", err)
				return err
			}
			state := tc.ConnectionState()
			c.tls.Store(&state)
			c.nc = tc
		case c.s.cfg.TLSOnly:
			c.s.plaintextRefused.Add(1)
			c.raw.Write(wire.AppendErrorFrame(nil, 0, wire.ReasonTLSRequired))
			return errPlaintextRefused
		default:
			c.nc = sniffed
		}
		c.raw.SetDeadline(time.Time{})
	}
	c.in = inbuf{src: c.nc, size: smallReadAhead}
	return nil
}

// drain asks the connection to stop reading new requests; in-flight ones
// complete and are answered.
func (c *conn) drain() {
	c.drainMu.Do(func() {
		close(c.draining)
		c.raw.SetReadDeadline(time.Now())
	})
}

func (c *conn) close() {
	c.closeMu.Do(func() {
		c.cancel()
		c.raw.Close()
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
// authenticate, within the auth timeout of accept and no larger than
// MaxPreAuthFrame; every later one is dispatched.
func (c *conn) readLoop() {
	for {
		limit := c.s.cfg.MaxFrame
		var (
			deadline time.Time
			idle     bool
		)
		switch {
		case !c.authed:
			limit = c.s.cfg.MaxPreAuthFrame
			deadline = c.accepted.Add(c.s.cfg.AuthTimeout)
		case c.stream != nil:
			// a stream lives as long as its socket
		case c.s.cfg.IdleTimeout > 0:
			deadline, idle = time.Now().Add(c.s.cfg.IdleTimeout), true
		}
		if !c.readDeadline(deadline) {
			return
		}
		body, err := c.readFrame(limit, idle)
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.reply(wire.AppendErrorFrame(nil, 0, wire.ReasonFrameTooLarge))
			}
			return
		}
		wasAuthed := c.authed
		c.frame = body
		ok := c.handleFrame(body)
		// Only produce_batches keeps its frame past handleFrame (its
		// batches are stored from it); it gives the buffer back once
		// they are durable. Other requests hold strings or copies.
		if c.frame != nil {
			c.giveBack(body)
			c.frame = nil
		}
		if !ok {
			return
		}
		c.readHeld.Store(int64(c.in.held()))
		if c.authed && !wasAuthed {
			c.in.size = fullReadAhead
		}
	}
}

// readDeadline sets the deadline of the next read from the socket and
// reports false if the connection drains. It checks after setting: a
// drain that set its own deadline just before ours replaced it is seen.
func (c *conn) readDeadline(t time.Time) bool {
	c.raw.SetReadDeadline(t)
	return !c.isDraining()
}

// readFrame reads one frame into a borrowed buffer, which the caller gives
// back (giveBack). The length prefix is checked against limit as soon as
// it arrives, before any of the body is read; then the reader waits until
// the frame's buffer fits in the connection's request budget. idle says
// the read deadline is the idle timeout: it runs again from the end of
// that wait, which is the node holding back, not the client.
func (c *conn) readFrame(limit uint32, idle bool) ([]byte, error) {
	if _, err := io.ReadFull(&c.in, c.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(c.hdr[:])
	if n > limit {
		return nil, fmt.Errorf("%w: %d bytes > limit %d", wire.ErrFrameTooLarge, n, limit)
	}
	if !c.requests.reserve(c.ctx, c.draining, int64(frameCap(int(n)))) {
		return nil, errConnEnding
	}
	if idle && !c.readDeadline(time.Now().Add(c.s.cfg.IdleTimeout)) {
		c.requests.settle(int64(frameCap(int(n))), 0)
		return nil, errConnEnding
	}
	body := borrowFrame(int(n))[:n]
	if _, err := io.ReadFull(&c.in, body); err != nil {
		c.giveBack(body)
		return nil, err
	}
	return body, nil
}

// giveBack returns a frame read by readFrame to the pool and its buffer's
// bytes (charged whole: a frame of 1 MiB and a few bytes holds a 2 MiB
// buffer) to the request budget. Safe from any goroutine.
func (c *conn) giveBack(frame []byte) {
	c.requests.settle(int64(cap(frame)), 0)
	returnFrame(frame)
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
	// Waiting here for room in the budget and for a slot is the
	// connection's backpressure: the reader reads nothing more until
	// earlier answers have been written.
	if !c.budget.room(c.ctx, c.draining) || !c.acquire() {
		return false
	}
	c.admitted.Add(1)
	c.dispatch(corr, req)
	return true
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
// to the frame; out has room for every slot, so this never blocks. The
// frame's bytes count against the budget until written.
func (c *conn) queue(frame []byte) { c.queueSettled(bytesFrame(frame), 0, false) }

// queueSettled queues f and gives back the reserved bytes that were held
// for it, in one step so the budget never counts both or neither. here
// says the caller is a request goroutine that may write f itself
// (enqueueHere).
func (c *conn) queueSettled(f outFrame, reserved int64, here bool) {
	c.budget.settle(reserved, f.n)
	c.owed.Add(-1)
	if here {
		c.enqueueHere(f)
		return
	}
	c.enqueue(f)
}

// unused gives back a slot that will carry no frame.
func (c *conn) unused() {
	c.owed.Add(-1)
	<-c.slots
}

// reply takes a slot and queues frame, for the frames the reader sends;
// false if the connection failed or drains first.
func (c *conn) reply(frame []byte) bool {
	if !c.acquire() {
		return false
	}
	c.queue(frame)
	return true
}

// push takes a slot and queues frame once it fits in the budget, for
// subscription pushes: the subscription reads its next page only after
// this returns, so a subscriber that reads slowly holds at most the
// budget plus the page waiting here.
func (c *conn) push(f outFrame) bool {
	if !c.acquire() {
		return false
	}
	if !c.budget.queueWhenFits(c.reqCtx, c.draining, f.n) {
		c.unused()
		return false
	}
	c.owed.Add(-1)
	c.enqueue(f)
	return true
}

// fail closes the socket after a write error; the reader then ends.
func (c *conn) fail() {
	c.cancel()
	c.raw.Close()
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
