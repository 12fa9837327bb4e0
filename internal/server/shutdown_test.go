package server

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
	"github.com/malachi-log/malachi/internal/wire"
)

// An append whose round waits for disk space outlives its connection: it
// returns only once space comes back or the store closes. Shutdown must
// not wait for it past its deadline, or a node with a full disk never
// stops on SIGTERM (its store is closed after Shutdown returns). Once
// Shutdown gives up, closing the broker ends the append, unanswered on the
// closed connection (what comes back after a restart:
// broker.TestCloseWithARollWaitingForSpace).
func TestShutdownEndsWithAnAppendWaitingForSpace(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewFaulty(vfs.OS(), nil)
	b, err := broker.Open(context.Background(), broker.Config{DataDir: dir, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			fs.SetRule(nil)
			b.Close()
		}
	})
	if _, err := b.SeedUsers(context.Background(), true, ""); err != nil {
		t.Fatal(err)
	}
	s := New(Config{ShutdownGrace: 10 * time.Millisecond}, b)
	if err := s.prepare(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()

	c := dialClient(t, s)
	c.auth()
	c.createTopic(2, "t")
	c.request(3, produceReq("t", "acked"))
	c.answer(3)
	// Segment files full, the journal not: the round is durable and waits.
	fs.SetRule(vfs.FailOn(vfs.OpWrite, ".log", vfs.Torn(0, syscall.ENOSPC)))
	c.request(4, produceReq("t", "waiting"))
	waitFor(t, "the round to wait for space", func() {}, func() bool { return b.DiskState() == "full" })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	select {
	case err := <-shut:
		if !errors.Is(err, ErrRequestsOutlived) {
			t.Fatalf("Shutdown with an append waiting for space: %v, want ErrRequestsOutlived", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Shutdown waited a minute past its deadline for an append waiting for space")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Logf("Close with a round waiting for space: %v", err)
	}
	closed = true
	// The closed connection answered nothing for the waiting append.
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if body, err := wire.ReadFrame(c.br, 0, nil); err == nil {
		t.Fatalf("an answer came for the append left waiting: %q", body)
	}
}
