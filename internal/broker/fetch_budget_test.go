package broker

import (
	"bytes"
	"context"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// TestFetchPageCountsHeaders: a page stops at FetchMaxBytes counting
// record headers too, so records with large headers cannot make a page
// many times the limit.
func TestFetchPageCountsHeaders(t *testing.T) {
	const limit = 64 << 10
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: vfs.NewMem(), FetchMaxBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "h", 8, 1); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("h"), 10<<10)
	recs := make([]Record, 100)
	for i := range recs {
		recs[i] = Record{Key: []byte("k"), Value: []byte("v"), Headers: []segment.Header{{Key: []byte("x"), Value: big}}}
	}
	mustProduce(t, b, "h", recs...)
	page, err := b.Fetch(ctx, FetchRequest{Topic: "h", Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, r := range page.Records {
		size += recordSize(r)
	}
	if len(page.Records) == 0 || size > limit+recordSize(recs[0]) {
		t.Fatalf("page of %d records, %d bytes; limit %d", len(page.Records), size, limit)
	}
}

// TestAckAfterStreamEndsDoesNotBlock: once a subscription's Run has
// returned nothing drains its acks, so an Ack that finds the queue full
// must return instead of holding the connection's reader forever.
func TestAckAfterStreamEndsDoesNotBlock(t *testing.T) {
	b, err := Open(context.Background(), Config{DataDir: "/data", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "s", 8, 1); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe("s", nil, nil, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = sub.Run(ended, func(Page) error { return nil })
	for i := 0; i <= maxQueuedAcks; i++ {
		if err := sub.Ack(context.Background(), nil, 1); err != nil {
			return // refused once the queue is full: the reader is free
		}
	}
	t.Fatal("every ack was queued after the stream ended")
}
