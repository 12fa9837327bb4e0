package e2e

import (
	"context"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/server"
)

// limitedNode starts a broker with limits l and a server for it.
func limitedNode(t *testing.T, l broker.Limits) string {
	t.Helper()
	ctx := context.Background()
	b, err := broker.Open(ctx, broker.Config{DataDir: t.TempDir(), Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{Addr: "127.0.0.1:0"}, b)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		b.Close()
	})
	return srv.Addr().String()
}

func createTopicExPayload(topic string, bits uint8, ranges uint32) []byte {
	var e enc
	e.str(topic)
	e.u8(bits)
	e.u32(ranges)
	return e.Bytes()
}

// TestQuotasOverTheWire: a producer-only user creating topics past its
// share, or a topic with 1024 ranges, and a consumer creating groups past
// its share, are answered quota_exceeded; the admin is not held to the
// per-user limits.
func TestQuotasOverTheWire(t *testing.T) {
	addr := limitedNode(t, broker.Limits{MaxTopicsPerUser: 2, MaxGroupsPerUser: 1})
	p := dial(t, addr)
	p.auth("producer", "producer123")
	p.write(frame(1, 2, createTopicPayload("t1", 16)))
	p.expectOK(2)
	p.write(frame(1, 3, createTopicPayload("t2", 16)))
	p.expectOK(3)
	p.write(frame(1, 4, createTopicPayload("t3", 16)))
	p.expectError(4, "quota_exceeded")
	p.write(frame(67, 5, createTopicExPayload("wide", 16, 1024)))
	p.expectError(5, "quota_exceeded")

	a := dial(t, addr)
	a.auth("admin", "admin123")
	a.write(frame(67, 2, createTopicExPayload("wide", 16, 1024)))
	a.expectOK(2)

	c := dial(t, addr)
	c.auth("consumer", "consumer123")
	c.write(frame(3, 2, fetchPayload("t1", nil, sp("g1"), sp("m"), 10, 0)))
	c.expectOK(2)
	c.write(frame(3, 3, fetchPayload("t1", nil, sp("junk"), sp("m"), 10, 0)))
	c.expectError(3, "quota_exceeded")
}
