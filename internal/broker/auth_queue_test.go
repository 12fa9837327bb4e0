package broker

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

func never() <-chan time.Time { return nil }

// TestLoginQueueServesAddressesInTurn: with the one slot taken, an address
// that queued many logins first gets one slot in turn with an address that
// came later, not all of its logins first.
func TestLoginQueueServesAddressesInTurn(t *testing.T) {
	q := newLoginQueue(1, 16, 8)
	ctx := context.Background()
	if err := q.acquire(ctx, "a", never); err != nil {
		t.Fatal(err)
	}
	served := make(chan string, 16)
	enqueue := func(addr string) {
		before := q.queued()
		go func() {
			if err := q.acquire(ctx, addr, never); err != nil {
				t.Error(err)
			}
			served <- addr
		}()
		waitQueued(t, q, before+1) // each waits in line before the next arrives
	}
	for range 3 {
		enqueue("a")
	}
	enqueue("b")
	var order []string
	for range 4 {
		q.release(time.Millisecond)
		order = append(order, <-served)
	}
	q.release(time.Millisecond)
	if got := strings.Join(order, ""); got != "abaa" {
		t.Fatalf("served %s, want abaa: b waits one turn, not behind all of a", got)
	}
	if q.running != 0 || q.waiting != 0 || len(q.lines) != 0 || len(q.turn) != 0 {
		t.Fatalf("queue left with running %d waiting %d lines %d turn %d", q.running, q.waiting, len(q.lines), len(q.turn))
	}
}

// TestLoginQueueRefusesWithHint: past the per-address or total bound, a
// login is refused at once with ErrRateLimited and a hint; one that gives
// up waiting leaves the line.
func TestLoginQueueRefusesWithHint(t *testing.T) {
	q := newLoginQueue(1, 2, 1)
	ctx := context.Background()
	if err := q.acquire(ctx, "a", never); err != nil {
		t.Fatal(err)
	}
	fired := make(chan time.Time)
	close(fired)
	done := func() <-chan time.Time { return fired }
	err := q.acquire(ctx, "a", done) // waits, then gives up
	if !errors.Is(err, ErrRateLimited) || RetryAfter(err) <= 0 {
		t.Fatalf("a login that gave up: %v, hint %v", err, RetryAfter(err))
	}
	if q.queued() != 0 {
		t.Fatalf("%d still queued after giving up", q.queued())
	}
	go q.acquire(ctx, "a", never)
	waitQueued(t, q, 1)
	if err := q.acquire(ctx, "a", never); RetryAfter(err) <= 0 {
		t.Fatalf("a second login of a full address line: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := q.acquire(cctx, "b", never); RetryAfter(err) <= 0 {
		t.Fatalf("a login whose connection ended: %v", err)
	}
	if got := q.refused.Load(); got != 3 {
		t.Fatalf("%d refusals counted, want 3", got)
	}
	q.release(time.Millisecond) // to the waiting login, which returns
	waitQueued(t, q, 0)
}

// waitQueued waits, with a deadline, until n logins wait in q.
func waitQueued(t *testing.T, q *loginQueue, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d logins queued, want %d", q.queued(), n)
		}
		runtime.Gosched()
	}
}
