package replica_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/vfs"
)

// The primary, cut off from both followers, fsyncs two appends nobody
// acknowledges, then restarts: its copy answers the fence 5, the
// followers' 3. The failover waits for every answer and seals at 3, the
// end a quorum holds, so the sealed segment is on two copies and not on
// the old primary's alone.
func TestFailoverSealsWhereAQuorumHolds(t *testing.T) {
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
	waitFor(t, "nodes 2 and 3 to hold the acknowledged appends", func() bool {
		return durableEnd(n2, 40) == 3 && durableEnd(n3, 40) == 3
	})
	c.net.Partition(1, 2)
	c.net.Partition(1, 3)
	for _, v := range []string{"d", "e"} {
		_, ch := appendAsync(t, n1, 40, v)
		select {
		case err := <-ch:
			if !errors.Is(err, replica.ErrNoQuorum) {
				t.Fatalf("an append no follower got: %v, want ErrNoQuorum", err)
			}
		case <-time.After(waitLimit):
			t.Fatal("an append no follower got was never answered")
		}
	}
	waitFor(t, "node 1 to fsync its unacknowledged tail", func() bool { return durableEnd(n1, 40) == 5 })
	c.restartOn(n1, mems[1])
	c.net.Heal(1, 2)
	c.net.Heal(1, 3)

	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	f, err := n2.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.End != 3 || len(f.Unknown) != 0 || len(f.Behind) != 0 {
		t.Fatalf("failover end %d, behind %v, unknown %v; want 3, none, none", f.End, f.Behind, f.Unknown)
	}
}
