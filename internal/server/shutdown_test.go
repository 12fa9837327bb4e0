package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
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
// Shutdown gives up, closing the broker ends the append; the record,
// durable in the journal but never acknowledged, is back after a restart,
// once, after the one acknowledged before it.
func TestShutdownEndsWithAnAppendWaitingForSpace(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	var refused atomic.Int64
	fs := vfs.NewFaulty(vfs.OS(), func(op vfs.Op, name string) error {
		if full.Load() && op == vfs.OpWrite && strings.HasSuffix(name, ".log") {
			refused.Add(1)
			return vfs.Torn(0, syscall.ENOSPC)
		}
		return nil
	})
	b, err := broker.Open(context.Background(), broker.Config{DataDir: dir, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			full.Store(false)
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
	full.Store(true)
	c.request(4, produceReq("t", "waiting"))
	waitFor(t, "the segment write to be refused for space", func() {}, func() bool { return refused.Load() > 0 })

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

	r, err := broker.Open(context.Background(), broker.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := r.Fetch(context.Background(), broker.FetchRequest{Topic: "t", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range p.Records {
		got = append(got, string(rec.Value))
	}
	if strings.Join(got, ",") != "acked,waiting" {
		t.Fatalf("after a restart the topic holds %v, want [acked waiting]", got)
	}
}
