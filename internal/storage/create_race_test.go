package storage

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A create of an id another create is still making (its fsync, or its
// journal round, not yet done) waits for that create's outcome before it
// answers ErrExists, so a caller that then reads the copy finds it: a
// follower's fence racing the first append to create its copy used to get
// ErrNotFound here and fail the failover. synctest.Wait tells when every
// goroutine is blocked, so the second create is seen waiting, not raced.
func TestCreateOfAnIDBeingCreatedWaitsForIt(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			var gate chan struct{}
			faulty := vfs.NewFaulty(vfs.NewMem(), func(op vfs.Op, _ string) error {
				mu.Lock()
				g := gate
				mu.Unlock()
				if g != nil && (op == vfs.OpSync || op == vfs.OpSyncDir) {
					<-g
				}
				return nil
			})
			s := openMode(t, faulty, noJournal)
			mu.Lock()
			gate = make(chan struct{})
			mu.Unlock()
			t.Cleanup(func() { // a failed check must not leave the store's Close held
				mu.Lock()
				defer mu.Unlock()
				if gate != nil {
					close(gate)
					gate = nil
				}
			})

			first := make(chan error, 1)
			go func() { first <- s.CreateFor(9, 40, 1) }()
			synctest.Wait() // the first create holds in an fsync

			type outcome struct{ create, ends error }
			second := make(chan outcome, 1)
			go func() {
				err := s.CreateFor(9, 40, 1)
				_, _, ends := s.Ends(9)
				second <- outcome{err, ends}
			}()
			synctest.Wait()
			select {
			case o := <-second:
				t.Fatalf("the second create answered (%v, then Ends: %v) while the first was still making the copy", o.create, o.ends)
			default:
			}

			mu.Lock()
			close(gate)
			gate = nil
			mu.Unlock()
			if err := <-first; err != nil {
				t.Fatalf("first create: %v", err)
			}
			o := <-second
			if !errors.Is(o.create, ErrExists) || o.ends != nil {
				t.Fatalf("second create: %v, then Ends: %v; want ErrExists and a readable copy", o.create, o.ends)
			}
			if err := s.AppendAt(context.Background(), 9, span(t, 40, 2)); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// A create that fails leaves the id free: one waiting on it makes the
// copy itself.
func TestCreateWaitingOnAFailedCreateMakesTheCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var gate chan struct{}
		fail := true
		faulty := vfs.NewFaulty(vfs.NewMem(), func(op vfs.Op, _ string) error {
			mu.Lock()
			g, f := gate, fail
			mu.Unlock()
			if g == nil || op != vfs.OpSync && op != vfs.OpSyncDir {
				return nil
			}
			<-g
			if f {
				return vfs.ErrInjected
			}
			return nil
		})
		s := openMode(t, faulty, true)
		mu.Lock()
		gate = make(chan struct{})
		mu.Unlock()
		first := make(chan error, 1)
		go func() { first <- s.CreateFor(9, 40, 1) }()
		synctest.Wait()
		second := make(chan error, 1)
		go func() { second <- s.CreateFor(9, 40, 1) }()
		synctest.Wait()

		mu.Lock()
		g := gate
		gate = nil
		mu.Unlock()
		close(g) // the first create's fsync fails; the second's are not held
		if err := <-first; err == nil {
			t.Fatal("the first create succeeded with a failing fsync: the test sets nothing up")
		}
		mu.Lock()
		fail = false
		mu.Unlock()
		if err := <-second; err != nil {
			t.Fatalf("the create waiting on a failed one: %v, want it to make the copy", err)
		}
		if _, _, err := s.Ends(9); err != nil {
			t.Fatal(err)
		}
	})
}
