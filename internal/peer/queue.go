package peer

import (
	"sync"
	"sync/atomic"
)

// queued is one encoded frame waiting to be written. call is the id of
// the call whose request it is, 0 for any other frame: a request whose
// call has already ended (cancelled, failed) is not written.
type queued struct {
	frame []byte
	call  uint64
}

// sendQueue holds the frames waiting for one connection's writer. It is
// bounded in frames and bytes; the writer takes everything at once and
// writes it in one batch.
type sendQueue struct {
	maxFrames, maxBytes int
	// ready holds a token while frames wait; the writer waits on it.
	ready chan struct{}

	mu struct {
		sync.Mutex
		items  []queued
		bytes  int
		closed bool
	}
}

func newSendQueue(maxFrames, maxBytes int) *sendQueue {
	return &sendQueue{maxFrames: maxFrames, maxBytes: maxBytes, ready: make(chan struct{}, 1)}
}

// push appends it, or refuses with ErrBackpressure when the queue is full
// and ErrClosed when it was closed.
func (q *sendQueue) push(it queued) error {
	q.mu.Lock()
	switch {
	case q.mu.closed:
		q.mu.Unlock()
		return ErrClosed
	case len(q.mu.items) >= q.maxFrames || q.mu.bytes+len(it.frame) > q.maxBytes:
		q.mu.Unlock()
		return ErrBackpressure
	}
	q.mu.items = append(q.mu.items, it)
	q.mu.bytes += len(it.frame)
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *sendQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take moves every waiting frame out and returns them, leaving the queue
// empty; the caller hands back the slice of its previous take (cleared)
// to be reused. closed reports that the queue was closed.
func (q *sendQueue) take(prev []queued) (items []queued, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items, q.mu.items = q.mu.items, prev[:0]
	q.mu.bytes = 0
	return items, q.mu.closed
}

// close refuses further pushes and drops what waits.
func (q *sendQueue) close() {
	q.mu.Lock()
	q.mu.closed = true
	q.mu.items = nil
	q.mu.bytes = 0
	q.mu.Unlock()
	q.signal()
}

func (q *sendQueue) depth() (frames, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.mu.items), q.mu.bytes
}

// handlerPool bounds the call handlers running at once, in total and per
// source node. It holds counts, not goroutines: each admitted request
// runs on a goroutine of its own that ends with the handler.
type handlerPool struct {
	max, maxPerNode int
	mu              struct {
		sync.Mutex
		running int
		perNode map[uint64]int // entries at 0 are deleted
	}
}

func newHandlerPool(max, maxPerNode int) *handlerPool {
	p := &handlerPool{max: max, maxPerNode: maxPerNode}
	p.mu.perNode = make(map[uint64]int)
	return p
}

func (p *handlerPool) acquire(node uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.running >= p.max || p.mu.perNode[node] >= p.maxPerNode {
		return false
	}
	p.mu.running++
	p.mu.perNode[node]++
	return true
}

func (p *handlerPool) release(node uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.running--
	if p.mu.perNode[node]--; p.mu.perNode[node] == 0 {
		delete(p.mu.perNode, node)
	}
}

// nodeCounters are the counters of traffic with one node.
type nodeCounters struct {
	writes, framesSent, bytesSent atomic.Uint64
	framesReceived, bytesReceived atomic.Uint64
	refused, dials, dialFailures  atomic.Uint64
	connected                     atomic.Bool
	traces                        atomic.Bool // the connected node takes trace contexts
}

// counters are a transport's counters, per node and in total.
type counters struct {
	handshakeFailures, corruptFrames, oversizeFrames atomic.Uint64
	protocolErrors, handlersBusy, unhandled          atomic.Uint64
	connsRefused                                     atomic.Uint64

	mu struct {
		sync.Mutex
		nodes map[uint64]*nodeCounters
	}
}

func (c *counters) node(id uint64) *nodeCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.nodes == nil {
		c.mu.nodes = make(map[uint64]*nodeCounters)
	}
	n := c.mu.nodes[id]
	if n == nil {
		n = &nodeCounters{}
		c.mu.nodes[id] = n
	}
	return n
}

func (c *counters) forget(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mu.nodes, id)
}

// snapshot reads the counters; depth reports a node's queue and calls.
func (c *counters) snapshot(depth func(node uint64) (frames, bytes, calls int)) Stats {
	s := Stats{
		Nodes:             make(map[uint64]NodeStats),
		HandshakeFailures: c.handshakeFailures.Load(),
		CorruptFrames:     c.corruptFrames.Load(),
		OversizeFrames:    c.oversizeFrames.Load(),
		ProtocolErrors:    c.protocolErrors.Load(),
		HandlersBusy:      c.handlersBusy.Load(),
		Unhandled:         c.unhandled.Load(),
		ConnsRefused:      c.connsRefused.Load(),
	}
	c.mu.Lock()
	nodes := make(map[uint64]*nodeCounters, len(c.mu.nodes))
	for id, n := range c.mu.nodes {
		nodes[id] = n
	}
	c.mu.Unlock()
	for id, n := range nodes {
		ns := NodeStats{
			Connected:      n.connected.Load(),
			TraceContext:   n.traces.Load(),
			Writes:         n.writes.Load(),
			FramesSent:     n.framesSent.Load(),
			BytesSent:      n.bytesSent.Load(),
			FramesReceived: n.framesReceived.Load(),
			BytesReceived:  n.bytesReceived.Load(),
			Refused:        n.refused.Load(),
			Dials:          n.dials.Load(),
			DialFailures:   n.dialFailures.Load(),
		}
		ns.QueueFrames, ns.QueueBytes, ns.CallsInFlight = depth(id)
		s.Nodes[id] = ns
	}
	return s
}
