package replica_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/vfs"
)

// fencedSetup opens segment 40 on nodes 1 (primary), 2 and 3 with three
// acknowledged appends, partitions 1 from 2 (node 1 is in fact alive and
// never hears of the failover), and fences the copies from node 2. It
// returns the nodes' file systems.
func fencedSetup(t *testing.T) (*cluster, map[uint64]*vfs.MemFS) {
	t.Helper()
	mems := map[uint64]*vfs.MemFS{}
	c := newCluster(t, 3, func(id uint64) (vfs.FS, string) {
		mems[id] = vfs.NewMem()
		return mems[id], "/segments"
	})
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.stop(n1)
	c.startWith(n1, func(cfg *replica.Config) { cfg.CommitTimeout = 300 * time.Millisecond })
	c.open(40, 0, 1, 2, 3)
	for _, v := range []string{"a", "b", "c"} {
		_, ch := appendAsync(t, n1, 40, v)
		waitDone(t, ch)
	}
	// A quorum is the primary and one follower: both followers are
	// waited for, so either may seal at 3 below.
	waitFor(t, "nodes 2 and 3 to hold the acknowledged appends", func() bool {
		return durableEnd(n2, 40) == 3 && durableEnd(n3, 40) == 3
	})
	c.net.Partition(1, 2)
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	f, err := n2.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.End != 3 {
		t.Fatalf("failover end %d, want 3", f.End)
	}
	return c, mems
}

// restartOn stops nd and starts it again on fs.
func (c *cluster) restartOn(nd *node, fs *vfs.MemFS) {
	c.stop(nd)
	nd.fs = vfs.NewFaulty(fs, nd.gate.rule)
	c.start(nd)
}

// oldPrimaryRefused checks that an append through the old primary is not
// acknowledged and that node 3's copy took nothing above the fence.
func oldPrimaryRefused(t *testing.T, c *cluster) {
	t.Helper()
	_, ch := appendAsync(t, c.nodes[1], 40, "stale")
	select {
	case err := <-ch:
		if err == nil {
			t.Fatal("the old primary's append was acknowledged after a quorum of its copies was fenced (W6)")
		}
		if !errors.Is(err, replica.ErrNoQuorum) {
			t.Fatalf("the old primary's append: %v, want ErrNoQuorum", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the old primary's append was never answered")
	}
	if q, d, err := c.nodes[3].store.Ends(storage.SegmentID(40)); err != nil || q != 3 || d != 3 {
		t.Fatalf("node 3's fenced copy ends at %d (durable %d, %v), want 3: it took the old primary's append", q, d, err)
	}
}

// W4, W6: a fenced follower killed right after answering, restarted, and
// restarted once more (cleanly, as an operator would) before the seal
// reached it, still refuses the old primary: the fence must outlive every
// restart until the seal, not only the first.
func TestFencedFollowerRestartedTwiceRefusesTheOldPrimary(t *testing.T) {
	c, mems := fencedSetup(t)
	n3 := c.nodes[3]
	// kill -9: the page cache survives, the journal is not checkpointed.
	killed := mems[3].Clone()
	c.restartOn(n3, killed)
	if in, err := n3.store.Info(storage.SegmentID(40)); err != nil || !in.Fenced {
		t.Fatalf("node 3's copy after the kill: %+v (%v), want fenced", in, err)
	}
	c.stop(n3) // a clean stop
	c.start(n3)
	oldPrimaryRefused(t, c)
}

// A copy answers the same end to repeated fences (a failover retried, or
// two nodes failing over at once), and after a restart it answers at
// least that end: a second failover can never seal below the first's
// answers (W6).
func TestFenceAnswerRepeatsAndNeverShrinksAcrossARestart(t *testing.T) {
	c, mems := fencedSetup(t)
	n2, n3 := c.nodes[2], c.nodes[3]
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	for i := range 3 {
		f, err := n2.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
		if err != nil || f.End != 3 {
			t.Fatalf("fence %d again: %+v (%v), want end 3", i, f, err)
		}
	}
	c.restartOn(n3, mems[3].PowerLoss(nil))
	c.net.Partition(1, 3)
	f, err := n2.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil || f.End < 3 {
		t.Fatalf("fence after node 3's restart: %+v (%v), want an end of at least 3", f, err)
	}
	// Both survivors apply the seal at the first answer.
	for _, nd := range []*node{n2, n3} {
		if err := nd.host.SealCopy(ctx, 40, 3); err != nil {
			t.Fatalf("node %d seals at 3: %v", nd.id, err)
		}
	}
}

// A follower restarted with a fenced copy of segment 40 takes the next
// segment of the range, opened by a new primary at the sealed end: the
// fence of one copy does not block the successor.
func TestRestartedFencedFollowerTakesTheNextSegment(t *testing.T) {
	c, mems := fencedSetup(t)
	n2, n3 := c.nodes[2], c.nodes[3]
	c.restartOn(n3, mems[3].PowerLoss(nil))
	c.meta.set(40, replica.SegmentInfo{Base: 0, Replicas: []uint64{1, 2, 3}, Active: false, Owner: 7})
	c.open(41, 3, 2, 3, 1)
	for _, v := range []string{"d", "e"} {
		_, ch := appendAsync(t, n2, 41, v)
		waitDone(t, ch)
	}
	waitFor(t, "node 3 to hold the successor's appends", func() bool { return durableEnd(n3, 41) == 5 })
	if in, err := n3.store.Info(storage.SegmentID(40)); err != nil || !in.Fenced {
		t.Fatalf("node 3's copy of 40: %+v (%v), want still fenced until its seal", in, err)
	}
}

// fencedWithQueuedAppend builds the shape both tests below start from:
// node 1 (its commit timeout set) has three appends acked on segment 40,
// then sends a fourth that node 3 queues with its fsync held while node 2
// fences the copies; node 3's fsync is then released. It answers the
// cluster, the old primary's pending answer and the fence's answer.
func fencedWithQueuedAppend(t *testing.T, commitTimeout time.Duration) (*cluster, <-chan error, replication.Failover) {
	t.Helper()
	c := newCluster(t, 3, memFS)
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.stop(n1)
	c.startWith(n1, func(cfg *replica.Config) { cfg.CommitTimeout = commitTimeout })
	c.open(40, 0, 1, 2, 3)
	for _, v := range []string{"a", "b", "c"} {
		_, ch := appendAsync(t, n1, 40, v)
		waitDone(t, ch)
	}
	waitFor(t, "node 3 to hold the acknowledged appends", func() bool { return durableEnd(n3, 40) == 3 })
	c.net.Partition(1, 2)
	n3.gate.hold()
	_, ch := appendAsync(t, n1, 40, "queued")
	waitFor(t, "node 3 to queue the append", func() bool {
		q, _, _ := n3.store.Ends(storage.SegmentID(40))
		return q == 4
	})
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	f, err := n2.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	n3.gate.release()
	waitFor(t, "node 3's queued append to be durable", func() bool { return durableEnd(n3, 40) == 4 })
	return c, ch, f
}

// oldPrimaryMustNotCount fails when the old primary's pending append was
// acknowledged above the end the failover seals at (W6).
func oldPrimaryMustNotCount(t *testing.T, ch <-chan error, f replication.Failover, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err == nil && f.End < 4 {
			t.Fatalf("the old primary acknowledged offset 3 through a %s; the failover seals at %d (W6)", what, f.End)
		}
	case <-time.After(waitLimit):
		t.Fatal("the old primary's append was never answered")
	}
}

// W6: an append the old primary sent before the fence, queued in the
// follower's store with its fsync held when the follower answered, lands
// after the answer (Latch does not wait for it). The follower must not
// vote for it: the old primary, alive, would otherwise count a quorum for
// a record above the end the failover sealed.
func TestFencedFollowerDoesNotVoteForAnAppendQueuedBeforeItsFence(t *testing.T) {
	_, ch, f := fencedWithQueuedAppend(t, 2*time.Second)
	oldPrimaryMustNotCount(t, ch, f, "fenced follower")
}

// W6: as above, and then the follower restarts before the old primary
// gave up on the append: it comes back fenced with the queued append
// durable, above its answer. It must still not vote for it when the old
// primary sends it again.
func TestRestartedFencedFollowerDoesNotVoteAboveItsAnswer(t *testing.T) {
	c, ch, f := fencedWithQueuedAppend(t, 3*time.Second)
	n3 := c.nodes[3]
	c.stop(n3) // a clean stop: the marker is kept
	c.start(n3)
	if in, err := n3.store.Info(storage.SegmentID(40)); err != nil || !in.Fenced || in.DurableEnd != 4 {
		t.Fatalf("node 3's copy after the restart: %+v (%v), want fenced at 4", in, err)
	}
	oldPrimaryMustNotCount(t, ch, f, "restarted fenced follower")
}
