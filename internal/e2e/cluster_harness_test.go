package e2e

// The cluster harness runs real `malachi serve --node-id N` processes on
// loopback, started the way the README starts a cluster: node 1 with no
// --join bootstraps, the others join its gossip address. Each node keeps
// its ports for its life, so a killed node comes back where the others
// expect it, on the same data directory.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/testenv"
	"github.com/malachi-log/malachi/pkg/client"
)

// clusterNode is one node of a testCluster: fixed addresses and data
// directory, and the process currently running it, if any.
type clusterNode struct {
	id                          int
	dir                         string
	client, http, peer, gossipA string

	mu    sync.Mutex
	cmd   *exec.Cmd
	ready chan struct{} // closed when cmd printed "ready"
	done  chan struct{} // closed once cmd has exited and been waited for
	log   []string      // the last lines the node printed, for failures
}

// testCluster is a set of real nodes started by one test.
type testCluster struct {
	t     *testing.T
	bin   string
	nodes []*clusterNode
	extra func(id int) []string // serve flags of node id
}

// clusterLogLines is how many of each node's last log lines a failing
// test prints.
const clusterLogLines = 40

// startCluster starts n nodes, node 1 first (it bootstraps), then the
// others together, and returns once every node printed "ready" and the
// metadata groups have every node as a voter. Every node gets extra.
func startCluster(t *testing.T, n int, extra ...string) *testCluster {
	t.Helper()
	return startClusterEach(t, n, func(int) []string { return extra })
}

// startClusterEach is startCluster with serve flags of each node's own.
func startClusterEach(t *testing.T, n int, extra func(id int) []string) *testCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a cluster of real processes")
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, bin: bin, extra: extra}
	for i := range n {
		nd := &clusterNode{id: i + 1}
		c.placeFresh(nd)
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.signal(syscall.SIGKILL)
		}
		if t.Failed() {
			for _, nd := range c.nodes {
				nd.mu.Lock()
				t.Logf("node %d, last lines:\n  %s", nd.id, strings.Join(nd.log, "\n  "))
				nd.mu.Unlock()
			}
		}
	})
	c.launch(c.nodes[0], nil)
	c.waitFirstStart(c.nodes[0], nil)
	join := []string{c.nodes[0].gossipA}
	for _, nd := range c.nodes[1:] {
		c.launch(nd, join)
	}
	for _, nd := range c.nodes[1:] {
		c.waitFirstStart(nd, join)
	}
	c.waitFormed()
	return c
}

// placeFresh gives nd new ports and an empty data directory.
func (c *testCluster) placeFresh(nd *clusterNode) {
	ports := testenv.FreePorts(c.t, 4)
	addr := func(k int) string { return "127.0.0.1:" + strconv.Itoa(ports[k]) }
	nd.dir = c.t.TempDir()
	nd.client, nd.http, nd.peer, nd.gossipA = addr(0), addr(1), addr(2), addr(3)
}

// firstStartTries bounds how often a node's first start is tried again on
// new ports after one of its ports was taken.
const firstStartTries = 3

// waitFirstStart waits until a node launched for the first time is ready.
// A port checked free can still be taken by another process before the
// node binds it; a node that exits for that reason, before it joined
// anything, is started again on new ports and an empty directory. Any
// other exit fails the test.
func (c *testCluster) waitFirstStart(nd *clusterNode, join []string) {
	c.t.Helper()
	for try := 1; ; try++ {
		if c.awaitReady(nd) {
			return
		}
		if !c.portTakenBeforeJoin(nd) || try == firstStartTries {
			c.t.Fatalf("node %d exited before it was ready", nd.id)
		}
		c.t.Logf("node %d: a port was taken before it could bind; starting it on new ports", nd.id)
		c.placeFresh(nd)
		c.launch(nd, join)
	}
}

// waitFormed waits until, as node 1 sees it, every node is registered and
// every metadata group has all of them as voters (three nodes, the
// default factor): a cluster whose groups still have one voter would not
// survive the loss of that node.
func (c *testCluster) waitFormed() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := c.admin(ctx, 1)
	want := make([]uint64, len(c.nodes))
	for i := range want {
		want[i] = uint64(i + 1)
	}
	within(c.t, time.Minute, "the cluster forms", func() error {
		st, err := a.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		if len(st.Groups) == 0 {
			return errors.New("no groups yet")
		}
		for _, g := range st.Groups {
			if !slices.Equal(g.Voters, want) || g.Leader == 0 {
				return fmt.Errorf("%s has voters %v, leader %d", g.Name, g.Voters, g.Leader)
			}
		}
		return nil
	})
}

// node returns node id (1-based).
func (c *testCluster) node(id int) *clusterNode { return c.nodes[id-1] }

// restart starts a stopped node again on its data directory, joining the
// gossip of every other node, and waits until it is ready.
func (c *testCluster) restart(id int) {
	c.t.Helper()
	nd := c.node(id)
	var join []string
	for _, o := range c.nodes {
		if o != nd {
			join = append(join, o.gossipA)
		}
	}
	c.launch(nd, join)
	c.waitReady(nd)
}

func (c *testCluster) launch(nd *clusterNode, join []string) {
	c.t.Helper()
	args := []string{"serve", "--dev", "--node-id", strconv.Itoa(nd.id), "--data-dir", nd.dir,
		"--listen", nd.client, "--http", nd.http,
		"--peer-listen", ":" + port(nd.peer), "--gossip-listen", ":" + port(nd.gossipA)}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	args = append(args, c.extra(nd.id)...)
	cmd := exec.Command(c.bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	ready, done := make(chan struct{}), make(chan struct{})
	nd.mu.Lock()
	nd.cmd, nd.ready, nd.done = cmd, ready, done
	nd.mu.Unlock()
	go func() { // owned by the process: ends when it closes stderr
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
			}
			nd.mu.Lock()
			nd.log = append(nd.log, line)
			if len(nd.log) > clusterLogLines {
				nd.log = nd.log[len(nd.log)-clusterLogLines:]
			}
			nd.mu.Unlock()
		}
		cmd.Wait()
		close(done)
	}()
}

func (c *testCluster) waitReady(nd *clusterNode) {
	c.t.Helper()
	if !c.awaitReady(nd) {
		c.t.Fatalf("node %d exited before it was ready", nd.id)
	}
}

// portTakenBeforeJoin reports whether nd's log shows it failed to bind a
// port before it joined a cluster: nothing outside the node knows it yet,
// so it can start again as new.
func (c *testCluster) portTakenBeforeJoin(nd *clusterNode) bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	has := func(s string) bool {
		return slices.ContainsFunc(nd.log, func(l string) bool { return strings.Contains(l, s) })
	}
	return has("address already in use") && !has("cluster: joined")
}

// awaitReady reports whether nd became ready (true) or exited first
// (false); it fails the test after a minute of neither.
func (c *testCluster) awaitReady(nd *clusterNode) bool {
	c.t.Helper()
	nd.mu.Lock()
	ready, done := nd.ready, nd.done
	nd.mu.Unlock()
	select {
	case <-ready:
		return true
	case <-done:
		return false
	case <-time.After(time.Minute):
		c.t.Fatalf("node %d not ready within a minute", nd.id)
		return false
	}
}

// signal sends sig to the node's process, if it runs, and waits for it
// to exit.
func (nd *clusterNode) signal(sig syscall.Signal) {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.cmd = nil
	nd.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	<-done
}

// kill stops the node with SIGKILL: no shutdown, nothing flushed.
func (nd *clusterNode) kill() { nd.signal(syscall.SIGKILL) }

// stop stops the node gracefully (SIGTERM).
func (nd *clusterNode) stop() { nd.signal(syscall.SIGTERM) }

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// dial connects to node id as user; the client gives up on a request
// after timeout and, with retries 1, does not retry refusals.
func (c *testCluster) dial(ctx context.Context, id int, user, pass string, timeout time.Duration, retries int) *client.Client {
	c.t.Helper()
	cl, err := client.Dial(ctx, c.node(id).client, client.WithCredentials(user, pass),
		client.WithRequestTimeout(timeout), client.WithRetry(retries, 50*time.Millisecond))
	if err != nil {
		c.t.Fatalf("dial node %d: %v", id, err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// admin is an admin client of node id with the client's usual retries.
func (c *testCluster) admin(ctx context.Context, id int) *client.Client {
	return c.dial(ctx, id, "admin", "admin123", 5*time.Second, 5)
}

// within polls cond every 20 ms until it holds or d has passed, and
// returns how long it took; it fails the test on the deadline, saying
// what it waited for and the last error cond reported.
func within(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
	}
}
