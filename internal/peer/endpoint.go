package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// endpoint is what TCPTransport and MemTransport share whatever carries
// their frames: the configuration, the handlers, the handler pool, the
// counters, and what becomes of a frame once it has arrived. Each
// transport guards registration with its own lock.
type endpoint struct {
	cfg          Config
	handlers     [NumChannels]ContextHandler
	callHandlers [NumChannels]CallHandler
	pool         *handlerPool
	counters     counters
}

func (e *endpoint) init(cfg Config) {
	e.cfg = cfg
	e.pool = newHandlerPool(cfg.MaxHandlers, cfg.MaxHandlersPerNode)
}

// setHandler registers the one-way handler of ch; frozen once the
// transport has started or closed. REQUIRES: the transport's lock held.
func (e *endpoint) setHandler(ch Channel, h Handler, frozen bool) error {
	if h == nil {
		return e.setContextHandler(ch, nil, frozen)
	}
	return e.setContextHandler(ch, func(_ context.Context, from uint64, payload []byte) { h(from, payload) }, frozen)
}

// setContextHandler registers the one-way handler of ch, as setHandler.
func (e *endpoint) setContextHandler(ch Channel, h ContextHandler, frozen bool) error {
	if err := registrable(ch, frozen, ch.valid() && e.handlers[ch] != nil); err != nil {
		return err
	}
	e.handlers[ch] = h
	return nil
}

// setCallHandler registers the call handler of ch, as setHandler.
func (e *endpoint) setCallHandler(ch Channel, h CallHandler, frozen bool) error {
	if err := registrable(ch, frozen, ch.valid() && e.callHandlers[ch] != nil); err != nil {
		return err
	}
	e.callHandlers[ch] = h
	return nil
}

func registrable(ch Channel, started, taken bool) error {
	switch {
	case !ch.valid():
		return ErrBadChannel
	case started:
		return ErrStarted
	case taken:
		return fmt.Errorf("peer: channel %s already has a handler", ch)
	}
	return nil
}

// startable says why a transport cannot start.
func startable(started, closed bool) error {
	switch {
	case closed:
		return ErrClosed
	case started:
		return errors.New("peer: already started")
	}
	return nil
}

// deliver runs the one-way handler of f inline.
func (e *endpoint) deliver(from uint64, f frame) {
	if !f.ch.valid() || e.handlers[f.ch] == nil {
		e.counters.unhandled.Add(1)
		return
	}
	e.handlers[f.ch](e.frameContext(context.Background(), f), from, f.payload)
}

// frameContext is ctx carrying the trace context f came with, if any and
// this node takes trace contexts: a node that does not trace must not
// pass a remote parent on to the frames it sends in turn.
func (e *endpoint) frameContext(ctx context.Context, f frame) context.Context {
	if !f.sc.IsValid() || !e.cfg.TraceContext {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, f.sc)
}

// replyFunc queues the answer to call id back to its caller.
type replyFunc func(id uint64, k kind, payload []byte)

// admitCall returns the call handler of request f with a place taken
// for it in the pool, or answers the refusal through reply and returns
// nil. The caller runs the handler with runCall, which gives the place
// back.
func (e *endpoint) admitCall(from uint64, f frame, reply replyFunc) CallHandler {
	var h CallHandler
	if f.ch.valid() {
		h = e.callHandlers[f.ch]
	}
	switch {
	case h == nil:
		reply(f.id, kindError, errorPayload(CodeNoHandler, fmt.Sprintf("no call handler for channel %s", f.ch)))
		return nil
	case !e.pool.acquire(from):
		e.counters.handlersBusy.Add(1)
		reply(f.id, kindError, errorPayload(CodeBusy, "call handlers busy"))
		return nil
	}
	return h
}

// runCall runs h, admitted by admitCall, on request f and answers.
func (e *endpoint) runCall(ctx context.Context, h CallHandler, from uint64, f frame, reply replyFunc) {
	defer e.pool.release(from)
	resp, err := h(e.frameContext(ctx, f), from, f.payload)
	k, payload := answer(resp, err, e.cfg.MaxFrameBytes)
	reply(f.id, k, payload)
}

// answer is the frame a call handler's result travels in.
func answer(resp []byte, err error, maxFrame int) (kind, []byte) {
	switch {
	case err != nil:
		return kindError, errorPayload(CodeHandler, err.Error())
	case frameBytes(len(resp)) > maxFrame:
		return kindError, errorPayload(CodeTooLarge, fmt.Sprintf("response of %d bytes exceeds the frame bound", len(resp)))
	}
	return kindResponse, resp
}

// traceContext is the trace context a frame of n payload bytes to o
// carries: ctx's, unless this node does not carry trace contexts, o's
// node is known not to take them, or the frame would outgrow its bound
// with it (the frame goes without it rather than not at all).
func (o *outbox) traceContext(ctx context.Context, cfg Config, n int) trace.SpanContext {
	if !cfg.TraceContext || o.noTrace.Load() || frameBytes(traceBytes+n) > cfg.MaxFrameBytes {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(ctx)
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

// outbox is the sending end of the way to one node, a dest over TCP or
// a memLink in memory: the bounded queue its writer drains, the calls
// waiting for answers and the node's counters.
type outbox struct {
	to    uint64
	q     *sendQueue
	calls *callTable // nil on a memLink carrying answers
	stats *nodeCounters
	// noTrace is set when the node's last handshake declared no
	// capTrace: frames to it are made without a trace context. Frames
	// queued before that was known lose theirs as they are written.
	noTrace atomic.Bool

	stopMu  sync.Mutex
	stopErr error // why the way was stopped
}

// stopped records why the way stopped: push refuses with it from now.
func (o *outbox) stopped(err error) {
	o.stopMu.Lock()
	defer o.stopMu.Unlock()
	o.stopErr = err
}

func (o *outbox) push(it queued) error {
	err := o.q.push(it)
	switch {
	case errors.Is(err, ErrBackpressure):
		o.stats.refused.Add(1)
		return fmt.Errorf("node %d: %w", o.to, err)
	case errors.Is(err, ErrClosed):
		o.stopMu.Lock()
		defer o.stopMu.Unlock()
		return o.stopErr
	}
	return err
}

// box is the outbox of a dest or a memLink.
func (o *outbox) box() *outbox { return o }

// way is a dest or a memLink: what carries frames to one node.
type way interface{ box() *outbox }

// send is Transport.SendContext, given how the transport finds (or
// opens) the way to a node.
func send[W way](ctx context.Context, cfg Config, to uint64, ch Channel, payload []byte, find func(uint64) (W, error)) error {
	if err := checkOut(cfg, ch, len(payload)); err != nil {
		return err
	}
	w, err := find(to)
	if err != nil {
		return err
	}
	o := w.box()
	return o.push(queued{frame: encodeTracedFrame(kindMessage, ch, 0, o.traceContext(ctx, cfg, len(payload)), payload)})
}

// call is Transport.Call, as send is Transport.Send.
func call[W way](ctx context.Context, cfg Config, to uint64, ch Channel, req []byte, find func(uint64) (W, error)) ([]byte, error) {
	if err := checkOut(cfg, ch, len(req)); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// A caller that gave up sends nothing: the wait below would pick
		// at random between its ended context and a quick answer.
		return nil, err
	}
	w, err := find(to)
	if err != nil {
		return nil, err
	}
	o := w.box()
	id, c, err := o.calls.add()
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", to, err)
	}
	if err := o.push(queued{frame: encodeTracedFrame(kindRequest, ch, id, o.traceContext(ctx, cfg, len(req)), req), call: id}); err != nil {
		o.calls.remove(id)
		return nil, err
	}
	return o.calls.wait(ctx, id, c)
}

// answered completes the call that f, a response or an error, answers.
func (o *outbox) answered(f frame) {
	r := callResult{resp: f.payload}
	if f.kind == kindError {
		r = callResult{err: decodeError(o.to, f.payload)}
	}
	o.calls.complete(f.id, r)
}

// load is what waits on the way, for Stats.
func (o *outbox) load() (frames, bytes, calls int) {
	frames, bytes = o.q.depth()
	return frames, bytes, o.calls.len()
}
