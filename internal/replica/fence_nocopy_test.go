package replica_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/storage"
)

// W4, W6: a primary cut off from its followers right after opening its
// segment reaches neither of them, so neither holds a copy. A failover
// must still gather a quorum of fence answers: each follower creates an
// empty copy at the segment's base, fences it durably and answers the
// base. The old primary's appends are refused by those copies from then
// on, also after they restart, so it never acknowledges anything above
// the failover's end.
func TestFenceWithoutCopyAnswersTheBase(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.stop(n1)
	c.startWith(n1, func(cfg *replica.Config) { cfg.CommitTimeout = 300 * time.Millisecond })
	const seg, base = 50, 10
	c.net.Partition(1, 2)
	c.net.Partition(1, 3)
	c.open(seg, base, 1, 2, 3)
	_, pending := appendAsync(t, n1, seg, "unacked")
	for _, nd := range []*node{n2, n3} {
		if _, _, err := nd.store.Ends(storage.SegmentID(seg)); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("node %d holds a copy before any append reached it: %v", nd.id, err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	f, err := n2.host.FenceCopies(ctx, seg, []uint64{1, 2, 3})
	if err != nil {
		t.Fatalf("a failover with two followers holding no copy: %v", err)
	}
	if f.End != base {
		t.Fatalf("failover end %d, want the segment's base %d", f.End, base)
	}
	for _, nd := range []*node{n2, n3} {
		info, err := nd.store.Info(storage.SegmentID(seg))
		if err != nil || !info.Fenced || info.Base != base || info.End != base {
			t.Fatalf("node %d's copy after the fence: %+v, %v; want an empty fenced copy at %d", nd.id, info, err, base)
		}
	}

	// The partition heals: the old primary's resends reach the fenced
	// copies, which refuse them, so its append is never acknowledged.
	c.net.HealAll()
	expectNoQuorum(t, pending, "the append sent before the fence")

	// Both followers restart before any seal is recorded: the fence is
	// on disk, and the old primary's next append is refused too.
	for _, nd := range []*node{n2, n3} {
		c.stop(nd)
		c.start(nd)
	}
	_, stale := appendAsync(t, n1, seg, "stale")
	expectNoQuorum(t, stale, "an append after the followers' restart")
	for _, nd := range []*node{n2, n3} {
		info, err := nd.store.Info(storage.SegmentID(seg))
		if err != nil || !info.Fenced || info.End != base {
			t.Fatalf("node %d's copy after its restart: %+v, %v; want fenced and empty at %d", nd.id, info, err, base)
		}
	}

	// A failover run again gets the same answers from the restarted copies.
	f2, err := n2.host.FenceCopies(ctx, seg, []uint64{1, 2, 3})
	if err != nil || f2.End != base {
		t.Fatalf("a second failover: end %d, %v; want %d", f2.End, err, base)
	}
}

// A fence of a segment the control plane has sealed, or does not list
// this node for, still creates no copy: only an active segment's replica
// answers without one.
func TestFenceWithoutCopyOnlyForAnActiveReplica(t *testing.T) {
	c := newCluster(t, 3, memFS)
	n2, n3 := c.nodes[2], c.nodes[3]
	c.meta.set(60, replica.SegmentInfo{Base: 5, Replicas: []uint64{1, 2}, Active: true, Owner: 7})
	c.meta.set(61, replica.SegmentInfo{Base: 5, Replicas: []uint64{1, 2, 3}, Active: false, Owner: 7})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := n2.host.FenceCopies(ctx, 60, []uint64{3}); !errors.Is(err, replica.ErrNoQuorum) {
		t.Fatalf("fence of a copy node 3 is not listed for: %v, want ErrNoQuorum", err)
	}
	if _, err := n2.host.FenceCopies(ctx, 61, []uint64{3}); !errors.Is(err, replica.ErrNoQuorum) {
		t.Fatalf("fence of a sealed segment node 3 holds no copy of: %v, want ErrNoQuorum", err)
	}
	for _, id := range []storage.SegmentID{60, 61} {
		if _, _, err := n3.store.Ends(id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("node 3 made a copy of %d: %v", id, err)
		}
	}
}

// expectNoQuorum waits for an append's outcome and checks that it was
// refused for want of a quorum.
func expectNoQuorum(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if !errors.Is(err, replica.ErrNoQuorum) {
			t.Fatalf("%s: %v, want ErrNoQuorum", what, err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("%s was never answered", what)
	}
}
