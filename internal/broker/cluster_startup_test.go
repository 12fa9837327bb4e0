package broker_test

// Start-up of a cluster node in the corners: a restart while every peer
// is down, a first start cut short between creating the raft log and
// bootstrapping into it, and a bootstrap node that lost its data
// directory coming back as it was first started.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/raft/logstore"
	"github.com/malachi-log/malachi/internal/vfs"
)

// openWith starts nd with cfg (already built by tc.config and adjusted)
// and registers its close; it returns Open's error.
func (tc *testCluster) openWith(nd *clusterNode, cfg broker.Config, within time.Duration) error {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		return err
	}
	nd.b = b
	tc.t.Cleanup(func() {
		if nd.b == b {
			b.Close()
			nd.b = nil
		}
	})
	return nil
}

// A node restarted while every other member is down has its metadata in
// its own raft log: it must start and serve reads from it (writes answer
// metadata_unavailable until a quorum is back), as the bootstrap node does
// in the same situation. A node started with Join instead waits for a
// registration no one can make and fails when JoinTimeout ends, so a
// cluster whose nodes are started one at a time never comes back.
func TestClusterNodeRestartsWhileItsPeersAreDown(t *testing.T) {
	tc := startCluster(t, 2)
	ctx := t.Context()
	createRetried(t, tc.nodes[1].b, "kept", 1)
	tc.waitVoters(2)
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("kept on node %d", nd.id), func() error { return hasTopics(nd.b, "kept") })
	}
	first, second := tc.nodes[0], tc.nodes[1]
	tc.stop(first)
	tc.stop(second)

	cfg := tc.config(second, []string{first.gossip})
	cfg.Cluster.JoinTimeout = 5 * time.Second
	start := time.Now()
	err := tc.openWith(second, cfg, 30*time.Second)
	if err != nil {
		t.Fatalf("node 2 restarted alone (its log holds the cluster) failed after %v: %v", time.Since(start), err)
	}
	if err := hasTopics(second.b, "kept"); err != nil {
		t.Fatalf("node 2 restarted alone does not serve its metadata: %v", err)
	}
	err = second.b.CreateTopic(ctx, "no-quorum", 0, 1)
	if !errors.Is(err, broker.ErrMetadataUnavailable) {
		t.Fatalf("a write without a quorum: %v, want metadata_unavailable", err)
	}
}

// The first start of a bootstrap node creates <dir>/raft (the log store
// writes its first file) before the cluster of one is recorded in it. A
// crash in between leaves a data directory with an empty raft log and no
// Join: the next start must finish the bootstrap, as the control plane
// does for a log with no groups, instead of waiting for a join that no
// one can make and failing on every start from then on.
func TestClusterBootstrapCutShortAfterTheLogWasCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// What control.Open does first: open (create) the raft log store.
	s, err := logstore.Open(vfs.OS(), filepath.Join(dir, "raft"), logstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := broker.Config{DataDir: dir, Logger: quietLogger(), Cluster: &broker.ClusterConfig{
		NodeID: 1, PeerListen: "127.0.0.1:0", GossipListen: "127.0.0.1:0", Vnodes: 4,
		TickInterval: 20 * time.Millisecond, MetadataTimeout: 2 * time.Second, JoinTimeout: 5 * time.Second,
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("restart after a first start cut short before the bootstrap was recorded: %v", err)
	}
	defer b.Close()
	createRetried(t, b, "t", 1)
}

// Node 1 was started without Join (it bootstrapped the cluster) and loses
// its data directory; the operator starts it again the same way. It
// bootstraps a new cluster of one under id 1, with a new incarnation, on
// the peer address the old cluster's registry still gives node 1, and
// the peer transport names every cluster alike. The old members must not
// take it for the node they knew (S4, and the incarnation rule: a node
// whose replicas lost their state is refused under its old id): it must
// not receive the old cluster's metadata, nor may the old cluster count
// it as node 1's replica.
func TestClusterWipedBootstrapNodeStaysOutOfTheOldCluster(t *testing.T) {
	tc := startCluster(t, 3)
	createRetried(t, tc.nodes[1].b, "old-topic", 1)
	tc.waitVoters(3)
	wiped := tc.nodes[0]
	tc.stop(wiped)
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(wiped.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Same peer and gossip addresses as before, no Join: as first started.
	err := tc.openWith(wiped, tc.config(wiped, nil), 60*time.Second)
	if err != nil {
		t.Logf("the wiped bootstrap node was refused: %v", err)
		return
	}
	// The old cluster keeps sending node 1 its raft traffic. Watch for the
	// new node taking part: the old cluster's topics appearing on it, or
	// a group of it following another node.
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if hasTopics(wiped.b, "old-topic") == nil {
			t.Fatalf("the wiped node 1, bootstrapped anew, received the old cluster's metadata under its old id")
		}
		for _, g := range wiped.b.ClusterStatus().Groups {
			if g.Leader != 0 && g.Leader != 1 || len(g.Voters) > 1 {
				t.Fatalf("the wiped node 1, bootstrapped anew, takes part in the old cluster's %s: leader %d, voters %v", g.Name, g.Leader, g.Voters)
			}
		}
		for _, nd := range tc.nodes[1:] {
			for _, g := range nd.b.ClusterStatus().Groups {
				if g.Leader == 1 {
					t.Fatalf("node %d follows the wiped node 1 in %s", nd.id, g.Name)
				}
			}
		}
		select {
		case <-deadline:
			// Nothing crossed over. The old cluster must still know node 1
			// as it was (its replicas are simply gone).
			for _, n := range tc.nodes[1].b.ClusterStatus().Nodes {
				if n.ID == 1 && !n.Registered {
					t.Fatalf("node 1 dropped from the old registry: %+v", n)
				}
			}
			return
		case <-tick.C:
		}
	}
}
