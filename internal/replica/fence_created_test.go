package replica_test

import (
	"context"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// TestFailoverIgnoresACopyTheFenceCreated: records a, b, c are
// acknowledged by nodes 1 (primary) and 2; node 3 was cut off and holds
// none. Node 1 fails and restarts with its copy; node 2 comes back with an
// empty disk under the same id. Every replica answers the fence: node 1
// its 3 records, nodes 2 and 3 the base of copies the fence itself
// created. Those two answers witness nothing, and the seal must not fall
// below the records node 1 still holds.
func TestFailoverIgnoresACopyTheFenceCreated(t *testing.T) {
	mems := map[uint64]*vfs.MemFS{}
	c := newCluster(t, 3, func(id uint64) (vfs.FS, string) {
		mems[id] = vfs.NewMem()
		return mems[id], "/segments"
	})
	n1, n2, n3 := c.nodes[1], c.nodes[2], c.nodes[3]
	c.net.Partition(1, 3)
	c.open(40, 0, 1, 2, 3)
	for _, v := range []string{"a", "b", "c"} {
		_, ch := appendAsync(t, n1, 40, v)
		waitDone(t, ch) // acknowledged: on nodes 1 and 2
	}
	c.restartOn(n1, mems[1])
	replaced := vfs.NewMem()
	c.restartOn(n2, replaced) // disk replaced
	c.net.Heal(1, 3)

	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	f, err := n3.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.End != 3 || f.Source != 1 {
		t.Fatalf("failover: end %d source %d behind %v unknown %v; want end 3 from node 1", f.End, f.Source, f.Behind, f.Unknown)
	}
	// Restarted before the seal lands, the created copies are fenced
	// empty files: asked again, they still witness nothing.
	c.restartOn(n2, replaced)
	c.restartOn(n3, mems[3])
	f, err = n3.host.FenceCopies(ctx, 40, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.End != 3 || f.Source != 1 {
		t.Fatalf("failover after a restart: end %d source %d behind %v unknown %v; want end 3 from node 1", f.End, f.Source, f.Behind, f.Unknown)
	}
}
