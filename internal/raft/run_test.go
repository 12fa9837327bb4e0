package raft

// Run in real time: three hosts, each driven by its own Run goroutine,
// exchange frames over bounded Go channels (one delivery goroutine per
// host). The test waits on conditions with a deadline, never on a sleep.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
)

type chanFrame struct {
	from    uint64
	payload []byte
}

type chanNet struct {
	inbox map[uint64]chan chanFrame
}

type chanSender struct {
	net  *chanNet
	from uint64
}

func (s chanSender) Send(to uint64, payload []byte) error {
	select {
	case s.net.inbox[to] <- chanFrame{from: s.from, payload: payload}:
		return nil
	default:
		return errors.New("channel full")
	}
}

// safeKV guards a kvSM so the test can read it while Run applies to it.
type safeKV struct {
	mu sync.Mutex
	kv *kvSM
}

func (s *safeKV) Apply(i uint64, d []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv.Apply(i, d)
}
func (s *safeKV) Snapshot() ([]byte, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.kv.Snapshot() }
func (s *safeKV) Restore(d []byte) error    { s.mu.Lock(); defer s.mu.Unlock(); return s.kv.Restore(d) }
func (s *safeKV) get(k string) string       { s.mu.Lock(); defer s.mu.Unlock(); return s.kv.data[k] }

func TestRunRealTime(t *testing.T) {
	ids := []uint64{1, 2, 3}
	net := &chanNet{inbox: map[uint64]chan chanFrame{}}
	for _, id := range ids {
		net.inbox[id] = make(chan chanFrame, 256)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hosts := map[uint64]*Host{}
	sms := map[uint64]*safeKV{}
	for _, id := range ids {
		h, err := NewHost(Options{
			NodeID: id, LogStore: NewMemLogStore(), Sender: chanSender{net: net, from: id},
			Clock: clock.Real(), TickInterval: 10 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		sms[id] = &safeKV{kv: newKV()}
		if err := h.CreateGroup(1, ids, sms[id]); err != nil {
			t.Fatal(err)
		}
		hosts[id] = h
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := h.Run(ctx); err != nil {
				t.Errorf("node %d: Run: %v", id, err)
			}
		}()
		go func() { // delivery: owned by the test, exits with ctx
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case f := <-net.inbox[id]:
					_ = h.Receive(f.from, f.payload)
				}
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()

	waitFor(t, "a leader", func() bool {
		l, _ := hosts[1].Leader(1)
		return l != 0
	})
	// Propose through whichever node leads, following the hint.
	waitFor(t, "a committed proposal", func() bool {
		l, _ := hosts[1].Leader(1)
		if l == 0 {
			return false
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		_, err := hosts[l].Propose(pctx, 1, putCmd("k", "v"))
		return err == nil
	})
	waitFor(t, "every replica to apply", func() bool {
		for _, id := range ids {
			if sms[id].get("k") != "v" {
				return false
			}
		}
		return true
	})
	// A follower's read barrier sees the write.
	for _, id := range ids {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := hosts[id].ReadBarrier(rctx, 1)
		rcancel()
		if err != nil {
			t.Fatalf("node %d: read barrier: %v", id, err)
		}
		if got := sms[id].get("k"); got != "v" {
			t.Fatalf("node %d after read barrier: k=%q", id, got)
		}
	}
	cancel()
	wg.Wait()
	if _, err := hosts[1].ProposeAsync(1, putCmd("k", "late")); !errors.Is(err, ErrStopped) {
		t.Fatalf("propose after Run returned: %v, want ErrStopped", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
