package broker_test

// Three brokers in cluster mode in one process, on real loopback sockets
// (peer transport, gossip, client port) and real data directories: the
// metadata is shared through the control plane, segments stay on the node
// that opened them, and the others reach them over the data path.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/server"
	"github.com/malachi-log/malachi/internal/testenv"
	"github.com/malachi-log/malachi/internal/vfs"
	"github.com/malachi-log/malachi/pkg/client"
)

// clusterNode is one broker of a test cluster with its client server.
type clusterNode struct {
	id                       uint64
	dir                      string
	clientAddr, peer, gossip string
	b                        *broker.Broker
	srv                      *server.Server
	served                   chan error
	// fs and data, when set, replace the node's filesystem and data path
	// limits.
	fs   vfs.FS
	data broker.DataLimits
	// replicas, when set, is the node's default segment replication
	// factor (ClusterConfig.SegmentReplicas).
	replicas int
	// metaTimeout, when set, replaces the test clusters' 2 s metadata
	// timeout (which also bounds a replicated produce's wait for its
	// quorum).
	metaTimeout time.Duration
}

type testCluster struct {
	t     testing.TB
	nodes []*clusterNode
	log   *slog.Logger
}

// freeAddr reserves a loopback port for a listener that is made later
// (the client port must be advertised before the server exists).
func freeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(testenv.FreePorts(t, 1)[0])
}

func quietLogger() *slog.Logger {
	if os.Getenv("MALACHI_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startCluster bootstraps node 1 and joins nodes 2..n through it.
func startCluster(t testing.TB, n int) *testCluster {
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with each node's settings adjusted by
// set (when not nil) before it starts.
func startClusterWith(t testing.TB, n int, set func(nd *clusterNode)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, log: quietLogger()}
	root := t.TempDir() // registered before closeAll, so removed after it
	t.Cleanup(tc.closeAll)
	for i := 1; i <= n; i++ {
		nd := &clusterNode{id: uint64(i), dir: filepath.Join(root, fmt.Sprint(i)), clientAddr: freeAddr(t), peer: freeAddr(t), gossip: freeAddr(t)}
		if set != nil {
			set(nd)
		}
		tc.nodes = append(tc.nodes, nd)
		var join []string
		if i > 1 {
			join = []string{tc.nodes[0].gossip}
		}
		tc.open(nd, join)
		if i == 1 {
			if _, err := nd.b.SeedUsers(t.Context(), true, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tc
}

// open starts nd's broker and server; the first start learns the peer and
// gossip addresses, and a restart reuses them (the registry records the
// peer address).
func (tc *testCluster) open(nd *clusterNode, join []string) {
	tc.t.Helper()
	if err := tc.tryOpen(nd, join); err != nil {
		tc.t.Fatalf("node %d: %v", nd.id, err)
	}
}

func (tc *testCluster) config(nd *clusterNode, join []string) broker.Config {
	return broker.Config{
		DataDir: nd.dir, Logger: tc.log, ACLStrict: true, FS: nd.fs,
		Cluster: &broker.ClusterConfig{
			NodeID: nd.id, PeerListen: nd.peer, GossipListen: nd.gossip, ClientAdvertise: nd.clientAddr,
			Join: join, Vnodes: 4, TickInterval: 20 * time.Millisecond,
			MetadataTimeout: cmp.Or(nd.metaTimeout, 2*time.Second), JoinTimeout: 30 * time.Second, Data: nd.data,
			SegmentReplicas: nd.replicas,
		},
	}
}

func (tc *testCluster) tryOpen(nd *clusterNode, join []string) error {
	return tc.openConfig(nd, tc.config(nd, join))
}

// openConfig starts nd's broker with cfg and its server. When the client
// port was taken meanwhile (freeAddr's port went to some other process's
// connection before the server listened), the node starts again on
// another, which it advertises anew, as a real node may.
func (tc *testCluster) openConfig(nd *clusterNode, cfg broker.Config) error {
	err := tc.openConfigOnce(nd, cfg)
	for try := 0; try < 3 && errors.Is(err, syscall.EADDRINUSE); try++ {
		nd.clientAddr = freeAddr(tc.t)
		cfg.Cluster.ClientAdvertise = nd.clientAddr
		err = tc.openConfigOnce(nd, cfg)
	}
	return err
}

func (tc *testCluster) openConfigOnce(nd *clusterNode, cfg broker.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		return err
	}
	nd.b = b
	self := tc.self(nd)
	nd.peer, nd.gossip = self.PeerAddr, self.GossipAddr
	nd.srv = server.New(server.Config{Addr: nd.clientAddr, Logger: tc.log}, b)
	if err := nd.srv.Listen(); err != nil {
		b.Close()
		nd.b = nil
		return err
	}
	nd.served = make(chan error, 1)
	go func() { nd.served <- nd.srv.Serve() }()
	return nil
}

func (tc *testCluster) self(nd *clusterNode) broker.ClusterNode {
	for _, n := range nd.b.ClusterStatus().Nodes {
		if n.ID == nd.id {
			return n
		}
	}
	tc.t.Fatalf("node %d is not in its own status", nd.id)
	return broker.ClusterNode{}
}

func (tc *testCluster) stop(nd *clusterNode) {
	tc.t.Helper()
	if nd.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nd.srv.Shutdown(ctx); err != nil {
		tc.t.Errorf("shut down node %d's server: %v", nd.id, err)
	}
	<-nd.served
	if err := nd.b.Close(); err != nil {
		tc.t.Errorf("close node %d: %v", nd.id, err)
	}
	nd.b = nil
}

func (tc *testCluster) closeAll() {
	for _, nd := range tc.nodes {
		tc.stop(nd)
	}
}

func (tc *testCluster) client(nd *clusterNode, user, password string, opts ...client.Option) *client.Client {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts = append([]client.Option{client.WithCredentials(user, password)}, opts...)
	c, err := client.Dial(ctx, nd.clientAddr, opts...)
	if err != nil {
		tc.t.Fatalf("dial node %d as %s: %v", nd.id, user, err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// eventually retries fn until it returns nil or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s: not within %v: %v", what, within, err)
		case <-tick.C:
		}
	}
}

func hasTopics(b *broker.Broker, names ...string) error {
	var have []string
	for _, s := range b.ListTopics() {
		have = append(have, s.Name)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return fmt.Errorf("has %v, not %s", have, n)
		}
	}
	return nil
}

// Topics created through any node are seen by every node; a user and an
// ACL created through node 1 are enforced on node 3; a cursor minted by
// node 1 is accepted by node 2, which reads node 1's data for it; a
// produce through node 2 lands in node 1's segment; cluster_status lists
// every node and group.
func TestClusterMetadataThroughAnyNode(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	for i, nd := range tc.nodes {
		name := fmt.Sprintf("orders-%d", i+1)
		createRetried(t, nd.b, name, 1)
	}
	for _, nd := range tc.nodes {
		eventually(t, 10*time.Second, fmt.Sprintf("topics on node %d", nd.id), func() error {
			return hasTopics(nd.b, "orders-1", "orders-2", "orders-3")
		})
	}

	admin1 := tc.client(tc.nodes[0], "admin", "admin123")
	if err := admin1.CreateUser(ctx, "alice", client.UserOptions{Password: "alice-pw", Perms: []string{"produce", "consume"}}); err != nil {
		t.Fatal(err)
	}
	if err := admin1.GrantACL(ctx, "alice", client.ACL{Operation: "produce", Resource: "orders-*"}); err != nil {
		t.Fatal(err)
	}
	var alice3 *client.Client
	eventually(t, 10*time.Second, "alice logs in on node 3", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, tc.nodes[2].clientAddr, client.WithCredentials("alice", "alice-pw"))
		if err == nil {
			alice3 = c
		}
		return err
	})
	t.Cleanup(func() { alice3.Close() })
	if _, err := alice3.Produce(ctx, "orders-3", client.Record{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("granted produce through node 3: %v", err)
	}
	if err := tc.nodes[0].b.CreateTopic(ctx, "audit", 0, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "audit on node 3", func() error { return hasTopics(tc.nodes[2].b, "audit") })
	_, err := alice3.Produce(ctx, "audit", client.Record{Value: []byte("v")})
	if !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("ungranted produce through node 3: %v, want permission_denied", err)
	}

	// A cursor minted by node 1 for data on node 1.
	n1 := tc.nodes[0].b
	if _, err := n1.Produce(ctx, "orders-1", []broker.Record{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	page, err := n1.Fetch(ctx, broker.FetchRequest{Topic: "orders-1", Max: 10})
	if err != nil || len(page.Records) != 1 || page.Cursor == nil {
		t.Fatalf("fetch on node 1: %+v, %v", page, err)
	}
	n2 := tc.nodes[1].b
	eventually(t, 10*time.Second, "node 2 reads node 1's data", func() error {
		p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "orders-1", Max: 10})
		if err != nil || len(p.Records) != 1 || string(p.Records[0].Value) != "1" {
			return fmt.Errorf("fetch of node 1's data through node 2: %d records, %v", len(p.Records), err)
		}
		return nil
	})
	if p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "orders-1", Cursor: page.Cursor, Max: 10}); err != nil || len(p.Records) != 0 {
		t.Fatalf("fetch with node 1's cursor through node 2: %d records, %v; want none, after the one read", len(p.Records), err)
	}
	forged := *page.Cursor + "x"
	if _, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "orders-1", Cursor: &forged, Max: 10}); !errors.Is(err, broker.ErrInvalidCursor) {
		t.Fatalf("forged cursor through node 2: %v, want invalid_cursor", err)
	}
	if _, err := tc.client(tc.nodes[1], "admin", "admin123", client.WithRetry(1, 0)).
		Produce(ctx, "orders-1", client.Record{Key: []byte("a"), Value: []byte("2")}); err != nil {
		t.Fatalf("produce to node 1's active segment through node 2: %v", err)
	}
	if p, err := n1.Fetch(ctx, broker.FetchRequest{Topic: "orders-1", Cursor: page.Cursor, Max: 10}); err != nil ||
		len(p.Records) != 1 || string(p.Records[0].Value) != "2" {
		t.Fatalf("node 1 reads what node 2 forwarded: %+v, %v", p.Records, err)
	}

	// A topic deleted through node 2 is gone from node 1, whose write head
	// and segment of it are dropped: the name can be created and written
	// again through node 1.
	d, err := n1.DescribeTopic("orders-1")
	if err != nil || len(d.Ranges) != 1 || len(d.Ranges[0].Segments) != 1 {
		t.Fatalf("describe orders-1 on node 1: %+v, %v", d, err)
	}
	segFiles, err := filepath.Glob(filepath.Join(tc.nodes[0].dir, "segments", fmt.Sprintf("%020d.*", d.Ranges[0].Segments[0].ID)))
	if err != nil || len(segFiles) == 0 {
		t.Fatalf("the segment's files on node 1: %v, %v", segFiles, err)
	}
	if err := n2.DeleteTopic(ctx, "orders-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "orders-1 and its files gone from node 1", func() error {
		if _, err := n1.DescribeTopic("orders-1"); !errors.Is(err, metadata.ErrNoSuchTopic) {
			return fmt.Errorf("describe: %v", err)
		}
		for _, f := range segFiles {
			if _, err := os.Stat(f); err == nil {
				return fmt.Errorf("%s is still there", f)
			}
		}
		return nil
	})
	if err := n1.CreateTopic(ctx, "orders-1", 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Produce(ctx, "orders-1", []broker.Record{{Key: []byte("a"), Value: []byte("again")}}); err != nil {
		t.Fatalf("produce to the re-created topic through node 1: %v", err)
	}

	// Deleting alice through node 1 closes her session on node 3.
	if err := admin1.DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "alice refused on node 3", func() error {
		_, err := alice3.Produce(ctx, "orders-3", client.Record{Value: []byte("v")})
		if errors.Is(err, client.ErrInvalidCredentials) {
			return nil
		}
		return fmt.Errorf("produce as a deleted user through node 3: %v", err)
	})

	st, err := tc.client(tc.nodes[2], "admin", "admin123").ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != 3 || st.Vnodes != 4 || len(st.Groups) != 5 || len(st.Nodes) != 3 {
		t.Fatalf("cluster status: %+v", st)
	}
	for _, n := range st.Nodes {
		if !n.Registered || n.Liveness != "alive" || n.ClientAddr != tc.nodes[n.ID-1].clientAddr {
			t.Errorf("node in status: %+v", n)
		}
	}
	tc.waitVoters(3)
}

// The leader of a vnode stops: writes through the others succeed within
// seconds. Then two of three are stopped: a create through the survivor
// fails with metadata_unavailable within the client's timeout. Both come
// back: they catch up and nothing committed is lost. A node that lost its
// data directory cannot rejoin under its id.
func TestClusterFailover(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	createRetried(t, tc.nodes[0].b, "before", 1)
	tc.waitVoters(3)

	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	stopped := time.Now()
	tc.stop(leader)
	survivors := slices.DeleteFunc(slices.Clone(tc.nodes), func(nd *clusterNode) bool { return nd == leader })
	var committed []string
	for _, nd := range survivors {
		name := inVnode0(fmt.Sprintf("after-leader-%d", nd.id))
		committed = append(committed, name)
		createRetried(t, nd.b, name, 1)
		t.Logf("create through node %d done %v after vnode-0's leader began to stop", nd.id, time.Since(stopped))
	}

	last, other := survivors[0], survivors[1]
	tc.stop(other)
	c := tc.client(last, "admin", "admin123", client.WithRequestTimeout(10*time.Second), client.WithRetry(1, 0))
	start := time.Now()
	err := c.CreateTopic(ctx, "no-quorum")
	if !errors.Is(err, client.ErrMetadataUnavailable) || time.Since(start) > 10*time.Second {
		t.Fatalf("create without a quorum: %v after %v, want metadata_unavailable within the client's timeout", err, time.Since(start))
	}
	t.Logf("create without a quorum refused after %v", time.Since(start))

	tc.open(leader, []string{last.gossip})
	tc.open(other, []string{last.gossip})
	committed = append(committed, "before")
	for _, nd := range tc.nodes {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d caught up", nd.id), func() error { return hasTopics(nd.b, committed...) })
	}
	createRetried(t, leader.b, "after-restart", 1)

	// Node 3 loses its data directory and comes back under its id.
	wiped := tc.nodes[2]
	tc.stop(wiped)
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(wiped.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err = tc.tryOpen(wiped, []string{tc.nodes[0].gossip})
	if err == nil || !strings.Contains(err.Error(), "cluster remove") {
		t.Fatalf("a wiped node rejoining under its id: %v, want a refusal naming `cluster remove`", err)
	}

	// The operator removes node 3 and starts the machine as node 4.
	admin := tc.client(tc.nodes[0], "admin", "admin123")
	if err := admin.RemoveNode(ctx, 3); err != nil {
		t.Fatalf("remove node 3: %v", err)
	}
	st, err := admin.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.ID == 3 && n.Registered {
			t.Fatalf("node 3 still registered after its removal: %+v", st.Nodes)
		}
	}
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	wiped.id, wiped.peer, wiped.gossip = 4, freeAddr(t), freeAddr(t)
	tc.open(wiped, []string{tc.nodes[0].gossip})
	eventually(t, 30*time.Second, "node 4 caught up", func() error { return hasTopics(wiped.b, committed...) })
}

// inVnode0 is the first of prefix, prefix-1, prefix-2... that the ring of
// the test clusters (4 vnodes) maps to vnode 0.
func inVnode0(prefix string) string {
	ring := placement.Ring{Vnodes: 4}
	for i := 0; ; i++ {
		name := prefix
		if i > 0 {
			name = fmt.Sprintf("%s-%d", prefix, i)
		}
		if ring.VnodeOf(name) == 0 {
			return name
		}
	}
}

// waitVoters waits until every group has n voters on every node: joined
// nodes start as learners and are promoted once caught up.
func (tc *testCluster) waitVoters(n int) { tc.waitVotersWithin(n, n) }

// waitVotersWithin waits until every metadata group has a leader and
// between lo and hi voters, as every node sees it. A cluster larger than
// the metadata factor may hold a group at one voter more for a while as
// it moves voters; either way one node's loss leaves it a quorum.
func (tc *testCluster) waitVotersWithin(lo, hi int) {
	tc.t.Helper()
	for _, nd := range tc.nodes {
		eventually(tc.t, 30*time.Second, fmt.Sprintf("%d to %d voters per group on node %d", lo, hi, nd.id), func() error {
			for _, g := range nd.b.ClusterStatus().Groups {
				if len(g.Voters) < lo || len(g.Voters) > hi || g.Leader == 0 {
					return fmt.Errorf("%s: voters %v, leader %d", g.Name, g.Voters, g.Leader)
				}
			}
			return nil
		})
	}
}

// waitQuorumSafe waits until every metadata group, as every running node
// sees it, has a leader and at least min(nodes, 3) voters, so that one
// node's loss leaves each group a quorum. A cluster just started is still
// growing its groups (a learner is added, caught up, then promoted): a
// node stopped before that ends can leave a group of two voters with one,
// which elects no leader until the node returns. A group of four voters
// for a while (a replacement promoted before the removal) is as safe.
func (tc *testCluster) waitQuorumSafe() {
	tc.t.Helper()
	want := min(len(tc.nodes), 3)
	for _, nd := range tc.nodes {
		if nd.b == nil {
			continue
		}
		eventually(tc.t, 30*time.Second, fmt.Sprintf("at least %d voters and a leader per group on node %d", want, nd.id), func() error {
			for _, g := range nd.b.ClusterStatus().Groups {
				if len(g.Voters) < want || g.Leader == 0 {
					return fmt.Errorf("%s: voters %v, leader %d", g.Name, g.Voters, g.Leader)
				}
			}
			return nil
		})
	}
}

// leaderOf returns the node that leads group, as nd sees it, waiting for
// one to be known.
func (tc *testCluster) leaderOf(nd *clusterNode, group string) *clusterNode {
	tc.t.Helper()
	var leader *clusterNode
	eventually(tc.t, 20*time.Second, "leader of "+group, func() error {
		for _, g := range nd.b.ClusterStatus().Groups {
			if g.Name == group && g.Leader != 0 {
				leader = tc.nodes[g.Leader-1]
				return nil
			}
		}
		return errors.New("no leader yet")
	})
	return leader
}

// A data directory keeps the mode it was made in: a single node's cannot
// be opened as a cluster member, nor a cluster node's as a single node.
func TestClusterModeRefusesTheOtherDataDir(t *testing.T) {
	single := t.TempDir()
	b, err := broker.Open(t.Context(), broker.Config{DataDir: single, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	cfg := broker.Config{DataDir: single, Logger: quietLogger(), Cluster: &broker.ClusterConfig{
		NodeID: 1, PeerListen: "127.0.0.1:0", GossipListen: "127.0.0.1:0", TickInterval: 20 * time.Millisecond,
	}}
	if _, err := broker.Open(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "single node") {
		t.Fatalf("cluster mode on a single node's directory: %v", err)
	}

	clustered := t.TempDir()
	cfg.DataDir = clustered
	b, err = broker.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st := b.ClusterStatus(); st.Node != 1 || len(st.Nodes) != 1 {
		t.Fatalf("a cluster of one: %+v", st)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(clustered, "raft")); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.Open(t.Context(), broker.Config{DataDir: clustered, Logger: quietLogger()}); err == nil ||
		!strings.Contains(err.Error(), "cluster node") {
		t.Fatalf("single-node mode on a cluster node's directory: %v", err)
	}
}

// unreplicated keeps each segment on the node that opened it, for tests
// of the data path of unreplicated segments.
func unreplicated(nd *clusterNode) { nd.replicas = 1 }
