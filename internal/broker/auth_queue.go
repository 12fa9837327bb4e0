package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// The login queue: password hashes (argon2id, a core and ~9 MiB each) run
// at most HashConcurrency at once. Logins that find every slot taken wait
// in a line per client address, and a freed slot goes to the address
// whose turn it is, round robin: one address opening thousands of
// connections cannot starve the others. The lines are bounded in total
// (LoginQueue) and per address (LoginQueuePerAddr); a login that finds
// them full, or waits longer than HashWait, is refused at once with
// rate_limit_exceeded and a hint of when the queue will have room, rather
// than held: a client told when to come back does not have to guess, and
// one that is not held costs the node nothing while it waits.
//
// Waiting logins run on their connections' own goroutines, so the queue
// starts none.
type loginQueue struct {
	slots, maxWait, maxPerAddr int

	mu      sync.Mutex
	running int                       // hashes holding a slot
	waiting int                       // logins in the lines
	lines   map[string][]*loginWaiter // per address, first come first served
	turn    []string                  // addresses with waiting logins, in serving order

	hashNs  atomic.Int64 // moving average of one hash, for hints
	refused atomic.Uint64
	peak    atomic.Int32 // most logins ever waiting at once
}

type loginWaiter struct {
	ready   chan struct{} // closed when granted a slot, or evicted
	granted bool          // guarded by loginQueue.mu
	evicted bool          // set under loginQueue.mu before ready closes
}

// RetryAfterError is a refusal that tells the client when trying again is
// likely to succeed. It unwraps to the refusal (ErrRateLimited).
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns the hint an error carries, or 0.
func RetryAfter(err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return ra.After
	}
	return 0
}

// Hint bounds: never sooner than one hash from now, never later than a
// client should wait to hear again.
const (
	initialHashEstimate = 50 * time.Millisecond
	maxRetryHint        = 30 * time.Second
)

func newLoginQueue(slots, maxWait, maxPerAddr int) *loginQueue {
	q := &loginQueue{slots: slots, maxWait: maxWait, maxPerAddr: maxPerAddr, lines: make(map[string][]*loginWaiter)}
	q.hashNs.Store(int64(initialHashEstimate))
	return q
}

// acquire takes a hashing slot for a login from addr, waiting in addr's
// line until timeout fires or ctx ends. A full queue, or a wait that ends
// first, is a RetryAfterError.
func (q *loginQueue) acquire(ctx context.Context, addr string, timeout func() <-chan time.Time) error {
	q.mu.Lock()
	if q.running < q.slots && q.waiting == 0 {
		q.running++
		q.mu.Unlock()
		return nil
	}
	if len(q.lines[addr]) >= q.maxPerAddr || (q.waiting >= q.maxWait && !q.evictLocked(len(q.lines[addr]))) {
		return q.refuseLocked()
	}
	w := &loginWaiter{ready: make(chan struct{})}
	if len(q.lines[addr]) == 0 {
		q.turn = append(q.turn, addr)
	}
	q.lines[addr] = append(q.lines[addr], w)
	q.waiting++
	if n := int32(q.waiting); n > q.peak.Load() {
		q.peak.Store(n) // under mu: no lost update
	}
	q.mu.Unlock()
	select {
	case <-w.ready:
		if w.evicted {
			return q.refuse()
		}
		return nil
	case <-timeout():
	case <-ctx.Done():
	}
	q.mu.Lock()
	if w.granted { // the slot came as the wait ended: take it
		q.mu.Unlock()
		return nil
	}
	if w.evicted { // already out of its line
		return q.refuseLocked()
	}
	q.removeLocked(addr, w)
	return q.refuseLocked()
}

// evictLocked makes room in a full queue for a login whose address has
// mine waiting: the newest waiter of the longest line is refused, if that
// line is longer than mine would become. Without it a few addresses could
// hold every place and refuse all others at once, however long they wait.
func (q *loginQueue) evictLocked(mine int) bool {
	longest, n := "", 0
	for a, line := range q.lines {
		if len(line) > n {
			longest, n = a, len(line)
		}
	}
	if n <= mine+1 {
		return false
	}
	w := q.lines[longest][n-1]
	q.removeLocked(longest, w)
	w.evicted = true
	close(w.ready)
	return true
}

// refuse returns a refusal with the queue's hint, for a login refused
// for want of capacity elsewhere.
func (q *loginQueue) refuse() error {
	q.mu.Lock()
	return q.refuseLocked()
}

// refuseLocked unlocks and returns the refusal with its hint: when a login
// arriving now could expect a slot, given the logins ahead of it.
func (q *loginQueue) refuseLocked() error {
	ahead := q.waiting + q.running
	q.mu.Unlock()
	q.refused.Add(1)
	per := time.Duration(q.hashNs.Load())
	rounds := ahead/q.slots + 1
	hint := min(time.Duration(rounds)*per, maxRetryHint)
	return &RetryAfterError{Err: ErrRateLimited, After: hint}
}

// removeLocked takes a waiter that gave up out of its line.
func (q *loginQueue) removeLocked(addr string, w *loginWaiter) {
	line := q.lines[addr]
	for i, x := range line {
		if x == w {
			line = append(line[:i], line[i+1:]...)
			break
		}
	}
	q.waiting--
	if len(line) > 0 {
		q.lines[addr] = line
		return
	}
	delete(q.lines, addr)
	for i, a := range q.turn {
		if a == addr {
			q.turn = append(q.turn[:i], q.turn[i+1:]...)
			break
		}
	}
}

// release gives a slot back after a hash that took d: to the first login
// of the address whose turn it is, or to the pool when no one waits.
func (q *loginQueue) release(d time.Duration) {
	// An exponential moving average (1/8 of each new hash) tracks the
	// hash's cost on this machine, under this load.
	old := q.hashNs.Load()
	q.hashNs.Store(old + (int64(d)-old)/8)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.turn) == 0 {
		q.running--
		return
	}
	addr := q.turn[0]
	q.turn = append(q.turn[:0], q.turn[1:]...)
	line := q.lines[addr]
	w := line[0]
	line = append(line[:0], line[1:]...)
	if len(line) > 0 {
		q.lines[addr] = line
		q.turn = append(q.turn, addr) // its next login waits for its next turn
	} else {
		delete(q.lines, addr)
	}
	q.waiting--
	w.granted = true
	close(w.ready) // the slot passes to w: running is unchanged
}

// queued returns the logins waiting now.
func (q *loginQueue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}
