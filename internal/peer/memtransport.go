package peer

import (
	"context"
	"fmt"
	"sync"
)

// MemTransport is the in-memory Transport of a MemNetwork.
type MemTransport struct {
	endpoint
	net  *MemNetwork
	addr string
	wg   sync.WaitGroup // delivery goroutines, call handlers, receives under way

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
	return t.setHandler(ch, h, t.mu.started || t.mu.closed)
}

// HandleContext registers the one-way handler of ch that receives the
// frames' trace context; see Transport.
func (t *MemTransport) HandleContext(ch Channel, h ContextHandler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setContextHandler(ch, h, t.mu.started || t.mu.closed)
}

// HandleCall registers the call handler of ch; see Transport.
func (t *MemTransport) HandleCall(ch Channel, h CallHandler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setCallHandler(ch, h, t.mu.started || t.mu.closed)
}

// Start makes the transport reachable at its address.
func (t *MemTransport) Start() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := startable(t.mu.started, t.mu.closed); err != nil {
		return err
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
	return send(context.Background(), t.cfg, to, ch, payload, t.link)
}

// SendContext is Send carrying ctx's trace context; see Transport.
func (t *MemTransport) SendContext(ctx context.Context, to uint64, ch Channel, payload []byte) error {
	return send(ctx, t.cfg, to, ch, payload, t.link)
}

// Call sends req to to and waits for the answer; see Transport.
func (t *MemTransport) Call(ctx context.Context, to uint64, ch Channel, req []byte) ([]byte, error) {
	return call(ctx, t.cfg, to, ch, req, t.link)
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
		outbox: outbox{
			to:    node,
			q:     newSendQueue(t.cfg.MaxQueueFrames, t.cfg.MaxQueueBytes),
			stats: t.counters.node(node),
		},
		owner:  t,
		target: target,
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

// Stats returns the transport's counters.
func (t *MemTransport) Stats() Stats {
	return t.counters.snapshot(func(node uint64) (int, int, int) {
		t.mu.Lock()
		l := t.mu.links[node]
		t.mu.Unlock()
		if l == nil {
			return 0, 0, 0
		}
		return l.load()
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
		t.deliver(from, f)
	case kindRequest:
		t.dispatch(ctx, src, f)
	case kindResponse, kindError:
		t.mu.Lock()
		l := t.mu.links[from]
		t.mu.Unlock()
		if l != nil {
			l.answered(f)
		}
	}
	return true
}

// dispatch runs the call handler of f on a goroutine of its own, if the
// pool admits it, or answers the refusal.
func (t *MemTransport) dispatch(ctx context.Context, src *MemTransport, f frame) {
	from := src.cfg.NodeID
	reply := func(id uint64, k kind, payload []byte) { t.reply(src, id, k, payload) }
	h := t.admitCall(from, f, reply)
	if h == nil {
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
	// The handler's context ends as soon as it returns, before the answer
	// is queued.
	tracked := func(ctx context.Context, from uint64, req []byte) ([]byte, error) {
		defer func() {
			t.mu.Lock()
			delete(t.mu.cancels, hid)
			t.mu.Unlock()
			cancel()
		}()
		return h(ctx, from, req)
	}
	go func() {
		defer t.wg.Done()
		t.runCall(ctx, tracked, from, f, reply)
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
