package storage

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// The lock excludes: goroutines contending for it never overlap, and a
// waiter whose ctx ends gives up without taking it, leaving it usable.
func TestSealLockExcludesAndGivesUp(t *testing.T) {
	var l sealLock
	var wg sync.WaitGroup
	inside, most := 0, 0
	var mu sync.Mutex
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if err := l.lock(context.Background()); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				l.unlock()
			}
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d holders at once", most)
	}

	if err := l.lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.lock(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting with an ended ctx: %v", err)
	}
	l.unlock()
	if err := l.lock(context.Background()); err != nil {
		t.Fatalf("after a waiter gave up: %v", err)
	}
	l.unlock()
}
