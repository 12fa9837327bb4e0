package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// inConn is an accepted connection: frames from one source node, and
// the answers to its calls going back.
type inConn struct {
	t     *TCPTransport
	conn  net.Conn // the raw connection; closing it stops everything
	from  uint64   // set by the handshake
	q     *sendQueue
	stats *nodeCounters
	// replaced is set when a newer connection from the same node takes
	// over: frames still buffered here are dropped, not delivered.
	replaced atomic.Bool
	// readDone is closed when the reader has stopped delivering frames.
	readDone chan struct{}
}

// acceptLoop is the transport's accept goroutine; it returns when Close
// closes the listener. A failed accept (descriptors exhausted) backs off
// instead of spinning.
func (t *TCPTransport) acceptLoop(ln net.Listener) {
	defer t.wg.Done()
	wait := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.cfg.Logger.Warn("peer: accept failed", "err", err)
			if !t.pause(wait) {
				return
			}
			wait = min(2*wait, time.Second)
			continue
		}
		wait = 5 * time.Millisecond
		if ic := t.admit(c); ic != nil {
			go t.serveInbound(ic)
		}
	}
}

// pause waits d, or less if the transport closes; false when it closed.
func (t *TCPTransport) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.quit:
		return false
	}
}

// admit registers an accepted connection, or closes it when the
// transport is closed or MaxInboundConns are open.
func (t *TCPTransport) admit(c net.Conn) *inConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed || len(t.mu.inbound) >= t.cfg.MaxInboundConns {
		c.Close()
		if !t.mu.closed {
			t.counters.connsRefused.Add(1)
		}
		return nil
	}
	ic := &inConn{t: t, conn: c, q: newSendQueue(t.cfg.MaxQueueFrames, t.cfg.MaxQueueBytes), readDone: make(chan struct{})}
	t.mu.inbound[ic] = struct{}{}
	t.wg.Add(1)
	return ic
}

// serveInbound is the reader goroutine of an accepted connection, owned
// by the transport: it runs the handshakes, then reads frames until the
// connection fails or Close closes it. It owns the connection's writer
// goroutine and waits for it; call handlers it started see their
// context cancelled when it returns.
func (t *TCPTransport) serveInbound(ic *inConn) {
	defer t.wg.Done()
	defer t.dropInbound(ic)
	readDone := sync.OnceFunc(func() { close(ic.readDone) })
	defer readDone()
	conn, br, from, err := t.acceptHandshake(ic.conn)
	if err != nil {
		t.counters.handshakeFailures.Add(1)
		t.cfg.Logger.Warn("peer: refused a connection", "remote", ic.conn.RemoteAddr().String(), "err", err)
		return
	}
	ic.from = from
	ic.stats = t.counters.node(from)
	if !t.registerSource(ic) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		ic.writeLoop(conn)
	}()
	ic.readLoop(ctx, conn, br)
	readDone()
	cancel()
	ic.conn.Close()
	ic.q.close()
	<-writerDone
}

// registerSource makes ic the connection of its source node, closing an
// older one: a node dials each destination once, so an older connection
// is one its peer has given up on. Frames of one source are delivered
// one at a time and in order, so ic delivers nothing until the older
// connection's reader has returned (from the handler it may be in);
// what the older connection still held is dropped, as a connection
// failure drops it. False when the transport closed meanwhile.
func (t *TCPTransport) registerSource(ic *inConn) bool {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return false
	}
	old := t.mu.byNode[ic.from]
	t.mu.byNode[ic.from] = ic
	t.mu.Unlock()
	if old == nil {
		return true
	}
	old.replaced.Store(true)
	old.conn.Close()
	select {
	case <-old.readDone:
		return true
	case <-t.quit:
		return false
	}
}

func (t *TCPTransport) dropInbound(ic *inConn) {
	t.mu.Lock()
	delete(t.mu.inbound, ic)
	if t.mu.byNode[ic.from] == ic {
		delete(t.mu.byNode, ic.from)
	}
	t.mu.Unlock()
	ic.conn.Close()
}

// acceptHandshake runs the TLS handshake (when configured) and the peer
// handshake, answering a refusal with its reason before failing.
func (t *TCPTransport) acceptHandshake(raw net.Conn) (net.Conn, *bufio.Reader, uint64, error) {
	if err := raw.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout)); err != nil {
		return nil, nil, 0, err
	}
	conn := raw
	if t.cfg.TLS != nil {
		tc := tls.Server(raw, t.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			return nil, nil, 0, fmt.Errorf("tls: %w", err)
		}
		conn = tc
	}
	br := bufio.NewReaderSize(conn, readBufferSize)
	f, _, err := readFrame(br, maxHelloBytes)
	if err != nil {
		return nil, nil, 0, err
	}
	if f.kind != kindHello {
		return nil, nil, 0, fmt.Errorf("first frame is of kind %d, not a handshake", f.kind)
	}
	h, err := decodeHello(f.payload)
	if err != nil {
		return nil, nil, 0, err
	}
	reason := t.checkHello(h)
	if reason == "" {
		if err := checkPeerNode(t.cfg, conn, h.from); err != nil {
			reason = err.Error()
		}
	}
	ack := helloAck{version: protocolVersion, node: t.cfg.NodeID, ok: reason == "", reason: reason}
	if t.cfg.TraceContext {
		ack.caps |= capTrace
	}
	if _, err := conn.Write(encodeFrame(kindHelloAck, 0, 0, ack.encode())); err != nil {
		return nil, nil, 0, err
	}
	if reason != "" {
		return nil, nil, 0, fmt.Errorf("%w: node %d: %s", ErrHandshake, h.from, reason)
	}
	return conn, br, h.from, raw.SetDeadline(time.Time{})
}

// checkHello says why h is refused, or "".
func (t *TCPTransport) checkHello(h hello) string {
	switch {
	case h.version != protocolVersion:
		return fmt.Sprintf("protocol version %d, this node speaks %d", h.version, protocolVersion)
	case h.cluster != t.cfg.ClusterID:
		return fmt.Sprintf("cluster %q, this node belongs to %q", h.cluster, t.cfg.ClusterID)
	case h.to != t.cfg.NodeID:
		return fmt.Sprintf("addressed to node %d, this is node %d", h.to, t.cfg.NodeID)
	case h.from == 0:
		return "node id 0"
	}
	return ""
}

// readLoop reads frames until the connection fails: one-way frames go
// to their handler inline, requests to the handler pool.
func (ic *inConn) readLoop(ctx context.Context, conn net.Conn, br *bufio.Reader) {
	t := ic.t
	for {
		f, n, err := readFrameWithin(br, t.cfg.MaxFrameBytes, conn, t.cfg.FrameReadTimeout)
		if err != nil {
			t.noteReadError(ic.from, err)
			return
		}
		if ic.replaced.Load() {
			return
		}
		ic.stats.framesReceived.Add(1)
		ic.stats.bytesReceived.Add(uint64(n))
		switch f.kind {
		case kindMessage:
			t.deliver(ic.from, f)
		case kindRequest:
			ic.dispatch(ctx, f)
		default:
			t.counters.protocolErrors.Add(1)
			t.cfg.Logger.Warn("peer: unexpected frame on an inbound connection", "node", ic.from, "kind", f.kind)
			return
		}
	}
}

// dispatch starts the call handler of f on a goroutine of its own, if the
// pool admits it, or answers the refusal.
func (ic *inConn) dispatch(ctx context.Context, f frame) {
	t := ic.t
	h := t.admitCall(ic.from, f, ic.reply)
	if h == nil {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.runCall(ctx, h, ic.from, f, ic.reply)
	}()
}

// reply queues an answer. A source whose answers pile up beyond the
// queue's bound is not reading them: its connection is closed.
func (ic *inConn) reply(id uint64, k kind, payload []byte) {
	err := ic.q.push(queued{frame: encodeFrame(k, 0, id, payload)})
	if errors.Is(err, ErrBackpressure) {
		ic.t.cfg.Logger.Warn("peer: closing a connection whose answers are not read", "node", ic.from)
		ic.conn.Close()
	}
}

// writeLoop is the connection's writer goroutine, owned by its reader:
// it writes queued answers in batches and returns when the queue is
// closed or a write fails.
func (ic *inConn) writeLoop(conn net.Conn) {
	w := newBatchWriter(conn, ic.t.cfg.WriteTimeout, ic.stats)
	var batch []queued
	for range ic.q.ready {
		var closed bool
		batch, closed = ic.q.take(batch)
		if closed {
			return
		}
		for _, it := range batch {
			w.add(it.frame)
		}
		clear(batch)
		if err := w.flush(); err != nil {
			ic.conn.Close()
			return
		}
	}
}

// noteReadError counts why a connection's reader stopped.
func (t *TCPTransport) noteReadError(node uint64, err error) {
	switch {
	case errors.Is(err, ErrCorruptFrame):
		t.counters.corruptFrames.Add(1)
	case errors.Is(err, ErrFrameTooLarge):
		t.counters.oversizeFrames.Add(1)
	case errors.Is(err, errMalformed):
		t.counters.protocolErrors.Add(1)
	default:
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			t.cfg.Logger.Debug("peer: connection ended", "node", node, "err", err)
		}
		return
	}
	t.cfg.Logger.Warn("peer: closed a connection for a bad frame", "node", node, "err", err)
}
