package peer

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// TCPTransport is the Transport over TCP (and mutual TLS when
// configured). See the package documentation for the frame format and
// its goroutines.
type TCPTransport struct {
	endpoint
	wg   sync.WaitGroup // every goroutine of the transport
	quit chan struct{}  // closed by Close

	mu struct {
		sync.Mutex
		started, closed bool
		ln              net.Listener
		addrs           map[uint64]string
		dests           map[uint64]*dest
		// inbound holds every accepted connection; byNode the one that
		// completed its handshake last for each source node.
		inbound map[*inConn]struct{}
		byNode  map[uint64]*inConn
	}
}

var _ Transport = (*TCPTransport)(nil)

// NewTCP checks cfg and returns a transport; register handlers, then
// Start it.
func NewTCP(cfg Config) (*TCPTransport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &TCPTransport{quit: make(chan struct{})}
	t.init(cfg)
	t.mu.addrs = make(map[uint64]string)
	t.mu.dests = make(map[uint64]*dest)
	t.mu.inbound = make(map[*inConn]struct{})
	t.mu.byNode = make(map[uint64]*inConn)
	return t, nil
}

// ID is this node's id.
func (t *TCPTransport) ID() uint64 { return t.cfg.NodeID }

// Handle registers the one-way handler of ch; see Transport.
func (t *TCPTransport) Handle(ch Channel, h Handler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setHandler(ch, h, t.mu.started || t.mu.closed)
}

// HandleContext registers the one-way handler of ch that receives the
// frames' trace context; see Transport.
func (t *TCPTransport) HandleContext(ch Channel, h ContextHandler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setContextHandler(ch, h, t.mu.started || t.mu.closed)
}

// HandleCall registers the call handler of ch; see Transport.
func (t *TCPTransport) HandleCall(ch Channel, h CallHandler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setCallHandler(ch, h, t.mu.started || t.mu.closed)
}

// Listen binds ListenAddr without accepting yet, so that a node
// listening on port 0 learns its address (Addr) before it registers the
// handlers that need it; Start then accepts on this listener. Peers that
// connect in between wait in the kernel's backlog. Calling it again, or
// not at all (Start binds), is fine.
func (t *TCPTransport) Listen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.listenLocked()
}

func (t *TCPTransport) listenLocked() error {
	switch {
	case t.mu.closed:
		return ErrClosed
	case t.mu.ln != nil:
		return nil
	}
	ln, err := net.Listen("tcp", t.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("peer: listen %s: %w", t.cfg.ListenAddr, err)
	}
	t.mu.ln = ln
	return nil
}

// Start listens on ListenAddr (unless Listen did) and accepts peers.
func (t *TCPTransport) Start() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := startable(t.mu.started, t.mu.closed); err != nil {
		return err
	}
	if err := t.listenLocked(); err != nil {
		return err
	}
	ln := t.mu.ln
	t.mu.started = true
	t.wg.Add(1)
	go t.acceptLoop(ln)
	return nil
}

// Addr is the address the transport listens on, once Listen or Start
// has bound it.
func (t *TCPTransport) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.ln == nil {
		return ""
	}
	return t.mu.ln.Addr().String()
}

// SetAddr records where node listens; see Transport.
func (t *TCPTransport) SetAddr(node uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed || t.mu.addrs[node] == addr {
		return
	}
	t.mu.addrs[node] = addr
	if d := t.mu.dests[node]; d != nil {
		d.setAddr(addr)
	}
}

// RemoveNode forgets node; see Transport.
func (t *TCPTransport) RemoveNode(node uint64) {
	t.mu.Lock()
	d := t.mu.dests[node]
	delete(t.mu.dests, node)
	delete(t.mu.addrs, node)
	t.mu.Unlock()
	if d != nil {
		d.stop(ErrUnknownNode)
	}
	t.counters.forget(node)
}

// destFor returns the destination of node, making it (and starting its
// writer) on first use.
func (t *TCPTransport) destFor(node uint64) (*dest, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return nil, ErrClosed
	}
	if d := t.mu.dests[node]; d != nil {
		return d, nil
	}
	addr, ok := t.mu.addrs[node]
	if !ok {
		return nil, fmt.Errorf("%w: node %d", ErrUnknownNode, node)
	}
	d := newDest(t, node, addr)
	t.mu.dests[node] = d
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	t.wg.Add(1)
	go d.run(ctx)
	return d, nil
}

// Send queues payload for to; see Transport. payload is copied.
func (t *TCPTransport) Send(to uint64, ch Channel, payload []byte) error {
	return send(context.Background(), t.cfg, to, ch, payload, t.destFor)
}

// SendContext is Send carrying ctx's trace context; see Transport.
func (t *TCPTransport) SendContext(ctx context.Context, to uint64, ch Channel, payload []byte) error {
	return send(ctx, t.cfg, to, ch, payload, t.destFor)
}

// Call sends req to to and waits for the answer; see Transport.
func (t *TCPTransport) Call(ctx context.Context, to uint64, ch Channel, req []byte) ([]byte, error) {
	return call(ctx, t.cfg, to, ch, req, t.destFor)
}

// Stats returns the transport's counters.
func (t *TCPTransport) Stats() Stats {
	return t.counters.snapshot(func(node uint64) (int, int, int) {
		t.mu.Lock()
		d := t.mu.dests[node]
		t.mu.Unlock()
		if d == nil {
			return 0, 0, 0
		}
		return d.load()
	})
}

// Close stops the transport; see Transport. It is safe to call twice.
func (t *TCPTransport) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil
	}
	t.mu.closed = true
	close(t.quit)
	ln := t.mu.ln
	dests := t.mu.dests
	t.mu.dests = map[uint64]*dest{}
	var conns []*inConn
	for c := range t.mu.inbound {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, d := range dests {
		d.stop(ErrClosed)
	}
	for _, c := range conns {
		c.conn.Close()
	}
	t.wg.Wait()
	return nil
}
