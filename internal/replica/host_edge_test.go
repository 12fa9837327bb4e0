package replica_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

// A produce is answered at a quorum, and its caller (a client server
// returning a request's frame to its pool) reuses the batch's bytes at
// once; the primary still holds the batch for the follower that has
// not acked it. That follower must get the batch as appended, not what
// the caller wrote into the buffer afterwards.
func TestLaggingFollowerGetsTheBatchAsAppended(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n3 := c.nodes[1], c.nodes[3]
	c.open(21, 0, 1, 2, 3)
	c.net.Partition(1, 3)

	buf := batchOf(t, "original")
	ch := make(chan error, 1)
	base, err := n1.host.Append(t.Context(), 21, buf, func(err error) { ch <- err })
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ch) // nodes 1 and 2

	// The caller's buffer now carries another request: a valid batch of
	// the same length at the same offset.
	other := batchOf(t, "imposter")
	if len(other) != len(buf) {
		t.Fatalf("test batches differ in length: %d and %d", len(other), len(buf))
	}
	if err := segment.Restamp(other, base); err != nil {
		t.Fatal(err)
	}
	copy(buf, other)

	c.net.HealAll()
	waitFor(t, "node 3 to catch up", func() bool { return durableEnd(n3, 21) == 1 })
	sameBytes(t, c, 21, 0, 1, 1, 2, 3)
}

// An append the local store refuses fails the segment; its done is not
// called as well as the error returned, so a caller counting parts
// counts it once.
func TestRefusedAppendAnswersOnce(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1 := c.nodes[1]
	c.open(22, 0, 1, 2, 3)
	_, ch := appendAsync(t, n1, 22, "a")
	waitDone(t, ch)
	// Closing the store makes its next append fail after the primary
	// assigned offsets.
	if err := n1.store.Close(); err != nil {
		t.Fatal(err)
	}
	calls := make(chan error, 2)
	_, err := n1.host.Append(context.Background(), 22, batchOf(t, "b"), func(err error) { calls <- err })
	if err == nil {
		t.Fatal("an append the local store refused was taken")
	}
	if !errors.Is(err, replica.ErrFailed) {
		t.Fatalf("refused append: %v", err)
	}
	select {
	case derr := <-calls:
		t.Fatalf("done called (%v) although Append returned %v", derr, err)
	default:
	}
}

// A copy that restarted and was fenced for a failover before its
// primary reached it knows no watermark: it must not say it serves
// reads to its base (R3), although it holds committed records.
func TestFencedCopyAfterRestartKnowsNoWatermark(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.open(23, 0, 1, 2, 3)
	for i := range 3 {
		_, ch := appendAsync(t, n1, 23, string(rune('a'+i)))
		waitDone(t, ch)
	}
	// Both followers must have heard it: the primary tells them in the
	// same round, but not at the same instant.
	waitFor(t, "nodes 2 and 3 to learn the watermark", func() bool {
		wm2, ok2 := n2.host.Watermark(23)
		wm3, ok3 := n3.host.Watermark(23)
		return ok2 && wm2 == 3 && ok3 && wm3 == 3
	})
	c.stop(n1)
	c.stop(n3)
	c.start(n3)
	if wm, ok := n3.host.Watermark(23); ok {
		t.Fatalf("a restarted copy reports watermark %d", wm)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	f, err := n2.host.FenceCopies(ctx, 23, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.End < 3 {
		t.Fatalf("failover seal %d below the acknowledged end 3", f.End)
	}
	if wm, ok := n3.host.Watermark(23); ok {
		t.Fatalf("a copy fenced after a restart reports watermark %d; it never heard its primary", wm)
	}
	if wm, ok := n2.host.Watermark(23); !ok || wm != 3 {
		t.Fatalf("the fenced copy that heard its primary: watermark %d, %v; want 3", wm, ok)
	}
}

// B1: the inbox is bounded in bytes as well as in messages. Appends
// carry up to a frame of batches each, so a peer sending faster than
// the loop runs must not make the queue hold a gigabyte: past the byte
// bound messages are dropped and counted.
func TestInboxBoundedInBytes(t *testing.T) {
	net := peer.NewMemNetwork()
	store, err := storage.Open(storage.Config{Dir: "/segments", FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var msgs [][]byte
	for i := range 10 {
		b := batchOf(t, strings.Repeat("v", 1000))
		if err := segment.Restamp(b, uint64(i)); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, replication.Encode(replication.Append{Segment: 1, Base: uint64(i), End: uint64(i + 1), Batches: b}))
	}
	size := len(msgs[0])
	m := &meta{segs: map[uint64]replica.SegmentInfo{}}
	host, err := replica.New(replica.Config{
		Self: 2, Transport: net.Transport(2), Store: store, Lookup: m.lookup,
		InboxBytes: 3*size + size/2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	for _, msg := range msgs { // the loop is not running: nothing is taken off
		host.HandleMessage(1, msg)
	}
	if got := host.Dropped(); got != 7 {
		t.Fatalf("%d of 10 messages of %d bytes dropped with a bound of %d bytes, want 7", got, size, 3*size+size/2)
	}

	// A message larger than the bound is still taken into an empty inbox.
	big, err := replica.New(replica.Config{Self: 3, Transport: net.Transport(3), Store: store, Lookup: m.lookup, InboxBytes: size / 2})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	big.HandleMessage(1, msgs[0])
	big.HandleMessage(1, msgs[1])
	if got := big.Dropped(); got != 1 {
		t.Fatalf("%d dropped, want 1: the first message goes in alone", got)
	}
}
