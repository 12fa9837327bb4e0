package client_test

// Calls kept apart: long polls on a connection of their own, a cancelled
// poll's connection closed so that the node lets its slot go, an answer
// too large for the client failing only its call, and a fetch of a
// missing topic failing at once. Against a real node (clienttest).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestLongPollsDoNotHoldUpCalls: with more long polls outstanding than
// the node serves at once on one connection (260 against its 256 slots
// and byte budget), a Produce and a Status on the same Client are answered
// while every poll is still waiting. Cancelling the polls closes their
// connection, and the next poll dials a new one.
func TestLongPollsDoNotHoldUpCalls(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "idle")
	createTopic(t, c, "busy")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const polls = 260
	var (
		returned atomic.Int32
		wg       sync.WaitGroup
		errs     = make([]error, polls)
	)
	for i := range polls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Fetch(ctx, "idle", client.FetchOptions{Wait: 30 * time.Second})
			returned.Add(1)
		}()
	}
	waitFor(t, "every poll to be sent", func() bool { return client.Pending(c) == polls })
	produce(t, c, "busy", client.Record{Value: []byte("v")})
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d polls returned before the produce was answered: it waited for them", n)
	}
	cancel()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("poll %d: %v, want context.Canceled", i, err)
		}
	}
	if dialled, open := client.PollLane(c); !dialled || open {
		t.Fatalf("poll connection after its polls were cancelled: dialled %v, open %v; want closed", dialled, open)
	}
	page, err := c.Fetch(t.Context(), "busy", client.FetchOptions{Wait: time.Second})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("poll after the old poll connection closed: %d records, %v", len(page.Records), err)
	}
}

// TestCancelledPollClosesItsConnection: the wire cannot cancel a long
// poll, so a poll the caller gives up on would keep its slot on the node
// until its wait ends; the client closes the poll connection instead
// (the node then ends its polls), while the main connection stays up.
func TestCancelledPollClosesItsConnection(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "idle")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		waitFor(t, "the poll to be sent", func() bool { return client.Pending(c) == 1 })
		cancel()
	}()
	if _, err := c.Fetch(ctx, "idle", client.FetchOptions{Wait: 30 * time.Second}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %v", err)
	}
	if _, open := client.PollLane(c); open {
		t.Fatal("the poll connection stays open after its only poll was cancelled")
	}
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// connectCounter counts the client's dials through WithMetrics.
type connectCounter struct {
	dials    atomic.Int32
	mu       sync.Mutex
	requests []client.RequestEvent
}

func (m *connectCounter) OnConnect(client.ConnectEvent) { m.dials.Add(1) }
func (m *connectCounter) OnRequest(e client.RequestEvent) {
	m.mu.Lock()
	m.requests = append(m.requests, e)
	m.mu.Unlock()
}

// TestAnswerTooLargeFailsOnlyItsCall: a fetch whose answer exceeds the
// client's frame limit fails with ErrAnswerTooLarge; calls pipelined
// with it on the same connection succeed, and no new connection is
// dialled.
func TestAnswerTooLargeFailsOnlyItsCall(t *testing.T) {
	for _, wv := range []int{1, 2} {
		t.Run(fmt.Sprintf("wire%d", wv), func(t *testing.T) {
			n, admin := start(t)
			createTopic(t, admin, "big")
			createTopic(t, admin, "small")
			produce(t, admin, "big", client.Record{Value: make([]byte, 100<<10)})
			produce(t, admin, "small", client.Record{Value: []byte("v")})
			m := &connectCounter{}
			c := n.Client(t, "admin", "admin123", client.WithWireVersion(wv), client.WithMaxFrame(64<<10), client.WithMetrics(m))
			var wg sync.WaitGroup
			errs := make([]error, 20)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = c.Status(t.Context())
				}()
			}
			_, err := c.Fetch(t.Context(), "big", client.FetchOptions{})
			wg.Wait()
			if !errors.Is(err, client.ErrAnswerTooLarge) {
				t.Fatalf("fetch of a page over the frame limit: %v, want ErrAnswerTooLarge", err)
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("calls beside it: %v", err)
			}
			page, err := c.Fetch(t.Context(), "small", client.FetchOptions{})
			if err != nil || len(page.Records) != 1 {
				t.Fatalf("fetch after it: %d records, %v", len(page.Records), err)
			}
			if d := m.dials.Load(); d != 1 {
				t.Fatalf("%d dials, want 1: the connection was dropped", d)
			}
		})
	}
}

// TestFetchMissingTopic: a fetch of a topic that does not exist fails
// with ErrNoSuchTopic with both wire versions, a long poll too (so a
// follow loop does not spin on empty pages), and the error names the
// operation and the topic.
func TestFetchMissingTopic(t *testing.T) {
	for _, wv := range []int{1, 2} {
		t.Run(fmt.Sprintf("wire%d", wv), func(t *testing.T) {
			n, _ := start(t)
			c := n.Client(t, "admin", "admin123", client.WithWireVersion(wv))
			for _, wait := range []time.Duration{0, 10 * time.Second} {
				_, err := c.Fetch(t.Context(), "nothing-here", client.FetchOptions{Wait: wait})
				if !errors.Is(err, client.ErrNoSuchTopic) {
					t.Fatalf("fetch (wait %v) of a missing topic: %v, want ErrNoSuchTopic", wait, err)
				}
				if msg := err.Error(); !strings.Contains(msg, `fetch "nothing-here"`) {
					t.Fatalf("error %q does not name the call and the topic", msg)
				}
			}
		})
	}
}
