package control

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/raft"
)

// TestRemoveLiveVoterWhileAnotherIsDownKeepsQuorum: three nodes, node 3
// is down (still registered), and the operator removes the live node 2.
// Every group then goes from voters {1,2,3} to {1,3}: a quorum of two
// that needs the dead node. Removing a voter must not leave a group
// without a live quorum (C3): the cluster was writable before the
// removal (1 and 2 up), and must stay writable after it. When node 3 is
// gone for good, a cluster in this state cannot even remove it, since
// the root has no quorum to commit the removal.
func TestRemoveLiveVoterWhileAnotherIsDownKeepsQuorum(t *testing.T) {
	c := threeNodes(t, 2)
	if res := c.apply(1, createTopic("before")); res.Err != nil {
		t.Fatal(res.Err)
	}
	c.stopNode(3)
	// Still writable with 1 and 2 up.
	if res := c.apply(1, createTopic("with-two")); res.Err != nil {
		t.Fatal(res.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := c.node(1).Remove(ctx, 2)
	cancel()
	t.Logf("Remove(2) with node 3 down: %v", err)
	// Give the reconciler time to act, counted in ticks: until node 2 is
	// in no group, or long enough for many reconciler rounds.
	start := c.ticks.Load()
	c.waitFor("node 2 out of every group or 400 ticks", 2000, func() bool {
		return len(c.node(1).groupsWith(2)) == 0 || c.ticks.Load()-start > 400
	})
	t.Logf("after the removal:\n%s", c.describe())
	for _, g := range append([]uint64{RootGroup}, vnodeGroups(2)...) {
		st, err := c.node(1).host.Status(g)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Voters) == 2 && contains(st.Voters, 3) && !contains(st.Voters, 2) {
			t.Errorf("%s: voters %v: a quorum of two that needs the stopped node 3", groupName(g), st.Voters)
		}
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer wcancel()
	cmd := createTopic("after-remove")
	cmd.V, cmd.Now = metadata.Version, c.clock.Now().UnixMilli()
	if _, err := c.node(1).Apply(wctx, cmd); err != nil {
		t.Fatalf("write through node 1 after removing live node 2 while node 3 is down: %v", err)
	}
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestRemovedNodeRestartedCanJoinAgain: node 3 is down when it is
// removed (the usual case: a dead node is removed). It comes back later
// with its old log and calls Join. Join reads its own, stale, root
// replica, finds itself registered and returns nil, but the cluster no
// longer has it: no group will ever replicate to it again, and nothing
// reports the problem. Join must either register the node again or say
// that it cannot.
func TestRemovedNodeRestartedCanJoinAgain(t *testing.T) {
	c := threeNodes(t, 2)
	c.stopNode(3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.node(1).Remove(ctx, 3); err != nil {
		t.Fatalf("remove stopped node 3: %v", err)
	}
	n3 := c.start(3, false) // with its kept log
	jctx, jcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer jcancel()
	err := n3.Join(jctx)
	if err != nil {
		t.Logf("Join answered %v (a clear refusal is acceptable)", err)
		return
	}
	c.waitFor("node 3 registered again after a successful Join", 1000, func() bool {
		reg, err := c.node(1).Registry()
		return err == nil && reg.Has(3)
	})
}

// TestRestartWithNewAttrsUpdatesRegistry: a node restarts with new
// attributes (or, over TCP, a new peer address: membership allows a
// restarted node to come back at another address) and calls Join. Join
// returns at once because its local registry names it, so the registry
// keeps the old record: placement keeps using the old attributes, and
// other nodes keep dialling the old address.
func TestRestartWithNewAttrsUpdatesRegistry(t *testing.T) {
	c := threeNodes(t, 2)
	c.stopNode(3)
	n3 := startWithAttrs(c, 3, map[string]string{"rack": "moved"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n3.Join(ctx); err != nil {
		t.Fatalf("join: %v", err)
	}
	c.waitFor("node 1's registry to carry node 3's new attributes", 1000, func() bool {
		reg, err := c.node(1).Registry()
		if err != nil {
			return false
		}
		rec, ok := reg.Node(3)
		return ok && maps.Equal(rec.Attrs, map[string]string{"rack": "moved"})
	})
}

// startWithAttrs is testCluster.start with attributes in the Config.
func startWithAttrs(c *testCluster, id uint64, attrs map[string]string) *Node {
	c.t.Helper()
	c.mu.Lock()
	store := c.stores[id]
	if store == nil {
		store = raft.NewMemLogStore()
		c.stores[id] = store
	}
	c.mu.Unlock()
	tr := c.net.Transport(id)
	n, err := Open(context.Background(), Config{
		NodeID: id, Addr: peer.MemAddr(id), Attrs: attrs, Transport: tr, LogStore: store,
		Vnodes: c.vnodes, ClusterID: "test", ClusterSecret: testSecret,
		Seeds: map[uint64]string{1: peer.MemAddr(1), 2: peer.MemAddr(2), 3: peer.MemAddr(3)},
		Clock: c.clock, TickInterval: testTick, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		c.t.Fatalf("node %d: open: %v", id, err)
	}
	if err := tr.Start(); err != nil {
		c.t.Fatalf("node %d: start transport: %v", id, err)
	}
	c.mu.Lock()
	c.nodes[id], c.trs[id] = n, tr
	c.mu.Unlock()
	return n
}
