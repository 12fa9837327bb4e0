package storage

import (
	"context"
	"sync"
)

// sealLock serialises a segment's fences, cuts, seals and deletes, as a
// mutex would, but a waiter gives up when its ctx ends: a cut holds the
// lock across file writes and fsyncs, and a fence or seal with a deadline
// must not outlive it. Like sync.Mutex it promises no order among
// waiters; what it guarantees is mutual exclusion, so each holder sees
// the segment as the previous one left it. The zero value is unlocked.
type sealLock struct {
	mu   sync.Mutex
	held bool
	// free is closed when the holder unlocks; made by the first waiter,
	// so an uncontended lock allocates nothing.
	free chan struct{}
}

// lock takes the lock, or returns ctx.Err() if ctx ends first. A free
// lock is taken even when ctx has ended: the caller checks ctx where it
// next waits.
func (l *sealLock) lock(ctx context.Context) error {
	for {
		l.mu.Lock()
		if !l.held {
			l.held = true
			l.mu.Unlock()
			return nil
		}
		if l.free == nil {
			l.free = make(chan struct{})
		}
		free := l.free
		l.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unlock releases the lock and wakes every waiter; one of them takes it.
func (l *sealLock) unlock() {
	l.mu.Lock()
	l.held = false
	if l.free != nil {
		close(l.free)
		l.free = nil
	}
	l.mu.Unlock()
}
