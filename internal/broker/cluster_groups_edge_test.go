package broker_test

// Edge cases of consumer-group coordination across the nodes of a
// cluster: limits that must hold per node whatever vnodes it leads,
// requests forwarded to the coordinator that it cannot decode, and group
// requests through a node whose raft log stalls.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/vfs"
)

// startClusterConfigured is startCluster with each node's broker.Config
// adjusted by set before the node opens.
func startClusterConfigured(t *testing.T, n int, set func(*broker.Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, log: quietLogger()}
	root := t.TempDir()
	t.Cleanup(tc.closeAll)
	for i := 1; i <= n; i++ {
		nd := &clusterNode{id: uint64(i), dir: filepath.Join(root, fmt.Sprint(i)), clientAddr: freeAddr(t), peer: freeAddr(t), gossip: freeAddr(t)}
		tc.nodes = append(tc.nodes, nd)
		var join []string
		if i > 1 {
			join = []string{tc.nodes[0].gossip}
		}
		cfg := tc.config(nd, join)
		set(&cfg)
		if err := tc.openConfig(nd, cfg); err != nil {
			t.Fatalf("node %d: %v", nd.id, err)
		}
		if i == 1 {
			if _, err := nd.b.SeedUsers(t.Context(), true, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tc
}

// inVnode is the first of prefix, prefix-1, prefix-2... that the ring of
// the test clusters (4 vnodes) maps to vnode v.
func inVnode(prefix string, v int) string {
	ring := placement.Ring{Vnodes: 4}
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if int(ring.VnodeOf(name)) == v {
			return name
		}
	}
}

// groupFetch is one group fetch of member through b, as id.
func groupFetch(b *broker.Broker, id broker.Identity, topic, group, member string) error {
	_, err := b.Fetch(context.Background(), broker.FetchRequest{Topic: topic, Group: &group, Member: &member, Max: 1, Identity: id})
	return err
}

// The consumer-group limits of a node (Config.MaxGroups, "the node's
// group table", and Limits.MaxGroupsPerUser) hold on a node in a cluster
// as on a single node (B1), whatever number of vnodes it leads: charged
// per vnode, a node leading k vnodes would admit k times each limit (a
// user's members spread over topics of different vnodes would create a
// group per vnode past their quota, and the node would hold
// k × MaxGroups groups).
func TestGroupsEdgeNodeGroupLimitsHoldAcrossVnodes(t *testing.T) {
	tc := startClusterConfigured(t, 1, func(c *broker.Config) {
		c.MaxGroups = 2
		c.Limits.MaxGroupsPerUser = 1
	})
	nd := tc.nodes[0] // a cluster of one leads every vnode
	var topics []string
	for v := range 4 {
		name := inVnode("quota", v)
		createRetried(t, nd.b, name, 2)
		topics = append(topics, name)
	}
	mallory := broker.Identity{User: "mallory", Perms: []string{"consume"}}

	if err := groupFetch(nd.b, mallory, topics[0], "junk-0", "m"); err != nil {
		t.Fatalf("mallory's first group: %v", err)
	}
	if err := groupFetch(nd.b, mallory, topics[1], "junk-1", "m"); !errors.Is(err, broker.ErrQuotaExceeded) {
		t.Errorf("mallory's second group, on a topic of another vnode: %v, want quota_exceeded (MaxGroupsPerUser 1)", err)
	}

	// The node's own (unaccounted) members: the table holds 2 groups.
	var admitted int
	for i, topic := range topics {
		if groupFetch(nd.b, broker.Identity{}, topic, fmt.Sprint("own-", i), "m") == nil {
			admitted++
		}
	}
	names := 0
	for _, topic := range topics {
		groups, err := nd.b.ListGroups(topic)
		if err != nil {
			t.Fatal(err)
		}
		names += len(groups)
	}
	if names > 2 {
		t.Errorf("the node holds %d groups with live members (%d of the node's own admitted), want at most MaxGroups 2", names, admitted)
	}
}

// A member or group name longer than a kind-7 message carries
// (dataplane.MaxNameBytes, 1 KiB) cannot reach the coordinator. The
// forwarding node must answer it as the coordinator's own node does, at
// once, with what a single node answers (stale_member for a heartbeat of
// a member it does not know, a refusal of the name for a join), rather
// than take the coordinator's refusal to decode for an unreachable
// coordinator, call it again every 50 ms until MetadataTimeout, and tell
// the client to retry for ever (B1).
func TestGroupsEdgeLongNameForwardedAnswersAsTheCoordinator(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitVoters(3)
	topic, _ := groupTopic(t, tc, "longname")
	leader := tc.leaderOf(tc.nodes[0], "vnode-0")
	other := tc.nodes[0]
	if other == leader {
		other = tc.nodes[1]
	}
	long := strings.Repeat("m", 2000)

	_, err := leader.b.MemberHeartbeat(topic, "g", long)
	if !errors.Is(err, broker.ErrStaleMember) {
		t.Fatalf("heartbeat of an unknown member with a 2000-byte name at the coordinator: %v, want stale_member", err)
	}
	_, err = other.b.MemberHeartbeat(topic, "g", long)
	if !errors.Is(err, broker.ErrStaleMember) {
		t.Errorf("the same heartbeat through node %d (not the coordinator): %v, want stale_member as at the coordinator", other.id, err)
	}

	// A join under a group name of 2000 bytes: the coordinator refuses
	// the name; the forwarded join must not answer a retriable reason.
	_, _, err = leader.b.MemberRanges(topic, long, "m")
	if err == nil || errors.Is(err, broker.ErrMetadataUnavailable) {
		t.Fatalf("join under a 2000-byte group name at the coordinator: %v, want a refusal of the name", err)
	}
	_, _, err = other.b.MemberRanges(topic, long, "m")
	if err == nil || errors.Is(err, broker.ErrMetadataUnavailable) {
		t.Errorf("the same join through node %d (not the coordinator): %v, want the coordinator's refusal, not a retriable reason", other.id, err)
	}
}

// Every consumer-group request asks who leads the topic's vnode
// (control.Node.LeaderOf), and raft.Host.Process holds the host's lock
// across the log's fsync and the apply of a whole cycle. A node whose
// raft log stalls (a slow or hung disk) must still answer group fetches,
// heartbeats, commits and leaves through it within the client's time, as
// it answers a plain fetch (C3), rather than hold each request's
// goroutine and connection slot (B1): the leadership lookup must not wait
// on that lock.
func TestGroupsEdgeGroupRequestsAnswerWhileTheRaftLogStalls(t *testing.T) {
	faulty := vfs.NewFaulty(vfs.OS(), nil)
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		if nd.id == 3 {
			nd.fs = faulty
		}
	})
	tc.waitVoters(3)
	topic, _ := groupTopic(t, tc, "stall")
	n3 := tc.nodes[2]
	if _, _, err := n3.b.MemberRanges(topic, "g", "m"); err != nil {
		t.Fatal(err)
	}

	g := &gate{dir: filepath.Join(n3.dir, "raft"), open: make(chan struct{}), entered: make(chan struct{})}
	var reopen sync.Once
	release := func() { reopen.Do(func() { close(g.open) }) }
	t.Cleanup(release) // runs before the cluster closes
	faulty.SetRule(g.rule)
	// A metadata write through node 1 reaches node 3's log, whose fsync
	// now waits.
	go func() { _ = tc.nodes[0].b.CreateTopic(context.Background(), inVnode0("stall-other"), 0, 1) }()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("node 3 never synced its raft log")
	}

	answered := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			t.Logf("%s through node 3 while its raft log stalls: %v", what, err)
		case <-time.After(5 * 2 * time.Second): // five metadata timeouts
			t.Errorf("%s through node 3 while its raft log stalls: no answer within five metadata timeouts", what)
		}
	}
	answered("a plain fetch", func() error {
		_, err := n3.b.Fetch(context.Background(), broker.FetchRequest{Topic: topic, Max: 1})
		return err
	})
	answered("a member heartbeat", func() error {
		_, err := n3.b.MemberHeartbeat(topic, "g", "m")
		return err
	})
}
