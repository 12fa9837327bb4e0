package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

const (
	readBufferSize = 64 << 10
	// tlsWriteBuffer gathers a batch into few TLS records: tls.Conn has
	// no writev, and one record per frame would cost a syscall each.
	tlsWriteBuffer = 256 << 10
)

var errReaderEnded = errors.New("peer: connection's reader ended")

// dest is the outbound side of one destination node: its queue, its
// calls in flight, and the writer goroutine that dials it.
type dest struct {
	outbox
	t      *TCPTransport
	cancel context.CancelFunc // ends run; set before run starts

	mu struct {
		sync.Mutex
		addr string
		conn net.Conn // the established or dialling connection
	}
}

func newDest(t *TCPTransport, id uint64, addr string) *dest {
	d := &dest{
		outbox: outbox{
			to:    id,
			q:     newSendQueue(t.cfg.MaxQueueFrames, t.cfg.MaxQueueBytes),
			calls: newCallTable(t.cfg.MaxCallsInFlight),
			stats: t.counters.node(id),
		},
		t: t,
	}
	d.mu.addr = addr
	return d
}

// setAddr points later dials at addr and drops the connection to the
// old one, which may now be another node or none.
func (d *dest) setAddr(addr string) {
	d.mu.Lock()
	d.mu.addr = addr
	c := d.mu.conn
	d.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// stop ends the destination: calls fail with err (before the connection
// closes, so they see err rather than a lost connection), the queue is
// dropped, and run returns.
func (d *dest) stop(err error) {
	d.stopped(err)
	d.calls.close(err)
	d.q.close()
	d.cancel()
	d.mu.Lock()
	c := d.mu.conn
	d.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// run is the destination's writer goroutine, owned by the transport: it
// dials, writes batches until the connection fails, and dials again
// after a jittered back-off. It returns when ctx ends (RemoveNode or
// Close). Every connection failure fails the calls in flight: they
// cannot be answered on a new connection.
func (d *dest) run(ctx context.Context) {
	defer d.t.wg.Done()
	for failures := 0; ; failures++ {
		conn, br, caps, err := d.connect(ctx)
		if err == nil {
			failures = 0
			err = d.serve(ctx, conn, br, caps&capTrace != 0)
		} else if ctx.Err() == nil {
			d.stats.dialFailures.Add(1)
			d.t.cfg.Logger.Debug("peer: connect failed", "node", d.to, "err", err)
		}
		d.forget(conn)
		if ctx.Err() != nil {
			return
		}
		d.calls.failAll(fmt.Errorf("node %d: %w", d.to, ErrConnectionLost), fmt.Errorf("node %d: %w: %w", d.to, ErrUnreachable, err))
		if !d.backoff(ctx, failures) {
			return
		}
	}
}

// connect dials the destination and runs the TLS and peer handshakes,
// returning the capabilities the destination declared. The connection
// is registered first so that stop and setAddr can close it at any
// point.
func (d *dest) connect(ctx context.Context) (net.Conn, *bufio.Reader, byte, error) {
	d.mu.Lock()
	addr := d.mu.addr
	d.mu.Unlock()
	d.stats.dials.Add(1)
	dialer := net.Dialer{Timeout: d.t.cfg.DialTimeout}
	raw, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, 0, err
	}
	d.mu.Lock()
	if ctx.Err() != nil {
		d.mu.Unlock()
		raw.Close()
		return nil, nil, 0, ctx.Err()
	}
	d.mu.conn = raw
	d.mu.Unlock()
	conn, br, caps, err := d.handshake(ctx, raw, addr)
	if err != nil {
		raw.Close()
		if ctx.Err() == nil {
			d.t.counters.handshakeFailures.Add(1)
		}
		return raw, nil, 0, err
	}
	d.noTrace.Store(caps&capTrace == 0)
	d.stats.traces.Store(caps&capTrace != 0)
	return conn, br, caps, nil
}

func (d *dest) handshake(ctx context.Context, raw net.Conn, addr string) (net.Conn, *bufio.Reader, byte, error) {
	cfg := d.t.cfg
	if err := raw.SetDeadline(time.Now().Add(cfg.HandshakeTimeout)); err != nil {
		return nil, nil, 0, err
	}
	conn := raw
	if cfg.TLS != nil {
		tc := tls.Client(raw, clientTLS(cfg.TLS, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, 0, fmt.Errorf("%w: tls: %w", ErrHandshake, err)
		}
		if err := checkPeerNode(cfg, tc, d.to); err != nil {
			return nil, nil, 0, fmt.Errorf("%w: %s: %w", ErrHandshake, addr, err)
		}
		conn = tc
	}
	h := hello{version: protocolVersion, from: cfg.NodeID, to: d.to, cluster: cfg.ClusterID}
	if _, err := conn.Write(encodeFrame(kindHello, 0, 0, h.encode())); err != nil {
		return nil, nil, 0, err
	}
	br := bufio.NewReaderSize(conn, readBufferSize)
	f, _, err := readFrame(br, maxHelloBytes)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: reading the answer: %w", ErrHandshake, err)
	}
	if f.kind != kindHelloAck {
		return nil, nil, 0, fmt.Errorf("%w: answered with a frame of kind %d", ErrHandshake, f.kind)
	}
	ack, err := decodeHelloAck(f.payload)
	switch {
	case err != nil:
		return nil, nil, 0, fmt.Errorf("%w: %w", ErrHandshake, err)
	case !ack.ok:
		return nil, nil, 0, fmt.Errorf("%w by node %d at %s: %s", ErrHandshake, ack.node, addr, ack.reason)
	case ack.version != protocolVersion || ack.node != d.to:
		return nil, nil, 0, fmt.Errorf("%w: %s is node %d speaking version %d, want node %d version %d",
			ErrHandshake, addr, ack.node, ack.version, d.to, protocolVersion)
	}
	return conn, br, ack.caps, raw.SetDeadline(time.Time{})
}

// forget unregisters conn once it is closed.
func (d *dest) forget(conn net.Conn) {
	d.mu.Lock()
	d.mu.conn = nil
	d.mu.Unlock()
	d.stats.traces.Store(false)
	if conn != nil {
		conn.Close()
	}
}

// serve writes batches to an established connection and reads the
// answers to calls from it, until either fails or ctx ends; traces says
// whether the destination takes trace contexts. The reader goroutine is
// owned by serve, which waits for it.
func (d *dest) serve(ctx context.Context, conn net.Conn, br *bufio.Reader, traces bool) error {
	d.stats.connected.Store(true)
	defer d.stats.connected.Store(false)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		d.readAnswers(conn, br)
	}()
	err := d.writeLoop(ctx, conn, readerDone, traces)
	conn.Close()
	<-readerDone
	return err
}

// writeLoop writes everything queued in one batch, each time frames
// wait: one writev on TCP, a few large records on TLS. To a destination
// that does not take trace contexts (traces false), frames queued with
// one, before its handshake said so, go without it: its decoder would
// refuse them and close the connection.
func (d *dest) writeLoop(ctx context.Context, conn net.Conn, readerDone <-chan struct{}, traces bool) error {
	w := newBatchWriter(conn, d.t.cfg.WriteTimeout, d.stats)
	var batch []queued
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-readerDone:
			return errReaderEnded
		case <-d.q.ready:
		}
		var closed bool
		batch, closed = d.q.take(batch)
		if closed {
			return ErrClosed
		}
		for _, it := range batch {
			if it.call != 0 && !d.calls.markWritten(it.call) {
				continue
			}
			if !traces {
				it.frame = stripTrace(it.frame)
			}
			w.add(it.frame)
		}
		clear(batch)
		if err := w.flush(); err != nil {
			return err
		}
	}
}

// readAnswers reads responses from the destination until the connection
// fails.
func (d *dest) readAnswers(conn net.Conn, br *bufio.Reader) {
	for {
		f, n, err := readFrameWithin(br, d.t.cfg.MaxFrameBytes, conn, d.t.cfg.FrameReadTimeout)
		if err != nil {
			d.t.noteReadError(d.to, err)
			return
		}
		d.stats.framesReceived.Add(1)
		d.stats.bytesReceived.Add(uint64(n))
		switch f.kind {
		case kindResponse, kindError:
			d.answered(f)
		default:
			d.t.counters.protocolErrors.Add(1)
			d.t.cfg.Logger.Warn("peer: unexpected frame on an outbound connection", "node", d.to, "kind", f.kind)
			return
		}
	}
}

// backoff waits before the next dial: RedialMin doubled per failure up
// to RedialMax, then a random half of it shaved off so that nodes
// restarting together do not dial in step.
func (d *dest) backoff(ctx context.Context, failures int) bool {
	cfg := d.t.cfg
	wait := cfg.RedialMax
	if failures < 30 {
		wait = min(cfg.RedialMin<<failures, cfg.RedialMax)
	}
	wait = wait/2 + rand.N(wait/2+1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// clientTLS is cfg for dialling addr: the server's certificate must
// name the host of addr unless cfg names a server.
func clientTLS(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	c := cfg.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		c.ServerName = host
	}
	return c
}

// batchWriter writes a batch of frames with one deadline.
type batchWriter struct {
	conn    net.Conn
	timeout time.Duration
	stats   *nodeCounters
	bufs    net.Buffers
	bytes   int
	tls     *bufio.Writer // set on TLS connections, which cannot writev
}

func newBatchWriter(conn net.Conn, timeout time.Duration, stats *nodeCounters) *batchWriter {
	w := &batchWriter{conn: conn, timeout: timeout, stats: stats}
	if _, ok := conn.(*tls.Conn); ok {
		w.tls = bufio.NewWriterSize(conn, tlsWriteBuffer)
	}
	return w
}

func (w *batchWriter) add(frame []byte) {
	w.bufs = append(w.bufs, frame)
	w.bytes += len(frame)
}

func (w *batchWriter) flush() error {
	frames, bytes := len(w.bufs), w.bytes
	if frames == 0 {
		return nil
	}
	bufs := w.bufs
	w.bufs, w.bytes = w.bufs[:0], 0
	if err := w.conn.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
		return err
	}
	var err error
	if w.tls == nil {
		_, err = bufs.WriteTo(w.conn) // consumes bufs; w.bufs keeps the backing array
	} else {
		for _, b := range bufs {
			if _, err = w.tls.Write(b); err != nil {
				break
			}
		}
		if err == nil {
			err = w.tls.Flush()
		}
	}
	clear(w.bufs[:frames])
	if err != nil {
		return err
	}
	w.stats.writes.Add(1)
	w.stats.framesSent.Add(uint64(frames))
	w.stats.bytesSent.Add(uint64(bytes))
	return nil
}
