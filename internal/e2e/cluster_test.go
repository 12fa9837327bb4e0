package e2e

// Three real `malachi serve --node-id N` processes on loopback, formed
// into a cluster the way the README does it. The metadata (topics, users,
// ACLs) is replicated by the control plane, so it is written and read
// through any node; data still lives on the node that took a range's
// first produce, so records are produced and read through that node.
// Every wait is a condition polled against a deadline.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/pkg/client"
)

// replicated is how long a change made through one node may take to be
// seen through another: a raft commit and an apply, on a loaded machine.
const replicated = 15 * time.Second

// topicSeen reports nil once c's node lists topic.
func topicSeen(ctx context.Context, c *client.Client, topic string) func() error {
	return func() error {
		_, err := c.DescribeTopic(ctx, topic)
		return err
	}
}

// TestClusterServesMetadataThroughEveryNode: topics created through any
// node are seen through every node; records are produced and read back
// through the node that holds the range; a user and a grant created
// through one node log in and are enforced on every node, and so is the
// grant's revocation.
func TestClusterServesMetadataThroughEveryNode(t *testing.T) {
	c := startCluster(t, 3, "--acl-strict")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admins := []*client.Client{c.admin(ctx, 1), c.admin(ctx, 2), c.admin(ctx, 3)}

	for i, a := range admins {
		name := fmt.Sprintf("t-via-%d", i+1)
		if err := a.CreateTopic(ctx, name, client.WithRanges(2)); err != nil {
			t.Fatalf("create %s through node %d: %v", name, i+1, err)
		}
		for j, b := range admins {
			d := within(t, replicated, fmt.Sprintf("%s through node %d", name, j+1), topicSeen(ctx, b, name))
			t.Logf("%s created through node %d, seen through node %d after %s", name, i+1, j+1, d)
		}
	}
	for j, b := range admins {
		topics, err := b.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tp := range topics {
			names = append(names, tp.Name)
		}
		if !slices.Equal(names, []string{"t-via-1", "t-via-2", "t-via-3"}) {
			t.Errorf("node %d lists %q", j+1, names)
		}
	}
	// A second create of a name is refused through any node.
	if err := admins[2].CreateTopic(ctx, "t-via-1"); !errors.Is(err, client.ErrAlreadyExists) {
		t.Errorf("create t-via-1 again through node 3: %v, want already_exists", err)
	}

	checkDataThroughOwner(t, ctx, c, admins)
	checkUsersOnEveryNode(t, ctx, c, admins)
}

// checkDataThroughOwner produces through node 2, which then holds the
// topic's ranges, reads the records back through it, and checks that the
// other nodes either refuse a produce with a retriable reason or store
// what they acknowledge where the owner serves it: no acknowledged record
// is lost.
func checkDataThroughOwner(t *testing.T, ctx context.Context, c *testCluster, admins []*client.Client) {
	t.Helper()
	const topic = "t-via-2"
	recs := []client.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}
	if n, err := admins[1].Produce(ctx, topic, recs...); err != nil || n != len(recs) {
		t.Fatalf("produce through node 2: %d, %v", n, err)
	}
	want := map[string]bool{"1": true, "2": true}
	for _, id := range []int{1, 3} {
		other := c.dial(ctx, id, "admin", "admin123", 5*time.Second, 1)
		v := fmt.Sprintf("via-%d", id)
		n, err := other.Produce(ctx, topic, client.Record{Key: []byte("a"), Value: []byte(v)})
		t.Logf("produce through node %d, which does not hold the range: %d, %v", id, n, err)
		switch {
		case err == nil && n == 1:
			want[v] = true
		case err != nil && !client.IsRetriable(err):
			t.Errorf("produce through node %d (not the owner): %v, want success or a retriable refusal", id, err)
		}
	}
	got := map[string]bool{}
	within(t, replicated, "the acknowledged records through node 2", func() error {
		page, err := admins[1].Fetch(ctx, topic, client.FetchOptions{Max: 100})
		if err != nil {
			return err
		}
		for _, r := range page.Records {
			got[string(r.Value)] = true
		}
		for v := range want {
			if !got[v] {
				return fmt.Errorf("have %v, want %v", got, want)
			}
		}
		return nil
	})
	if len(got) != len(want) {
		t.Errorf("read %v through the owner, acknowledged %v", got, want)
	}
}

// checkUsersOnEveryNode creates a consumer and one grant through node 1;
// the nodes run with --acl-strict, so the grant is its only access. On
// every node it logs in, may read what the grant names and nothing else;
// a revocation through node 3 takes the grant away on every node.
func checkUsersOnEveryNode(t *testing.T, ctx context.Context, c *testCluster, admins []*client.Client) {
	t.Helper()
	if err := admins[0].CreateUser(ctx, "carol", client.UserOptions{Password: "carol-pass-1", Perms: []string{client.PermConsume}}); err != nil {
		t.Fatal(err)
	}
	grant := client.ACL{Operation: "consume", Resource: "t-via-*"}
	if err := admins[0].GrantACL(ctx, "carol", grant); err != nil {
		t.Fatal(err)
	}
	if err := admins[0].CreateTopic(ctx, "private"); err != nil {
		t.Fatal(err)
	}
	carol := make([]*client.Client, 3)
	for i := range carol {
		id := i + 1
		within(t, replicated, fmt.Sprintf("carol's grant on node %d", id), func() error {
			cl, err := client.Dial(ctx, c.node(id).client, client.WithCredentials("carol", "carol-pass-1"),
				client.WithRequestTimeout(5*time.Second), client.WithRetry(1, 0))
			if err != nil {
				return err
			}
			if _, err := cl.Fetch(ctx, "t-via-3", client.FetchOptions{Max: 1}); err != nil {
				cl.Close()
				return err
			}
			carol[i] = cl
			return nil
		})
		t.Cleanup(func() { carol[i].Close() })
		within(t, replicated, fmt.Sprintf("private topic known on node %d", id), topicSeen(ctx, admins[i], "private"))
		if _, err := carol[i].Fetch(ctx, "private", client.FetchOptions{Max: 1}); !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("carol reads private through node %d: %v, want permission_denied", id, err)
		}
		if _, err := carol[i].Produce(ctx, "t-via-3", client.Record{Value: []byte("x")}); !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("carol produces through node %d: %v, want permission_denied", id, err)
		}
	}
	if err := admins[2].RevokeACL(ctx, "carol", grant); err != nil {
		t.Fatal(err)
	}
	for i, cl := range carol {
		within(t, replicated, fmt.Sprintf("the revocation on node %d", i+1), func() error {
			_, err := cl.Fetch(ctx, "t-via-3", client.FetchOptions{Max: 1})
			if errors.Is(err, client.ErrPermissionDenied) {
				return nil
			}
			return fmt.Errorf("fetch after the revocation: %v", err)
		})
	}
}

// vnodeLeader returns the leader of the vnode holding topic, as node
// id's replica sees it, once it has one.
func vnodeLeader(t *testing.T, ctx context.Context, c *client.Client, topic string) (string, int) {
	t.Helper()
	var name string
	var leader int
	within(t, replicated, "a leader of "+topic+"'s vnode", func() error {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		name = fmt.Sprintf("vnode-%d", placement.Ring{Vnodes: st.Vnodes}.VnodeOf(topic))
		for _, g := range st.Groups {
			if g.Name == name && g.Leader != 0 {
				leader = int(g.Leader)
				return nil
			}
		}
		return fmt.Errorf("no leader for %s in %+v", name, st.Groups)
	})
	return name, leader
}

// others are the ids of the cluster's nodes but skip.
func (c *testCluster) others(skip ...int) []int {
	var ids []int
	for _, nd := range c.nodes {
		if !slices.Contains(skip, nd.id) {
			ids = append(ids, nd.id)
		}
	}
	return ids
}

// writableThrough creates topic through node via and waits until every
// node of seeAt lists it, and returns how long that took from the first
// attempt. Each attempt is bounded by the client's timeout; a refusal is
// tried again until the deadline.
func writableThrough(t *testing.T, ctx context.Context, c *testCluster, topic string, via int, seeAt []int) time.Duration {
	t.Helper()
	start := time.Now()
	w := c.dial(ctx, via, "admin", "admin123", 5*time.Second, 1)
	within(t, replicated, fmt.Sprintf("create %s through node %d", topic, via), func() error {
		err := w.CreateTopic(ctx, topic)
		if errors.Is(err, client.ErrAlreadyExists) {
			return nil // an earlier attempt's answer was lost, but it committed
		}
		return err
	})
	for _, id := range seeAt {
		r := c.dial(ctx, id, "admin", "admin123", 5*time.Second, 1)
		within(t, replicated, fmt.Sprintf("%s through node %d", topic, id), topicSeen(ctx, r, topic))
	}
	return time.Since(start)
}

// TestClusterSurvivesKilledNodes: SIGKILL the leader of a topic's vnode;
// the two others keep serving metadata reads and writes; the killed node
// restarts and catches up. Then the same for another node.
func TestClusterSurvivesKilledNodes(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writableThrough(t, ctx, c, "before", 1, []int{1, 2, 3})

	group, leader := vnodeLeader(t, ctx, c.admin(ctx, 1), "after-leader")
	t.Logf("%s (of topic after-leader) is led by node %d: killing it", group, leader)
	c.node(leader).kill()
	live := c.others(leader)
	d := writableThrough(t, ctx, c, "after-leader", live[0], live)
	t.Logf("metadata written through node %d and read through %v %s after the leader's kill", live[0], live, d)
	for _, id := range live {
		within(t, replicated, fmt.Sprintf("before through node %d", id), topicSeen(ctx, c.admin(ctx, id), "before"))
	}
	_, next := vnodeLeader(t, ctx, c.admin(ctx, live[1]), "after-leader")
	if next == leader {
		t.Fatalf("%s still names the killed node %d as leader", group, leader)
	}
	c.restart(leader)
	back := c.admin(ctx, leader)
	within(t, replicated, "the restarted node catches up", topicSeen(ctx, back, "after-leader"))
	waitCaughtUp(t, ctx, c, leader)

	// Then any one node: the one after the first in id order.
	victim := live[0]
	c.node(victim).kill()
	rest := c.others(victim)
	d = writableThrough(t, ctx, c, "after-another", rest[1], rest)
	t.Logf("metadata written and read through %v %s after node %d's kill", rest, d, victim)
	c.restart(victim)
	for _, topic := range []string{"before", "after-leader", "after-another"} {
		within(t, replicated, "node "+strconv.Itoa(victim)+" has "+topic, topicSeen(ctx, c.admin(ctx, victim), topic))
	}
	waitCaughtUp(t, ctx, c, victim)
}

// waitCaughtUp waits until node id's replica of every group has applied
// at least what another node's replica had committed when asked.
func waitCaughtUp(t *testing.T, ctx context.Context, c *testCluster, id int) {
	t.Helper()
	ref, err := c.admin(ctx, c.others(id)[0]).ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	target := map[string]uint64{}
	for _, g := range ref.Groups {
		target[g.Name] = g.Commit
	}
	me := c.admin(ctx, id)
	within(t, replicated, fmt.Sprintf("node %d applies what was committed", id), func() error {
		st, err := me.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		if len(st.Groups) != len(target) {
			return fmt.Errorf("%d groups, want %d", len(st.Groups), len(target))
		}
		for _, g := range st.Groups {
			if g.Applied < target[g.Name] {
				return fmt.Errorf("%s applied %d, committed elsewhere %d", g.Name, g.Applied, target[g.Name])
			}
		}
		return nil
	})
}

// TestClusterWithoutQuorumRefusesWrites: with two of three nodes stopped,
// a metadata write through the survivor is answered with a retriable
// reason within the client's timeout instead of hanging; once the two
// return, everything committed before is still there on every node and
// writes work again.
func TestClusterWithoutQuorumRefusesWrites(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var kept []string
	for id := 1; id <= 3; id++ {
		topic := fmt.Sprintf("kept-%d", id)
		writableThrough(t, ctx, c, topic, id, []int{1, 2, 3})
		kept = append(kept, topic)
	}
	c.node(2).kill()
	c.node(3).stop()

	const timeout = 10 * time.Second
	survivor := c.dial(ctx, 1, "admin", "admin123", timeout, 1)
	start := time.Now()
	err := survivor.CreateTopic(ctx, "without-quorum")
	took := time.Since(start)
	t.Logf("a write without quorum answered after %s: %v", took, err)
	switch {
	case err == nil:
		t.Fatal("a write without a quorum was acknowledged")
	case !client.IsRetriable(err):
		t.Fatalf("a write without a quorum: %v, want a retriable reason", err)
	case took >= timeout:
		t.Fatalf("the refusal took %s, the client's timeout is %s", took, timeout)
	}
	// What the survivor holds stays readable.
	if _, err := survivor.DescribeTopic(ctx, "kept-1"); err != nil {
		t.Errorf("describe through the survivor: %v", err)
	}

	c.restart(2)
	c.restart(3)
	for id := 1; id <= 3; id++ {
		a := c.admin(ctx, id)
		for _, topic := range kept {
			within(t, replicated, fmt.Sprintf("%s through node %d after the restarts", topic, id), topicSeen(ctx, a, topic))
		}
	}
	writableThrough(t, ctx, c, "after-quorum", 1, []int{1, 2, 3})
}
