package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/server"
)

// TestGracefulShutdownAnswersInFlight starts a long poll, shuts the
// server down, and checks the poll is answered (an empty page with a
// cursor) before the connection closes, and that new connections are
// refused.
func TestGracefulShutdownAnswersInFlight(t *testing.T) {
	ctx := context.Background()
	b, err := broker.Open(ctx, broker.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Addr: "127.0.0.1:0", ShutdownGrace: 20 * time.Second}, b)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	addr := srv.Addr().String()
	c := dial(t, addr)
	c.auth("admin", "admin123")
	c.write(frame(1, 2, createTopicPayload("drain", 8)))
	c.expectOK(2)
	// A produce answered before the drain, then a long poll left waiting.
	c.write(frame(2, 3, producePayload("drain", []rawRecord{{key: sp("k"), value: "v"}})))
	c.expectOK(3)
	c.write(frame(3, 4, fetchPayload("drain", nil, nil, nil, 10, 0)))
	_, cur := readRecords(c.expectOK(4))
	c.write(frame(3, 5, fetchPayload("drain", cur, nil, nil, 10, 30000)))
	// Frames are read in order: once the status answer is back, the long
	// poll has been read and is waiting.
	c.write(frame(72, 6, nil))
	c.expectOK(6)

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	// The waiting poll is answered: empty, with a cursor to resume from.
	recs, next := readRecords(c.expectOK(5))
	if len(recs) != 0 || next == nil {
		t.Fatalf("drained long poll answered %d records, cursor %v", len(recs), next)
	}
	c.expectClosed()
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		nc.Close()
		t.Fatal("a new connection was accepted after shutdown")
	}
}
