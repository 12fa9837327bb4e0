package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// conn is one authenticated connection, TCP or TLS over TCP, multiplexed
// by correlation id.
//
// Any number of goroutines send requests; each registers a handler under a
// fresh correlation id, then writes its frame under wmu. The reader
// goroutine routes every answer to the handler of its correlation id. A
// writer flushes only when no other writer is queued behind it, so a burst
// of pipelined requests shares one syscall while a lone request is never
// left sitting in the buffer.
type conn struct {
	nc net.Conn
	// addr is the address it was dialled at.
	addr string
	// maxFrame bounds the answers read; maxSend bounds the requests sent,
	// the smaller of the client's limit and, with wire v2, the node's: a
	// request the node would refuse with frame_too_large, which closes
	// the connection, fails alone before it is sent.
	maxFrame, maxSend uint32
	writeTimeout      time.Duration
	// poll marks a connection of the poll lane (Client.pollConn), which
	// forget retires.
	poll bool
	// v2 is set when the node serves wire v2's topic_routes,
	// produce_batches and fetch_batches (and WithWireVersion allows them);
	// wire says what was negotiated. Both are fixed once dialled.
	v2   bool
	wire wireInfo
	// resumed is set when session_auth logged the connection in by its
	// session token, without a password hash.
	resumed bool

	queued atomic.Int32 // writers waiting for wmu

	wmu sync.Mutex // guards the following
	bw  *bufio.Writer

	mu sync.Mutex // guards the following
	// corr is the last correlation id handed out. Zero is never used: the
	// broker answers connection-level errors on correlation id 0.
	corr    uint32
	pending map[uint32]handler
	err     error // why the connection ended; nil while it is usable
	// retired: no new request may use the connection, which closes once
	// nothing is pending on it (see forget).
	retired bool

	done chan struct{} // closed when the reader goroutine exits
}

// handler receives the answers of one correlation id. Both methods are
// called from the reader goroutine (or from fail) and must not block.
type handler interface {
	// deliver gets one answer; the payload is the handler's to keep.
	deliver(code uint16, payload []byte)
	// fail ends the handler: the connection is gone.
	fail(err error)
	// stream reports whether more answers follow on the same correlation
	// id (a subscription), so the handler stays registered.
	stream() bool
}

// reply is one answer, or the error that replaced it.
type reply struct {
	code    uint16
	payload []byte
	err     error
}

// call is the handler of an ordinary request: exactly one reply.
type call struct{ ch chan reply }

func newCall() *call                          { return &call{ch: make(chan reply, 1)} }
func (c *call) deliver(code uint16, p []byte) { c.ch <- reply{code: code, payload: p} }
func (c *call) fail(err error)                { c.ch <- reply{err: err} }
func (c *call) stream() bool                  { return false }

// maxReadBuf is the largest read buffer a connection keeps between
// frames, and the largest answer read into a pooled payload buffer.
const maxReadBuf = 4 << 20

// Answers of minPooledPayload bytes or more (fetch pages) are read into
// payload buffers that payloadPool recycles once the page that holds them
// is released (BatchPage.Release): a reader going through a topic then
// allocates nothing per page, and gives the garbage collector nothing to
// sweep. They are sized in steps of payloadStep.
const (
	minPooledPayload = 64 << 10
	payloadStep      = 256 << 10
)

var payloadPool sync.Pool // of *[]byte

// payloadBuf returns a buffer of n bytes, from the pool when one there is
// large enough. A buffer it allocates has room for want bytes when want is
// larger, what its reader expects next (a Fetcher's recent pages), up to
// maxReadBuf, the largest pooled: a pooled buffer too small for the answer
// that draws it is dropped, and a reader whose pages vary in size (over
// many ranges, pages end on the batch boundaries of each range) would
// otherwise keep replacing its buffers, each new one paying its
// first-touch page faults again (docs/perf.md, "the client's page
// buffers"). Only new buffers are sized so: a pooled one that fits n is
// taken even if it is smaller than want, as putting it back would draw it
// again. One page of maxReadBuf in a Fetcher's window makes its new
// buffers that large, at most as many as it holds pages at once.
func payloadBuf(n, want int) []byte {
	if bp, _ := payloadPool.Get().(*[]byte); bp != nil && cap(*bp) >= n {
		return (*bp)[:n]
	}
	size := max(n, min(want, maxReadBuf))
	return make([]byte, n, (size+payloadStep-1)/payloadStep*payloadStep)
}

// releasePayload hands back a payload nothing uses any more.
func releasePayload(p []byte) {
	if cap(p) >= minPooledPayload && cap(p) <= maxReadBuf {
		p = p[:0]
		payloadPool.Put(&p)
	}
}

// payloadSizer is a handler that knows how large the answers to requests
// like its own have been (a Fetcher's pages): a buffer allocated for its
// answer is sized for that, so that it fits the next ones too.
type payloadSizer interface {
	// payloadSize is called from the reader goroutine and must not block.
	payloadSize() int
}

// framePool recycles request encoding buffers.
var framePool = sync.Pool{New: func() any { return new([]byte) }}

func putFrame(bp *[]byte) {
	if cap(*bp) > 4<<20 {
		return // let an unusually large buffer go
	}
	framePool.Put(bp)
}

// wireInfo is what a connection negotiated: the wire version in use and,
// with v2, the node's limits from api_versions.
type wireInfo struct {
	version int
	// maxFrame is the largest request frame the node accepts after
	// authentication; maxBatchBytes and maxBatchRecords bound one batch a
	// producer builds (raw records section, records). Zero with v1.
	maxFrame, maxBatchBytes, maxBatchRecords int
	// fetchSkips and groupSkips: the node serves version 2 of
	// fetch_batches and of describe_group, which report skips when asked.
	fetchSkips, groupSkips bool
	// statusRepair and topicCopies: the node serves version 2 of
	// cluster_status and of describe_topic, which carry the repair views
	// when asked.
	statusRepair, topicCopies bool
	// topicPages: the node serves version 3 of describe_topic, which
	// describes a topic by pages.
	topicPages bool
}

// v2Keys are the keys a connection needs to speak wire v2.
var v2Keys = []uint16{wire.KeyTopicRoutes, wire.KeyProduceBatches, wire.KeyFetchBatches}

// errProbeRefused means the node refused api_versions and then dropped
// the connection before authenticating: an older node, which takes nothing
// but authentication first. Dial again without asking.
var errProbeRefused = errors.New("malachi: api_versions refused before auth")

// dialConn connects to addr, or with seed addresses (WithSeeds) to the
// first of them that answers, starting from the last that did. See
// dialAddr for what one address's dial does.
func dialConn(ctx context.Context, addr string, cfg *config, probe bool) (*conn, error) {
	if cfg.seeds == nil {
		return dialAddr(ctx, addr, cfg, probe)
	}
	addrs := cfg.seeds.addrs
	first := int(cfg.seeds.next.Load())
	var err error
	for i := range addrs {
		k := (first + i) % len(addrs)
		var c *conn
		if c, err = dialAddr(ctx, addrs[k], cfg, probe); err == nil {
			cfg.seeds.next.Store(int32(k))
			return c, nil
		}
		var refusal *Error
		if ctx.Err() != nil || errors.As(err, &refusal) && !refusal.Retriable {
			return nil, err // the caller gave up, or a login every node refuses
		}
		cfg.logger.Debug("malachi: dial failed, trying the next address", "addr", addrs[k], "err", err)
	}
	return nil, err
}

// dialAddr connects to addr, runs the TLS handshake if configured,
// negotiates the wire version if probe is set and the configuration
// allows wire v2, authenticates and starts the reader.
func dialAddr(ctx context.Context, addr string, cfg *config, probe bool) (*conn, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.dialTimeout, ErrRequestTimeout)
	defer cancel()
	probe = probe && cfg.wireVersion >= 2
	plan := cfg.sess.plan(cfg)
	c, err := dialOnce(ctx, addr, cfg, probe, plan)
	if err != nil && plan.session && cfg.sess.refused(plan, cfg, err) {
		// A token-only resume refused, or a node that no longer serves
		// session_auth: log in as configured.
		c, err = dialOnce(ctx, addr, cfg, probe, authPlan{})
	}
	if errors.Is(err, errProbeRefused) {
		cfg.sess.setServed(false)
		c, err = dialOnce(ctx, addr, cfg, false, authPlan{})
	}
	if cfg.metrics != nil {
		cfg.metrics.OnConnect(ConnectEvent{Addr: addr, Duration: time.Since(start), Err: err})
	}
	return c, err
}

// dialOnce is one attempt of dialConn. With probe, api_versions (key 79,
// accepted before auth) goes out pipelined ahead of the auth frame, so
// negotiating costs no round trip. plan says how to log in.
func dialOnce(ctx context.Context, addr string, cfg *config, probe bool, plan authPlan) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, ErrRequestTimeout) {
			return nil, cause // the caller's context ended
		}
		return nil, fmt.Errorf("%w: dial %s: %w", ErrDisconnected, addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if cfg.tls != nil {
		if nc, err = handshake(ctx, nc, cfg.tls, addr); err != nil {
			return nil, err
		}
	}
	req, err := cfg.authRequest(ctx, plan)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := newConn(nc, cfg)
	c.addr = addr
	var versions *call
	if probe {
		versions = newCall()
		// Held back so that it leaves in one write with the auth frame: a
		// node that refuses the first frame and closes (tls_required on a
		// TLS-only node) would otherwise reset the second write before
		// its refusal is read.
		c.queued.Add(1)
		_, err := c.send(wire.APIVersionsRequest{}, versions)
		c.queued.Add(-1)
		if err != nil {
			// Under TLS 1.3 the server's refusal of the client certificate
			// can reach the reader before this frame is queued.
			c.close(ErrClosed)
			if refusal := tlsRefusal(err); cfg.tls != nil && refusal != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrTLS, addr, refusal)
			}
			return nil, err
		}
	}
	answer, err := c.roundTrip(ctx, req)
	// The node answers the frames before auth in order, so once the auth
	// frame is answered (or the connection failed) the probe's answer is
	// in; only a timeout leaves it missing.
	var probed *reply
	if versions != nil {
		select {
		case r := <-versions.ch:
			probed = &r
		default:
		}
	}
	if err != nil {
		c.close(ErrClosed)
		if refusal := tlsRefusal(err); cfg.tls != nil && refusal != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrTLS, addr, refusal)
		}
		// A node that predates wire v2 answers api_versions auth_required
		// and hangs up: dial again without asking. (The answer arrives
		// before the hang-up even when the unread auth frame turns it into
		// a reset.) A refusal of the whole connection (tls_required,
		// connection limits) comes on correlation id 0 and is the answer;
		// so is a failure without any answer to the probe (not a Malachi
		// node, or the network), which a second dial would only repeat.
		var refusal *Error
		if versions != nil && isConnError(err) && !errors.As(err, &refusal) &&
			probed != nil && probed.err == nil && probed.code != wire.CodeOK {
			return nil, errProbeRefused
		}
		return nil, err
	}
	c.resumed = cfg.sess.answered(req, answer)
	c.wire = wireInfo{version: 1}
	if probed != nil {
		cfg.sess.setServed(servesSession(*probed))
		c.negotiate(*probed, cfg)
	}
	return c, nil
}

// negotiate reads the answer to api_versions. A refusal (unknown_api_key
// from an older node) or an answer without the batch keys leaves the
// connection on wire v1.
func (c *conn) negotiate(r reply, cfg *config) {
	payload, err := r.result()
	if err != nil {
		return
	}
	var resp wire.APIVersionsResponse
	if resp.Decode(payload) != nil {
		return
	}
	for _, k := range v2Keys {
		if !resp.Serves(k, 1) {
			return
		}
	}
	c.v2 = true
	c.wire = wireInfo{
		version:         2,
		maxFrame:        int(resp.MaxFrame),
		maxBatchBytes:   int(resp.MaxBatchBytes),
		maxBatchRecords: int(resp.MaxBatchRecords),
		fetchSkips:      resp.Serves(wire.KeyFetchBatches, 2),
		groupSkips:      resp.Serves(wire.KeyDescribeGroup, 2),
		statusRepair:    resp.Serves(wire.KeyClusterStatus, 2),
		topicCopies:     resp.Serves(wire.KeyDescribeTopic, 2),
		topicPages:      resp.Serves(wire.KeyDescribeTopic, 3),
	}
	if c.wire.maxFrame <= 0 || c.wire.maxFrame > int(cfg.maxFrame) {
		c.wire.maxFrame = int(cfg.maxFrame)
	}
	c.maxSend = uint32(c.wire.maxFrame)
	if c.wire.maxBatchBytes <= 0 {
		c.wire.maxBatchBytes = defaultNodeBytes
	}
	if c.wire.maxBatchRecords <= 0 {
		c.wire.maxBatchRecords = defaultNodeRecs
	}
}

func newConn(nc net.Conn, cfg *config) *conn {
	c := &conn{
		nc:           nc,
		maxFrame:     cfg.maxFrame,
		maxSend:      cfg.maxFrame,
		writeTimeout: cfg.requestTimeout,
		bw:           bufio.NewWriterSize(nc, 64<<10),
		pending:      make(map[uint32]handler),
		done:         make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// usable reports whether the connection can still carry new requests.
func (c *conn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && !c.retired
}

// send registers h (nil for a request with no answer) and writes req.
// It returns the correlation id used.
func (c *conn) send(req wire.Request, h handler) (uint32, error) {
	bp := framePool.Get().(*[]byte)
	defer putFrame(bp)

	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.corr++
	if c.corr == 0 {
		c.corr = 1
	}
	corr := c.corr
	c.mu.Unlock()

	frame := wire.AppendRequestFrame((*bp)[:0], corr, req)
	*bp = frame[:0]
	if len(frame)-wire.LenPrefixSize > int(c.maxSend) {
		return 0, fmt.Errorf("%w: %d bytes > limit %d", ErrRequestTooLarge, len(frame)-wire.LenPrefixSize, c.maxSend)
	}
	if h != nil {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		c.pending[corr] = h
		c.mu.Unlock()
	}
	if err := c.write(frame); err != nil {
		c.fail(fmt.Errorf("%w: %w", ErrDisconnected, err))
		return 0, c.failure()
	}
	return corr, nil
}

// write writes one frame and flushes unless another writer is queued to
// write next (it will flush).
func (c *conn) write(frame []byte) error {
	c.queued.Add(1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.queued.Add(-1)
	c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if _, err := c.bw.Write(frame); err != nil {
		return err
	}
	if c.queued.Load() > 0 {
		return nil
	}
	return c.bw.Flush()
}

// forget drops the handler of a request whose caller gave up; its answer,
// if it comes, is discarded. A connection of the poll lane is retired
// then: the wire has no way to cancel a long poll, whose slot on the node
// stays taken until its wait ends, but closing the connection ends every
// poll on it. It closes once its other polls are answered.
func (c *conn) forget(corr uint32) {
	c.mu.Lock()
	delete(c.pending, corr)
	if c.poll {
		c.retired = true
	}
	idle := c.idleLocked()
	c.mu.Unlock()
	if idle {
		c.fail(errRetired)
	}
}

// errRetired ends a retired connection once nothing is pending on it.
var errRetired = fmt.Errorf("%w: connection retired", ErrDisconnected)

// idleLocked reports whether c is retired and nothing is pending on it.
//
// REQUIRES: c.mu held.
func (c *conn) idleLocked() bool {
	return c.retired && c.err == nil && len(c.pending) == 0
}

// roundTrip sends req and waits for its answer, for ctx, or for the
// connection to end. An error answer becomes an *Error.
func (c *conn) roundTrip(ctx context.Context, req wire.Request) ([]byte, error) {
	cl := newCall()
	corr, err := c.send(req, cl)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-cl.ch:
		return r.result()
	case <-ctx.Done():
		c.forget(corr)
		return nil, context.Cause(ctx)
	}
}

// result turns a reply into an ok payload or an error.
func (r reply) result() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.code == wire.CodeOK {
		return r.payload, nil
	}
	if r.code == wire.CodeErrorHint {
		reason, ms, err := wire.DecodeHintError(r.payload)
		if err != nil {
			return nil, fmt.Errorf("%w: error answer: %w", ErrProtocol, err)
		}
		e := errorFor(reason)
		if ms == 0 {
			return nil, e
		}
		return nil, &Error{Reason: e.Reason, Retriable: e.Retriable, RetryAfter: time.Duration(ms) * time.Millisecond}
	}
	reason, err := wire.DecodeError(r.payload)
	if err != nil {
		return nil, fmt.Errorf("%w: error answer: %w", ErrProtocol, err)
	}
	return nil, errorFor(reason)
}

// readLoop routes answers to their handlers until the connection ends.
func (c *conn) readLoop() {
	defer close(c.done)
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	for {
		corr, code, payload, owned, err := c.readAnswer(br, &buf)
		var large *tooLarge
		if errors.As(err, &large) {
			c.refuseAnswer(large)
			continue
		}
		if err != nil {
			c.fail(err)
			return
		}
		if corr == 0 {
			// A connection-level refusal (frame_too_large, connection
			// limits): the broker closes the connection after it.
			_, err := reply{code: code, payload: payload}.result()
			c.fail(fmt.Errorf("%w: %w", ErrDisconnected, err))
			return
		}
		c.mu.Lock()
		h := c.pending[corr]
		if h != nil && !h.stream() {
			delete(c.pending, corr)
		}
		idle := c.idleLocked()
		c.mu.Unlock()
		switch {
		case h == nil && owned:
			releasePayload(payload)
		case h == nil:
		case owned:
			h.deliver(code, payload)
		default:
			h.deliver(code, slices.Clone(payload))
		}
		if idle {
			c.fail(errRetired)
		}
	}
}

// tooLarge is an answer over the client's frame limit, read and dropped.
type tooLarge struct {
	corr uint32
	n    uint32
}

func (e *tooLarge) Error() string { return "answer too large" }

// refuseAnswer fails the call whose answer was too large to read; the
// connection goes on.
func (c *conn) refuseAnswer(large *tooLarge) {
	c.mu.Lock()
	h := c.pending[large.corr]
	delete(c.pending, large.corr)
	idle := c.idleLocked()
	c.mu.Unlock()
	if h != nil {
		h.fail(fmt.Errorf("%w: %d bytes > limit %d (WithMaxFrame)", ErrAnswerTooLarge, large.n, c.maxFrame))
	}
	if idle {
		c.fail(errRetired)
	}
}

// skipAnswer reads past the answer of n bytes whose length prefix is next
// in br, keeping only its correlation id: an answer over the client's
// frame limit fails its call, not the connection.
func skipAnswer(br *bufio.Reader, n uint32) error {
	var hdr [wire.LenPrefixSize + wire.ResponseHeaderSize]byte
	if n < wire.ResponseHeaderSize {
		return fmt.Errorf("%w: answer of %d bytes", ErrProtocol, n)
	}
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, unexpectedEOF(err))
	}
	if _, err := br.Discard(int(n) - wire.ResponseHeaderSize); err != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, unexpectedEOF(err))
	}
	return &tooLarge{corr: binary.BigEndian.Uint32(hdr[wire.LenPrefixSize:]), n: n}
}

// readAnswer reads the next answer. A large one (a fetch page) is read
// straight into a payload buffer of its own from payloadPool (owned), so
// that its bytes are copied once, by the socket read; a small one's payload
// aliases *buf, which the next read reuses.
func (c *conn) readAnswer(br *bufio.Reader, buf *[]byte) (corr uint32, code uint16, payload []byte, owned bool, err error) {
	if prefix, perr := br.Peek(wire.LenPrefixSize); perr == nil {
		n := binary.BigEndian.Uint32(prefix)
		if n > c.maxFrame {
			return 0, 0, nil, false, skipAnswer(br, n)
		}
		if n >= minPooledPayload && n <= c.maxFrame && n <= maxReadBuf {
			var hdr [wire.LenPrefixSize + wire.ResponseHeaderSize]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return 0, 0, nil, false, fmt.Errorf("%w: %w", ErrDisconnected, unexpectedEOF(err))
			}
			corr = binary.BigEndian.Uint32(hdr[wire.LenPrefixSize:])
			code = binary.BigEndian.Uint16(hdr[wire.LenPrefixSize+4:])
			h := c.handler(corr)
			announceCursor(h, code, br)
			want := 0
			if ps, ok := h.(payloadSizer); ok {
				want = ps.payloadSize()
			}
			payload = payloadBuf(int(n)-wire.ResponseHeaderSize, want)
			if _, err := io.ReadFull(br, payload); err != nil {
				return 0, 0, nil, false, fmt.Errorf("%w: %w", ErrDisconnected, unexpectedEOF(err))
			}
			return corr, code, payload, true, nil
		}
	}
	body, err := wire.ReadFrame(br, c.maxFrame, *buf)
	if err != nil {
		return 0, 0, nil, false, fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	*buf = body[:0]
	if cap(*buf) > maxReadBuf {
		*buf = nil // do not pin one unusually large frame's buffer forever
	}
	corr, code, payload, err = wire.ParseResponse(body)
	if err != nil {
		return 0, 0, nil, false, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return corr, code, payload, false, nil
}

// cursorWatcher is a handler that wants the cursor at the head of a
// fetch_batches answer as soon as it arrives, before the rest of the page.
type cursorWatcher interface {
	// headCursor gets the cursor; it is called from the reader
	// goroutine, before deliver, and must not block.
	headCursor(cursor string)
}

// handler is the handler waiting for the answer corr, or nil.
func (c *conn) handler(corr uint32) handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[corr]
}

// announceCursor hands the cursor at the head of a large ok answer,
// already buffered or arriving first, to its handler if that watches for
// it. The cursor is peeked, not consumed: the payload is read whole after.
func announceCursor(h handler, code uint16, br *bufio.Reader) {
	w, _ := h.(cursorWatcher)
	if code != wire.CodeOK || w == nil {
		return
	}
	if cur, ok := peekCursor(br); ok {
		w.headCursor(cur)
	}
}

// peekCursor reads, without consuming it, the str(next_cursor) that
// starts a fetch_batches answer's payload.
func peekCursor(br *bufio.Reader) (string, bool) {
	const head = 1 + 4 // present:u8 len:u32
	b, err := br.Peek(head)
	if err != nil || b[0] != 1 {
		return "", false
	}
	n := int(binary.BigEndian.Uint32(b[1:]))
	if n > br.Size()-head {
		return "", false
	}
	if b, err = br.Peek(head + n); err != nil {
		return "", false
	}
	return string(b[head:]), true
}

// unexpectedEOF is err, with an end of input inside a frame said so.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// fail ends the connection once: it records err, closes the socket and
// fails every waiting handler.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.nc.Close()
	for _, h := range pending {
		h.fail(err)
	}
}

func (c *conn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close ends the connection with err and waits for the reader to exit.
func (c *conn) close(err error) {
	c.fail(err)
	<-c.done
}

// isConnError reports whether err means the connection failed, as opposed
// to an answer from the broker.
func isConnError(err error) bool {
	return errors.Is(err, ErrDisconnected) || errors.Is(err, ErrProtocol)
}
