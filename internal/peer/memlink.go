package peer

import (
	"context"
	"fmt"
	"sync"
)

// memLink is one direction of in-memory traffic: a transport's frames
// to one destination node (with its calls), or its answers to one
// caller. Its goroutine plays the connection.
type memLink struct {
	outbox
	owner  *MemTransport
	target *MemTransport // answer links: the caller; nil: look up addr
	cancel context.CancelFunc

	mu   sync.Mutex // guards addr
	addr string

	// held frames wait, in order, for Release; only run touches them.
	held      []queued
	heldBytes int
}

func (l *memLink) setAddr(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addr = addr
}

func (l *memLink) stop(err error) {
	l.stopped(err)
	if l.calls != nil {
		l.calls.close(err)
	}
	l.q.close()
	l.cancel()
}

// run is the link's delivery goroutine, owned by its transport; it
// returns when the link stops (RemoveNode, Close, a departed caller).
func (l *memLink) run(ctx context.Context) {
	defer l.owner.wg.Done()
	var batch []queued
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.q.ready:
		}
		var closed bool
		batch, closed = l.q.take(batch)
		if closed {
			return
		}
		l.flushHeld(ctx)
		frames, bytes := 0, 0
		for _, it := range batch {
			if it.call != 0 && !l.calls.markWritten(it.call) {
				continue // the call ended before its turn
			}
			frames++
			bytes += len(it.frame)
			l.forward(ctx, it)
		}
		clear(batch)
		if frames > 0 {
			l.stats.writes.Add(1)
			l.stats.framesSent.Add(uint64(frames))
			l.stats.bytesSent.Add(uint64(bytes))
		}
	}
}

// message is what the network's rules see of it.
func (l *memLink) message(it queued) (frame, MemMessage) {
	f, err := decodeBody(it.frame[lengthSize:])
	if err != nil {
		panic(err) // the link encoded it itself
	}
	m := MemMessage{From: l.owner.cfg.NodeID, To: l.to, Payload: f.payload}
	switch f.kind {
	case kindRequest:
		m.Request, m.Channel = true, f.ch
	case kindResponse, kindError:
		m.Answer = true
	default:
		m.Channel = f.ch
	}
	return f, m
}

// forward decides a new frame's fate. Behind held frames it is held too,
// so nothing overtakes.
func (l *memLink) forward(ctx context.Context, it queued) {
	f, m := l.message(it)
	v := holdFrame
	if len(l.held) == 0 {
		v = l.owner.net.judge(m, true)
	} else {
		l.owner.net.count(func(c *MemCounters) { c.Held++ })
	}
	switch v {
	case holdFrame:
		if len(l.held) >= l.q.maxFrames || l.heldBytes+len(it.frame) > l.q.maxBytes {
			l.owner.net.count(func(c *MemCounters) { c.Dropped++ })
			return
		}
		l.held = append(l.held, it)
		l.heldBytes += len(it.frame)
	case deliverFrame:
		l.deliver(ctx, it, f)
	}
}

// flushHeld lets held frames go, in order, while their link is not held.
func (l *memLink) flushHeld(ctx context.Context) {
	for len(l.held) > 0 {
		it := l.held[0]
		f, m := l.message(it)
		v := l.owner.net.judge(m, false)
		if v == holdFrame {
			return
		}
		l.held[0] = queued{}
		l.held = l.held[1:]
		l.heldBytes -= len(it.frame)
		if v == deliverFrame {
			l.deliver(ctx, it, f)
		}
	}
	l.held = nil
}

func (l *memLink) deliver(ctx context.Context, it queued, f frame) {
	target := l.target
	if target == nil {
		l.mu.Lock()
		addr := l.addr
		l.mu.Unlock()
		target = l.owner.net.lookup(addr)
	}
	if target != nil && target.receive(ctx, l.owner, f, len(it.frame)) {
		l.owner.net.count(func(c *MemCounters) { c.Delivered++ })
		return
	}
	l.owner.net.count(func(c *MemCounters) { c.Unreachable++ })
	if it.call != 0 {
		l.calls.complete(it.call, callResult{err: fmt.Errorf("node %d: %w", l.to, ErrUnreachable)})
	}
	if l.target != nil {
		l.owner.dropReplyLink(l)
	}
}
