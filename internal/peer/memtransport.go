package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// MemTransport is the in-memory Transport of a MemNetwork.
type MemTransport struct {
	net          *MemNetwork
	cfg          Config
	addr         string
	handlers     [NumChannels]Handler
	callHandlers [NumChannels]CallHandler
	pool         *handlerPool
	counters     counters
	wg           sync.WaitGroup // delivery goroutines, call handlers, receives under way

	mu struct {
		sync.Mutex
		started, closed bool
		addrs           map[uint64]string
		links           map[uint64]*memLink        // by destination
		replies         map[*MemTransport]*memLink // answers to callers
		cancels         map[uint64]context.CancelFunc
		nextHandler     uint64
	}
}

var _ Transport = (*MemTransport)(nil)

// ID is this node's id.
func (t *MemTransport) ID() uint64 { return t.cfg.NodeID }

// Addr is the address other transports reach this one at.
func (t *MemTransport) Addr() string { return t.addr }

// Handle registers the one-way handler of ch; see Transport.
func (t *MemTransport) Handle(ch Channel, h Handler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := registrable(ch, t.mu.started || t.mu.closed, ch.valid() && t.handlers[ch] != nil); err != nil {
		return err
	}
	t.handlers[ch] = h
	return nil
}

// HandleCall registers the call handler of ch; see Transport.
func (t *MemTransport) HandleCall(ch Channel, h CallHandler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := registrable(ch, t.mu.started || t.mu.closed, ch.valid() && t.callHandlers[ch] != nil); err != nil {
		return err
	}
	t.callHandlers[ch] = h
	return nil
}

// Start makes the transport reachable at its address.
func (t *MemTransport) Start() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.mu.closed:
		return ErrClosed
	case t.mu.started:
		return errors.New("peer: already started")
	}
	if err := t.net.register(t); err != nil {
		return err
	}
	t.mu.started = true
	return nil
}

// SetAddr records where node is reached; see Transport.
func (t *MemTransport) SetAddr(node uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.addrs[node] = addr
	if l := t.mu.links[node]; l != nil {
		l.setAddr(addr)
	}
}

// RemoveNode forgets node; see Transport.
func (t *MemTransport) RemoveNode(node uint64) {
	t.mu.Lock()
	l := t.mu.links[node]
	delete(t.mu.links, node)
	delete(t.mu.addrs, node)
	t.mu.Unlock()
	if l != nil {
		l.stop(ErrUnknownNode)
	}
	t.counters.forget(node)
}

// Send queues payload for to; see Transport. payload is copied.
func (t *MemTransport) Send(to uint64, ch Channel, payload []byte) error {
	if err := checkOut(t.cfg, ch, len(payload)); err != nil {
		return err
	}
	l, err := t.link(to)
	if err != nil {
		return err
	}
	return l.push(queued{frame: encodeFrame(kindMessage, ch, 0, payload)})
}

// Call sends req to to and waits for the answer; see Transport.
func (t *MemTransport) Call(ctx context.Context, to uint64, ch Channel, req []byte) ([]byte, error) {
	if err := checkOut(t.cfg, ch, len(req)); err != nil {
		return nil, err
	}
	l, err := t.link(to)
	if err != nil {
		return nil, err
	}
	id, c, err := l.calls.add()
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", to, err)
	}
	if err := l.push(queued{frame: encodeFrame(kindRequest, ch, id, req), call: id}); err != nil {
		l.calls.remove(id)
		return nil, err
	}
	return l.calls.wait(ctx, id, c)
}

// link returns the link to node, starting its delivery goroutine on
// first use.
func (t *MemTransport) link(node uint64) (*memLink, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return nil, ErrClosed
	}
	if l := t.mu.links[node]; l != nil {
		return l, nil
	}
	addr, ok := t.mu.addrs[node]
	if !ok {
		return nil, fmt.Errorf("%w: node %d", ErrUnknownNode, node)
	}
	l := t.startLinkLocked(node, nil)
	l.addr = addr
	l.calls = newCallTable(t.cfg.MaxCallsInFlight)
	t.mu.links[node] = l
	return l, nil
}

// replyLink returns the link carrying answers to caller.
// REQUIRES: t.mu held, t not closed.
func (t *MemTransport) replyLinkLocked(caller *MemTransport) *memLink {
	if l := t.mu.replies[caller]; l != nil {
		return l
	}
	l := t.startLinkLocked(caller.cfg.NodeID, caller)
	t.mu.replies[caller] = l
	return l
}

// REQUIRES: t.mu held, t not closed.
func (t *MemTransport) startLinkLocked(node uint64, target *MemTransport) *memLink {
	l := &memLink{
		owner:  t,
		to:     node,
		target: target,
		q:      newSendQueue(t.cfg.MaxQueueFrames, t.cfg.MaxQueueBytes),
		stats:  t.counters.node(node),
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	t.wg.Add(1)
	go l.run(ctx)
	return l
}

// poke wakes the link to node so that it looks at its held frames.
func (t *MemTransport) poke(node uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.mu.links[node]; l != nil {
		l.q.signal()
	}
	for caller, l := range t.mu.replies {
		if caller.cfg.NodeID == node {
			l.q.signal()
		}
	}
}

func checkOut(cfg Config, ch Channel, n int) error {
	if !ch.valid() {
		return ErrBadChannel
	}
	if frameBytes(n) > cfg.MaxFrameBytes {
		return fmt.Errorf("%w: %d payload bytes", ErrFrameTooLarge, n)
	}
	return nil
}

// Stats returns the transport's counters.
func (t *MemTransport) Stats() Stats {
	return t.counters.snapshot(func(node uint64) (int, int, int) {
		t.mu.Lock()
		l := t.mu.links[node]
		t.mu.Unlock()
		if l == nil {
			return 0, 0, 0
		}
		frames, bytes := l.q.depth()
		return frames, bytes, l.calls.len()
	})
}

// Close stops the transport; see Transport.
func (t *MemTransport) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil
	}
	t.mu.closed = true
	links := make([]*memLink, 0, len(t.mu.links)+len(t.mu.replies))
	for _, l := range t.mu.links {
		links = append(links, l)
	}
	for _, l := range t.mu.replies {
		links = append(links, l)
	}
	for _, cancel := range t.mu.cancels {
		cancel()
	}
	t.mu.Unlock()
	t.net.unregister(t)
	for _, l := range links {
		l.stop(ErrClosed)
	}
	// Over TCP the callers' connections to this node drop now, failing
	// their calls in flight; the callers' links play those connections.
	for _, s := range t.net.transports() {
		if s != t {
			s.lostConnection(t.cfg.NodeID, t.addr)
		}
	}
	t.wg.Wait()
	return nil
}

// lostConnection fails the calls in flight to node, which closed at
// addr, as a dropped connection fails them: ErrConnectionLost for those
// whose request went out, ErrUnreachable for the others.
func (t *MemTransport) lostConnection(node uint64, addr string) {
	t.mu.Lock()
	l := t.mu.links[node]
	t.mu.Unlock()
	if l == nil {
		return
	}
	l.mu.Lock()
	same := l.addr == addr
	l.mu.Unlock()
	if same {
		l.calls.failAll(fmt.Errorf("node %d: %w", node, ErrConnectionLost), fmt.Errorf("node %d: %w", node, ErrUnreachable))
	}
}

// receive takes a frame from src's link; it runs on that link's
// goroutine, and ctx ends with the link. Close waits for receives under
// way, as TCPTransport's waits for its readers, so no handler runs after
// Close returns.
func (t *MemTransport) receive(ctx context.Context, src *MemTransport, f frame, n int) bool {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return false
	}
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	from := src.cfg.NodeID
	stats := t.counters.node(from)
	stats.framesReceived.Add(1)
	stats.bytesReceived.Add(uint64(n))
	switch f.kind {
	case kindMessage:
		if !f.ch.valid() || t.handlers[f.ch] == nil {
			t.counters.unhandled.Add(1)
			return true
		}
		t.handlers[f.ch](from, f.payload)
	case kindRequest:
		t.dispatch(ctx, src, f)
	case kindResponse, kindError:
		t.mu.Lock()
		l := t.mu.links[from]
		t.mu.Unlock()
		if l == nil {
			return true
		}
		r := callResult{resp: f.payload}
		if f.kind == kindError {
			r = callResult{err: decodeError(from, f.payload)}
		}
		l.calls.complete(f.id, r)
	}
	return true
}

// dispatch runs the call handler of f on a goroutine of its own, if the
// pool admits it, or answers the refusal.
func (t *MemTransport) dispatch(ctx context.Context, src *MemTransport, f frame) {
	from := src.cfg.NodeID
	var h CallHandler
	if f.ch.valid() {
		h = t.callHandlers[f.ch]
	}
	switch {
	case h == nil:
		t.reply(src, f.id, kindError, errorPayload(CodeNoHandler, fmt.Sprintf("no call handler for channel %s", f.ch)))
		return
	case !t.pool.acquire(from):
		t.counters.handlersBusy.Add(1)
		t.reply(src, f.id, kindError, errorPayload(CodeBusy, "call handlers busy"))
		return
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		t.pool.release(from)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	t.mu.nextHandler++
	hid := t.mu.nextHandler
	t.mu.cancels[hid] = cancel
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		defer t.pool.release(from)
		resp, err := h(ctx, from, f.payload)
		t.mu.Lock()
		delete(t.mu.cancels, hid)
		t.mu.Unlock()
		cancel()
		k, payload := answer(resp, err, t.cfg.MaxFrameBytes)
		t.reply(src, f.id, k, payload)
	}()
}

func (t *MemTransport) reply(caller *MemTransport, id uint64, k kind, payload []byte) {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return
	}
	l := t.replyLinkLocked(caller)
	t.mu.Unlock()
	// A full answer queue means the caller's link is not draining; the
	// answer is lost and the call ends by its context, as over TCP.
	_ = l.q.push(queued{frame: encodeFrame(k, 0, id, payload)})
}

// dropReplyLink stops the answer link of a caller that has closed.
func (t *MemTransport) dropReplyLink(l *memLink) {
	t.mu.Lock()
	if t.mu.replies[l.target] == l {
		delete(t.mu.replies, l.target)
	}
	t.mu.Unlock()
	l.stop(ErrClosed)
}
