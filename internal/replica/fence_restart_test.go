package replica_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/vfs"
)

// W4, W6: a follower fenced for a failover and killed before the seal
// reached the control plane comes back fenced. The old primary, cut off
// from the node that ran the failover and never told, keeps sending; the
// restarted follower refuses it, so the primary cannot complete a quorum
// above the fence, and the copy holds nothing above its answer.
func TestRestartedFencedFollowerRefusesTheOldPrimary(t *testing.T) {
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
	waitFor(t, "node 3 to hold the acknowledged appends", func() bool { return durableEnd(n3, 40) == 3 })

	// Node 2 takes node 1 for dead and fences the copies; node 1 is in
	// fact alive, and the fence never reaches it.
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

	// Node 3 loses power right after answering, before any seal.
	lost := mems[3].PowerLoss(rand.New(rand.NewPCG(3, 40)))
	c.stop(n3)
	mems[3] = lost
	n3.fs = vfs.NewFaulty(lost, n3.gate.rule)
	c.start(n3)

	_, ch := appendAsync(t, n1, 40, "stale")
	select {
	case err := <-ch:
		if err == nil {
			t.Fatal("the old primary's append was acknowledged after a quorum of its copies was fenced")
		}
		if !errors.Is(err, replica.ErrNoQuorum) {
			t.Fatalf("the old primary's append: %v, want ErrNoQuorum", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the old primary's append was never answered")
	}
	if q, d, err := n3.store.Ends(storage.SegmentID(40)); err != nil || q != 3 || d != 3 {
		t.Fatalf("the restarted fenced copy ends at %d (durable %d, %v), want 3: it took the old primary's append", q, d, err)
	}
	// The failover, run again, still gets the restarted copy's answer.
	c.net.Partition(1, 3)
	f2, err := n2.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil {
		t.Fatalf("a second failover with the restarted copy: %v", err)
	}
	if f2.End != 3 {
		t.Fatalf("second failover end %d, want 3", f2.End)
	}
}
