package peer

import (
	"context"
	"sync"
)

// callResult is what a waiting Call receives.
type callResult struct {
	resp []byte
	err  error
}

// pendingCall is a call waiting for its answer.
type pendingCall struct {
	done    chan callResult // buffered: completing never blocks
	written bool            // its request went to a connection
}

// callTable holds the calls in flight to one destination, bounded. Ids
// are per table and never reused while it lives, so a late answer to a
// call that has ended finds nothing and is dropped.
type callTable struct {
	max int
	mu  struct {
		sync.Mutex
		next   uint64
		calls  map[uint64]*pendingCall
		closed error // set by close: refuse new calls with it
	}
}

func newCallTable(max int) *callTable {
	t := &callTable{max: max}
	t.mu.calls = make(map[uint64]*pendingCall)
	return t
}

func (t *callTable) add() (uint64, *pendingCall, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed != nil {
		return 0, nil, t.mu.closed
	}
	if len(t.mu.calls) >= t.max {
		return 0, nil, ErrTooManyCalls
	}
	t.mu.next++
	c := &pendingCall{done: make(chan callResult, 1)}
	t.mu.calls[t.mu.next] = c
	return t.mu.next, c, nil
}

// complete hands the answer to call id; false when no such call waits.
func (t *callTable) complete(id uint64, r callResult) bool {
	t.mu.Lock()
	c := t.mu.calls[id]
	delete(t.mu.calls, id)
	t.mu.Unlock()
	if c == nil {
		return false
	}
	c.done <- r
	return true
}

func (t *callTable) remove(id uint64) {
	t.mu.Lock()
	delete(t.mu.calls, id)
	t.mu.Unlock()
}

// markWritten records that call id's request goes to a connection now;
// false when the call has ended and its request should not be sent.
func (t *callTable) markWritten(id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.mu.calls[id]
	if c == nil {
		return false
	}
	c.written = true
	return true
}

// failAll ends every call: those whose request was written with
// written, the others with unwritten.
func (t *callTable) failAll(written, unwritten error) {
	t.mu.Lock()
	calls := t.mu.calls
	t.mu.calls = make(map[uint64]*pendingCall)
	t.mu.Unlock()
	for _, c := range calls {
		if c.written {
			c.done <- callResult{err: written}
		} else {
			c.done <- callResult{err: unwritten}
		}
	}
}

// close fails every call with err and refuses new ones with it.
func (t *callTable) close(err error) {
	t.mu.Lock()
	t.mu.closed = err
	t.mu.Unlock()
	t.failAll(err, err)
}

func (t *callTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mu.calls)
}

// wait waits for call id's answer or for ctx.
func (t *callTable) wait(ctx context.Context, id uint64, c *pendingCall) ([]byte, error) {
	select {
	case r := <-c.done:
		return r.resp, r.err
	case <-ctx.Done():
		t.remove(id)
		return nil, ctx.Err()
	}
}
