package broker

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/vfs"
)

// A roll's seal waits behind a round that waits for disk space, and the
// maintenance loop that runs it is what Close waits for first. Close must
// not wait for space that a stopping node will not see: the round gives
// up, the seal returns, the loop stops and the store closes. The record
// whose round gave up is answered with an error, never acknowledged; it
// was durable in the journal, so it is back after a restart, once, after
// the one acknowledged before it.
func TestCloseWithARollWaitingForSpace(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	fs := vfs.NewFaulty(mem, nil)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	b, err := Open(ctx, Config{DataDir: "/data", FS: fs, Clock: clk, SegmentMaxAge: time.Minute, RollCheckInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	t.Cleanup(func() {
		fs.SetRule(nil)
		select {
		case <-closed:
		default:
			b.Close()
		}
	})
	if err := b.CreateTopic(ctx, "t", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "t", []Record{{Key: []byte("k"), Value: []byte("acked")}}); err != nil {
		t.Fatal(err)
	}
	// Segment files full, the journal not: the round is durable and waits.
	fs.SetRule(vfs.FailOn(vfs.OpWrite, ".log", vfs.Torn(0, syscall.ENOSPC)))
	answered := make(chan error, 1)
	if err := b.ProduceAsync(ctx, "t", []Record{{Key: []byte("k"), Value: []byte("waiting")}}, func(_ int, err error) { answered <- err }); err != nil {
		t.Fatal(err)
	}
	until(t, "the round to wait for space", func() bool { return b.store.DiskState() == storage.DiskFull })
	clk.Advance(2 * time.Minute) // the age roll: its seal waits behind the round
	until(t, "the roll to fence the segment", func() bool {
		for _, in := range b.store.List() {
			if in.Fenced && !in.Sealed {
				return true
			}
		}
		return false
	})

	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close with a round waiting for space: %v", err)
	case <-time.After(time.Minute):
		fs.SetRule(nil)
		b.store.CheckSpace() // space back: the round, the roll and Close go on
		<-closed
		t.Fatal("Close waited a minute for a roll behind a round waiting for space")
	}
	select {
	case err := <-answered:
		// Durable, not refused: a retry would store it twice.
		if !errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, ErrRetry) {
			t.Fatalf("the produce whose round gave up was answered %v, want an outcome unknown, not retriable", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the produce whose round gave up was never answered")
	}

	r, err := Open(ctx, Config{DataDir: "/data", FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := r.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	sameValues(t, "after a restart", p.Records, "acked", "waiting")
}

// until polls cond until it holds, failing the test after a minute.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("waited a minute for %s", what)
		case <-tick.C:
		}
	}
}
