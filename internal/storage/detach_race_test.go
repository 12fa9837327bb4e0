package storage

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/malachi-log/malachi/internal/vfs"
)

// A Delete or Quarantine takes a copy out of the segment map before it
// removes or moves its files. A CreateFor of the same id in between (a
// copy placed back on this node while the old one is being removed) used
// to go ahead: it made its .log once the old one was gone, and the rest
// of the removal then took the new copy's markers with it, a fence
// written meanwhile among them, so the copy came back unfenced after a
// restart. The id now stays reserved until the old copy's files are
// dealt with, and a create of it waits for that, as it waits for another
// create of it.
func TestCreateOfAnIDBeingTakenOutWaitsForIt(t *testing.T) {
	for _, quarantine := range []bool{false, true} {
		name := "delete"
		if quarantine {
			name = "quarantine"
		}
		t.Run(name, func(t *testing.T) {
			bothModes(t, func(t *testing.T, noJournal bool) {
				createWhileTakenOut(t, quarantine, noJournal)
			})
		})
	}
}

func createWhileTakenOut(t *testing.T, quarantine, noJournal bool) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := vfs.NewMem()
		gate := newOneGate()
		// The old copy's .log is gone (or moved) when the removal reaches
		// its index: that is where it is held.
		op := vfs.OpRemove
		if quarantine {
			op = vfs.OpRename
		}
		faulty := vfs.NewFaulty(mem, func(o vfs.Op, path string) error {
			if o == op && strings.HasSuffix(path, "00000000000000000009"+idxExt) {
				gate.pass()
			}
			return nil
		})
		s := openMode(t, faulty, noJournal)
		t.Cleanup(gate.open) // a failed check must not leave the removal held
		if err := s.Create(9, 40); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendAt(ctx, 9, span(t, 40, 3)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Seal(ctx, 9); err != nil {
			t.Fatal(err)
		}

		gate.arm()
		removed := make(chan error, 1)
		go func() {
			var err error
			if quarantine {
				_, err = s.Quarantine(9)
			} else {
				err = s.Delete(9)
			}
			removed <- err
		}()
		synctest.Wait() // the removal holds at the old copy's index
		if !gate.holding() {
			t.Fatal("the removal never reached the old copy's index: the test sets nothing up")
		}
		created := make(chan error, 1)
		go func() { created <- s.CreateFor(9, 100, 2) }()
		synctest.Wait()
		select {
		case err := <-created:
			t.Fatalf("the create answered (%v) while the old copy's files were still being taken out", err)
		default:
		}

		gate.open()
		if err := <-removed; err != nil {
			t.Fatalf("removal: %v", err)
		}
		if err := <-created; err != nil {
			t.Fatalf("the create that waited: %v", err)
		}
		if err := s.AppendAt(ctx, 9, span(t, 100, 2)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Fence(ctx, 9); err != nil {
			t.Fatal(err)
		}
		s = reopenMode(t, s, mem, noJournal)
		in, err := s.Info(9)
		if err != nil {
			t.Fatal(err)
		}
		if in.Base != 100 || in.End != 102 || in.Sealed || !in.Fenced {
			t.Fatalf("after a restart the new copy is %+v; want base 100, end 102, active and fenced", in)
		}
	})
}

// A removal that fails part-way still frees the id: a create waiting on
// it answers instead of waiting for good.
func TestCreateAfterAFailedDeleteAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failLog := false
		faulty := vfs.NewFaulty(vfs.NewMem(), func(o vfs.Op, path string) error {
			mu.Lock()
			defer mu.Unlock()
			if failLog && o == vfs.OpRemove && strings.HasSuffix(path, logExt) {
				return vfs.ErrInjected
			}
			return nil
		})
		s := openMode(t, faulty, false)
		if err := s.Create(9, 40); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		failLog = true
		mu.Unlock()
		if err := s.Delete(9); !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("Delete with a failing unlink: %v", err)
		}
		// The old .log is still there: the create refuses to take it over.
		if err := s.CreateFor(9, 100, 2); !errors.Is(err, ErrExists) {
			t.Fatalf("create over the .log a failed Delete left: %v, want ErrExists", err)
		}
		mu.Lock()
		failLog = false
		mu.Unlock()
		if err := s.Delete(9); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a second Delete of the detached copy: %v, want ErrNotFound", err)
		}
	})
}

// A Delete that fails after the id is held (the store closes while it
// waits for the copy's queued appends) frees it too: the create waiting
// on it answers, ErrClosed, instead of waiting for good.
func TestCreateWaitingOnADeleteCutShortByCloseAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		gate := newOneGate()
		faulty := vfs.NewFaulty(vfs.NewMem(), func(o vfs.Op, _ string) error {
			if o == vfs.OpSync {
				gate.pass()
			}
			return nil
		})
		s := openMode(t, faulty, false)
		t.Cleanup(gate.open)
		if err := s.Create(9, 40); err != nil {
			t.Fatal(err)
		}
		gate.arm()
		appended := make(chan error, 1)
		if err := s.AppendAsync(ctx, 9, span(t, 40, 2), func(err error) { appended <- err }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the append's round holds in its fsync
		if !gate.holding() {
			t.Fatal("the append's round never reached an fsync: the test sets nothing up")
		}
		deleted := make(chan error, 1)
		go func() { deleted <- s.Delete(9) }()
		synctest.Wait() // the Delete waits for the queued append
		created := make(chan error, 1)
		go func() { created <- s.CreateFor(9, 100, 2) }()
		synctest.Wait()
		select {
		case err := <-created:
			t.Fatalf("the create answered (%v) while the Delete still held the id", err)
		default:
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait()
		gate.open()
		if err := <-appended; err != nil {
			t.Fatalf("the queued append: %v", err)
		}
		if err := <-deleted; !errors.Is(err, ErrClosed) {
			t.Fatalf("Delete cut short by Close: %v, want ErrClosed", err)
		}
		if err := <-created; !errors.Is(err, ErrClosed) {
			t.Fatalf("the create that waited on it: %v, want ErrClosed", err)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	})
}

// oneGate holds the first operation that passes it after arm, until open.
type oneGate struct {
	mu    sync.Mutex
	armed bool
	held  bool
	ch    chan struct{}
}

func newOneGate() *oneGate { return &oneGate{ch: make(chan struct{})} }

func (g *oneGate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *oneGate) pass() {
	g.mu.Lock()
	hold := g.armed && !g.held
	if hold {
		g.held = true
	}
	g.mu.Unlock()
	if hold {
		<-g.ch
	}
}

func (g *oneGate) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *oneGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}
