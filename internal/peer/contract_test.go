package peer

// The Transport contract, checked on loopback TCP and on the in-memory
// twin alike: ordering per channel under concurrent senders, calls
// answered out of order, cancellation, the bounds on calls and handlers,
// errors crossing over, Close, and goroutines ending.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func forEachImpl(t *testing.T, f func(t *testing.T, im impl)) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) { f(t, im) })
	}
}

func TestSendIsOrderedPerChannelUnderConcurrency(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		const senders, perSender = 3, 2000
		channels := []Channel{ChannelRaft, ChannelForward, ChannelReplication}
		box := newInbox()
		ts := im.start(t, 2, nil, func(tr Transport) {
			for _, ch := range channels {
				if err := tr.Handle(ch, box.handler(ch)); err != nil {
					t.Fatal(err)
				}
			}
		})
		var wg sync.WaitGroup
		for _, ch := range channels {
			for s := range senders {
				wg.Go(func() {
					for i := range perSender {
						p := binary.BigEndian.AppendUint32([]byte{byte(s)}, uint32(i))
						sendRetrying(t, ts[0], 2, ch, p)
					}
				})
			}
		}
		wg.Wait()
		for _, ch := range channels {
			waitFor(t, "every frame of "+ch.String(), func() bool { return box.count(1, ch) == senders*perSender })
			next := make([]uint32, senders)
			for _, p := range box.get(1, ch) {
				s, seq := p[0], binary.BigEndian.Uint32(p[1:])
				if seq != next[s] {
					t.Fatalf("%s: sender %d: got %d, want %d", ch, s, seq, next[s])
				}
				next[s]++
			}
		}
		st := ts[0].Stats().Nodes[2]
		if st.FramesSent != 3*senders*perSender || st.Writes == 0 || st.Writes > st.FramesSent {
			t.Errorf("stats to node 2: %+v", st)
		}
		if got := ts[1].Stats().Nodes[1].FramesReceived; got != 3*senders*perSender {
			t.Errorf("node 2 received %d frames from node 1", got)
		}
	})
}

// gate holds call handlers until the test lets each go.
type gate struct {
	running atomic.Int32
	mu      sync.Mutex
	open    map[string]chan struct{}
}

func newGate() *gate { return &gate{open: make(map[string]chan struct{})} }

func (g *gate) ch(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.open[key]
	if c == nil {
		c = make(chan struct{})
		g.open[key] = c
	}
	return c
}

// handler answers "re:"+req once req's gate opens or ctx ends.
func (g *gate) handler(ctx context.Context, _ uint64, req []byte) ([]byte, error) {
	g.running.Add(1)
	defer g.running.Add(-1)
	select {
	case <-g.ch(string(req)):
		return append([]byte("re:"), req...), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestCallsAnsweredOutOfOrder(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		const n = 8
		g := newGate()
		ts := im.start(t, 2, nil, func(tr Transport) { tr.HandleCall(ChannelForward, g.handler) })
		type result struct {
			resp []byte
			err  error
		}
		results := make([]chan result, n)
		for i := range n {
			results[i] = make(chan result, 1)
			go func() {
				resp, err := ts[0].Call(context.Background(), 2, ChannelForward, fmt.Appendf(nil, "req-%d", i))
				results[i] <- result{resp, err}
			}()
		}
		waitFor(t, "all calls running", func() bool { return g.running.Load() == n })
		for i := n - 1; i >= 0; i-- {
			close(g.ch(fmt.Sprintf("req-%d", i)))
			r := <-results[i]
			if r.err != nil || string(r.resp) != fmt.Sprintf("re:req-%d", i) {
				t.Fatalf("call %d: %q, %v", i, r.resp, r.err)
			}
			for j := range i {
				if len(results[j]) != 0 {
					t.Fatalf("call %d answered before its handler was let go", j)
				}
			}
		}
		if st := ts[0].Stats().Nodes[2]; st.CallsInFlight != 0 {
			t.Errorf("calls in flight after all answered: %d", st.CallsInFlight)
		}
	})
}

func TestCallContextCancellationFreesTheWaiter(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		g := newGate()
		ts := im.start(t, 2, func(c *Config) { c.MaxCallsInFlight = 1 }, func(tr Transport) { tr.HandleCall(ChannelForward, g.handler) })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := ts[0].Call(ctx, 2, ChannelForward, []byte("slow"))
			done <- err
		}()
		waitFor(t, "the handler to run", func() bool { return g.running.Load() == 1 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
		// The only slot is free again: a second call goes through.
		close(g.ch("fast"))
		resp, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("fast"))
		if err != nil || string(resp) != "re:fast" {
			t.Fatalf("call after cancellation: %q, %v", resp, err)
		}
		close(g.ch("slow"))
	})
}

// A call whose context has already ended sends nothing and fails with
// the context's error, however quickly the node would have answered: the
// wait for an answer otherwise picked at random between the two, and a
// caller that gave up could be answered (and the node do the work).
func TestCallWithAnEndedContextSendsNothing(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		var handled atomic.Int64
		ts := im.start(t, 2, nil, func(tr Transport) {
			tr.HandleCall(ChannelForward, func(_ context.Context, _ uint64, req []byte) ([]byte, error) {
				handled.Add(1)
				return req, nil
			})
		})
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		for range 200 {
			if resp, err := ts[0].Call(ended, 2, ChannelForward, []byte("x")); !errors.Is(err, context.Canceled) {
				t.Fatalf("a call with an ended context: %q, %v", resp, err)
			}
		}
		// A live call after them is answered, and is the only one the
		// node handled.
		if resp, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("live")); err != nil || string(resp) != "live" {
			t.Fatalf("live call: %q, %v", resp, err)
		}
		if n := handled.Load(); n != 1 {
			t.Fatalf("the node handled %d calls, want only the live one", n)
		}
	})
}

func TestCallsInFlightAreBounded(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		g := newGate()
		ts := im.start(t, 2, func(c *Config) { c.MaxCallsInFlight = 2 }, func(tr Transport) { tr.HandleCall(ChannelForward, g.handler) })
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() { ts[0].Call(context.Background(), 2, ChannelForward, fmt.Appendf(nil, "%d", i)) })
		}
		waitFor(t, "two calls running", func() bool { return g.running.Load() == 2 })
		if _, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("x")); !errors.Is(err, ErrTooManyCalls) {
			t.Fatalf("third call: %v", err)
		}
		close(g.ch("0"))
		close(g.ch("1"))
		wg.Wait()
	})
}

func TestBusyHandlersRefuseCalls(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		g := newGate()
		ts := im.start(t, 3, func(c *Config) { c.MaxHandlers, c.MaxHandlersPerNode = 2, 1 },
			func(tr Transport) { tr.HandleCall(ChannelForward, g.handler) })
		var wg sync.WaitGroup
		wg.Go(func() { ts[0].Call(context.Background(), 2, ChannelForward, []byte("a")) })
		waitFor(t, "node 1's call to run", func() bool { return g.running.Load() == 1 })
		_, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("b"))
		var re *RemoteError
		if !errors.Is(err, ErrBusy) || !errors.As(err, &re) || re.Node != 2 {
			t.Fatalf("second call from node 1: %v", err)
		}
		// Node 3 has its own share of node 2's handlers.
		wg.Go(func() { ts[2].Call(context.Background(), 2, ChannelForward, []byte("c")) })
		waitFor(t, "node 3's call to run", func() bool { return g.running.Load() == 2 })
		if got := ts[1].Stats().HandlersBusy; got != 1 {
			t.Errorf("HandlersBusy = %d", got)
		}
		close(g.ch("a"))
		close(g.ch("c"))
		wg.Wait()
	})
}

func TestHandlerErrorsReachTheCaller(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		ts := im.start(t, 2, func(c *Config) { c.MaxFrameBytes = minFrameBytes }, func(tr Transport) {
			tr.HandleCall(ChannelForward, func(_ context.Context, _ uint64, req []byte) ([]byte, error) {
				if string(req) == "big" {
					return make([]byte, minFrameBytes), nil
				}
				return nil, errors.New("not the leader of vnode 3")
			})
		})
		_, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("x"))
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != CodeHandler || re.Message != "not the leader of vnode 3" {
			t.Fatalf("handler error: %v", err)
		}
		if _, err := ts[0].Call(context.Background(), 2, ChannelRaft, []byte("x")); !errors.Is(err, ErrNoHandler) {
			t.Fatalf("call to a channel without a handler: %v", err)
		}
		if _, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("big")); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("oversize response: %v", err)
		}
	})
}

func TestOversizeFrameRefusedWhenSent(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		ts := im.start(t, 2, func(c *Config) { c.MaxFrameBytes = minFrameBytes }, nil)
		fits := make([]byte, minFrameBytes-frameBytes(0))
		if err := ts[0].Send(2, ChannelRaft, fits); err != nil {
			t.Fatalf("largest frame: %v", err)
		}
		if err := ts[0].Send(2, ChannelRaft, append(fits, 0)); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("one byte more: %v", err)
		}
		if _, err := ts[0].Call(context.Background(), 2, ChannelRaft, append(fits, 0)); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("oversize call: %v", err)
		}
	})
}

func TestBackpressureWhenHandlerStalls(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		release := make(chan struct{})
		var got, entered atomic.Int64
		ts := im.start(t, 2, func(c *Config) {
			c.MaxFrameBytes, c.MaxQueueBytes, c.MaxQueueFrames = 64<<10, 256<<10, 64
		}, func(tr Transport) {
			tr.Handle(ChannelReplication, func(uint64, []byte) { entered.Add(1); <-release; got.Add(1) })
		})
		payload := make([]byte, 32<<10)
		// The first frame reaches the handler before the queue fills, so
		// that the delivery goroutine takes no frame off the full queue
		// (making room) after the refusal below.
		if err := ts[0].Send(2, ChannelReplication, payload); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the handler to take the first frame", func() bool { return entered.Load() == 1 })
		sent := 1
		var err error
		for ; sent < 100000; sent++ {
			if err = ts[0].Send(2, ChannelReplication, payload); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrBackpressure) {
			t.Fatalf("after %d sends: %v", sent, err)
		}
		st := ts[0].Stats().Nodes[2]
		if st.Refused != 1 || st.QueueBytes > 256<<10 || st.QueueFrames > 64 {
			t.Errorf("stats when refused: %+v", st)
		}
		// In memory the delivery goroutine is stuck in the handler, so the
		// queue stays full and a call is refused the same way. (Over TCP
		// the kernel's buffers may still take a little.)
		if im.name == "mem" {
			// Bounded: a call the queue took would wait for an answer no
			// handler gives.
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if _, err := ts[0].Call(ctx, 2, ChannelReplication, payload); !errors.Is(err, ErrBackpressure) {
				t.Errorf("call into a full queue: %v", err)
			}
		}
		close(release)
		waitFor(t, "the queued frames", func() bool { return got.Load() == int64(sent) })
	})
}

func TestCloseFailsWaitingCalls(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		g := newGate()
		ts := im.start(t, 2, nil, func(tr Transport) { tr.HandleCall(ChannelForward, g.handler) })
		done := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("never"))
				done <- err
			}()
		}
		waitFor(t, "calls running", func() bool { return g.running.Load() == 3 })
		ts[0].Close()
		for range 3 {
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Fatalf("waiting call after Close: %v", err)
			}
		}
		if err := ts[0].Send(2, ChannelRaft, nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("send after Close: %v", err)
		}
		// Node 2's handlers see their connection go and end.
		waitFor(t, "node 2's handlers to end", func() bool { return g.running.Load() == 0 })
	})
}

func TestRemoveNodeFailsItsCalls(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		g := newGate()
		ts := im.start(t, 2, nil, func(tr Transport) { tr.HandleCall(ChannelForward, g.handler) })
		done := make(chan error, 1)
		go func() {
			_, err := ts[0].Call(context.Background(), 2, ChannelForward, []byte("never"))
			done <- err
		}()
		waitFor(t, "the call to run", func() bool { return g.running.Load() == 1 })
		ts[0].RemoveNode(2)
		if err := <-done; !errors.Is(err, ErrUnknownNode) {
			t.Fatalf("call to a removed node: %v", err)
		}
		if err := ts[0].Send(2, ChannelRaft, nil); !errors.Is(err, ErrUnknownNode) {
			t.Fatalf("send to a removed node: %v", err)
		}
	})
}

func TestRegistrationRules(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		h := func(uint64, []byte) {}
		ts := im.start(t, 1, nil, func(tr Transport) {
			if err := tr.Handle(0, h); !errors.Is(err, ErrBadChannel) {
				t.Errorf("channel 0: %v", err)
			}
			if err := tr.Handle(NumChannels, h); !errors.Is(err, ErrBadChannel) {
				t.Errorf("channel %d: %v", NumChannels, err)
			}
			if err := tr.Handle(ChannelRaft, h); err != nil {
				t.Error(err)
			}
			if err := tr.Handle(ChannelRaft, h); err == nil {
				t.Error("a second handler for a channel was taken")
			}
		})
		if err := ts[0].Handle(ChannelForward, h); !errors.Is(err, ErrStarted) {
			t.Errorf("after Start: %v", err)
		}
		if err := ts[0].Send(9, ChannelRaft, nil); !errors.Is(err, ErrUnknownNode) {
			t.Errorf("send to a node with no address: %v", err)
		}
		if err := ts[0].Send(1, 0, nil); !errors.Is(err, ErrBadChannel) {
			t.Errorf("send on channel 0: %v", err)
		}
	})
}

func TestNoGoroutinesLeftAfterClose(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		check := checkNoLeak(t)
		g := newGate()
		box := newInbox()
		ts := im.start(t, 3, nil, func(tr Transport) {
			tr.Handle(ChannelRaft, box.handler(ChannelRaft))
			tr.HandleCall(ChannelForward, g.handler)
		})
		close(g.ch("ok"))
		for _, a := range ts {
			for _, b := range ts {
				if a == b {
					continue
				}
				sendRetrying(t, a, b.ID(), ChannelRaft, []byte("hi"))
				if resp, err := a.Call(context.Background(), b.ID(), ChannelForward, []byte("ok")); err != nil || !bytes.Equal(resp, []byte("re:ok")) {
					t.Fatalf("call: %q %v", resp, err)
				}
			}
		}
		// Leave a call blocked in a handler, so Close has one to cancel.
		go ts[0].Call(context.Background(), 2, ChannelForward, []byte("blocked"))
		waitFor(t, "the blocked call", func() bool { return g.running.Load() == 1 })
		for _, tr := range ts {
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
		}
		check()
	})
}
