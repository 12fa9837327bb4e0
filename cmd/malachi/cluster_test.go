package main

// `malachi dev --nodes 3` runs a real local cluster of child processes;
// the cluster commands are tried against it, and on a single node, which
// has no cluster to show.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// devBase returns a base port under which n dev nodes' ports (four per
// node, ten apart) are free now, for TCP and UDP.
func devBase(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(40000)
		if portsFree(base, n) {
			return base
		}
	}
	t.Fatal("found no free range of ports")
	return 0
}

func portsFree(base, n int) bool {
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range n {
		for k := range 4 {
			addr := "127.0.0.1:" + strconv.Itoa(base+devPortStride*i+k)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return false
			}
			closers = append(closers, func() { ln.Close() })
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				return false
			}
			closers = append(closers, func() { pc.Close() })
		}
	}
	return true
}

// devCluster is a running `malachi dev` and what it printed.
type devCluster struct {
	dev     *child
	clients []string // client address of node 1, 2, ...
	pids    []int
}

func startDev(t *testing.T, c *cli, n int) *devCluster {
	t.Helper()
	base := devBase(t, n)
	dev := c.start("dev", "--nodes", strconv.Itoa(n), "--data-dir", t.TempDir(), "--base-port", strconv.Itoa(base))
	d := &devCluster{dev: dev}
	for _, l := range dev.expect("Ctrl-C stops every node") {
		f := strings.Fields(l)
		if len(f) == 11 && strings.HasPrefix(f[0], "node-") && f[1] == "client" && f[9] == "pid" {
			d.clients = append(d.clients, f[2])
			pid, err := strconv.Atoi(f[10])
			if err != nil {
				t.Fatalf("pid in %q: %v", l, err)
			}
			d.pids = append(d.pids, pid)
		}
	}
	if len(d.clients) != n {
		t.Fatalf("dev printed %d nodes, want %d", len(d.clients), n)
	}
	return d
}

// at returns c pointed at node id of the dev cluster.
func (d *devCluster) at(c *cli, id int) *cli {
	cp := *c.without("MALACHI_SERVER")
	cp.env = append(cp.env, "MALACHI_SERVER="+d.clients[id-1])
	return &cp
}

// eventually runs check every 100 ms until it returns nil, failing the
// test with its last error after waitFor.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitFor)
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func clusterStatusJSON(c *cli) (client.ClusterStatus, error) {
	var st client.ClusterStatus
	r := c.run(strings.NewReader(""), "cluster", "status", "-o", "json")
	if r.code != 0 {
		return st, fmt.Errorf("exit %d: %s", r.code, r.stderr)
	}
	return st, json.Unmarshal([]byte(r.stdout), &st)
}

// TestDevClusterAndClusterCommands: `malachi dev --nodes 3` starts three
// nodes that form one cluster, the cluster commands show and change it
// through any node, and Ctrl-C stops every node.
func TestDevClusterAndClusterCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	d := startDev(t, c, 3)
	n1, n2, n3 := d.at(c, 1), d.at(c, 2), d.at(c, 3)

	eventually(t, "three voters in every group, seen through node 2", func() error {
		st, err := clusterStatusJSON(n2)
		if err != nil {
			return err
		}
		if st.Node != 2 || st.Vnodes != 8 || len(st.Nodes) != 3 || len(st.Groups) != 9 {
			return fmt.Errorf("status %+v", st)
		}
		for _, nd := range st.Nodes {
			if !nd.Registered || nd.Liveness != "alive" || nd.ClientAddr != d.clients[nd.ID-1] {
				return fmt.Errorf("node %+v", nd)
			}
		}
		for _, g := range st.Groups {
			if !slices.Equal(g.Voters, []uint64{1, 2, 3}) || g.Leader == 0 {
				return fmt.Errorf("group %+v", g)
			}
		}
		return nil
	})
	text := n1.ok("cluster", "status")
	for _, want := range []string{"Nodes", "LIVENESS", "Groups", "root", "vnode-7", d.clients[2]} {
		if !strings.Contains(text, want) {
			t.Errorf("cluster status lacks %q:\n%s", want, text)
		}
	}
	var groups []client.ClusterGroup
	if err := json.Unmarshal([]byte(n3.ok("cluster", "vnodes", "-o", "json")), &groups); err != nil || len(groups) != 9 {
		t.Errorf("cluster vnodes -o json: %d groups, %v", len(groups), err)
	}
	if text := n3.ok("cluster", "vnodes"); !strings.Contains(text, "THIS REPLICA") || !strings.Contains(text, "vnode-0") {
		t.Errorf("cluster vnodes:\n%s", text)
	}
	clusterRebalance(t, n1, n2, n3)

	// The dev users log in on every node, and metadata written through
	// one node is read through another.
	n3.ok("topic", "create", "orders", "--ranges", "2")
	eventually(t, "orders through node 1", func() error {
		if out := n1.run(strings.NewReader(""), "topic", "list").stdout; !strings.Contains(out, "orders") {
			return errors.New("not listed yet")
		}
		return nil
	})
	n2.ok("status", "--user", "producer", "--password", "producer123")

	if stderr := n1.fails(1, "cluster", "remove", "1", "--yes"); !strings.Contains(stderr, "cannot remove itself") {
		t.Errorf("a node removing itself: %q", stderr)
	}
	n2.fails(2, "cluster", "remove", "node-3", "--yes")
	if out := n1.ok("cluster", "remove", "3", "--yes"); !strings.Contains(out, "removed node 3") {
		t.Errorf("cluster remove: %q", out)
	}
	eventually(t, "node 3 gone from the registry and every group", func() error {
		st, err := clusterStatusJSON(n1)
		if err != nil {
			return err
		}
		for _, nd := range st.Nodes {
			if nd.ID == 3 && nd.Registered {
				return fmt.Errorf("node 3 still registered: %+v", nd)
			}
		}
		for _, g := range st.Groups {
			if slices.Contains(g.Voters, 3) || slices.Contains(g.Learners, 3) {
				return fmt.Errorf("group %+v still has node 3", g)
			}
		}
		return nil
	})

	code, _ := d.dev.interrupt()
	if code != 0 {
		t.Errorf("dev exit %d after SIGINT; stderr %s", code, d.dev.stderr.String())
	}
	for i, pid := range d.pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node %d (pid %d) outlived dev: %v", i+1, pid, err)
		}
	}
}

// clusterRebalance: the peer counters show traffic with both other
// nodes; the plan shown through one node is applied through another, and
// leadership ends up spread over the three nodes, three groups each (every
// node votes in every group).
func clusterRebalance(t *testing.T, n1, n2, n3 *cli) {
	t.Helper()
	st, err := clusterStatusJSON(n1)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Peers) != 2 {
		t.Errorf("peers %+v, want nodes 2 and 3", st.Peers)
	}
	for _, p := range st.Peers {
		if p.FramesSent == 0 || p.FramesReceived == 0 || p.BytesSent == 0 || p.Writes == 0 {
			t.Errorf("peer %+v: no traffic counted", p)
		}
	}
	if text := n1.ok("cluster", "status"); !strings.Contains(text, "FRAMES SENT") {
		t.Errorf("cluster status lacks the peer traffic:\n%s", text)
	}
	n1.fails(2, "cluster", "rebalance", "--plan", "--apply")
	if text := n2.ok("cluster", "rebalance", "--plan"); !strings.Contains(text, "LEADS") || !strings.Contains(text, "vnode-7") {
		t.Errorf("cluster rebalance --plan:\n%s", text)
	}
	var plan client.RebalancePlan
	if err := json.Unmarshal([]byte(n3.ok("cluster", "rebalance", "--apply", "-o", "json")), &plan); err != nil || !plan.Applied || len(plan.Groups) != 9 {
		t.Fatalf("cluster rebalance --apply -o json: %+v, %v", plan, err)
	}
	for _, n := range plan.Nodes {
		if !n.Live || n.LeadsAfter != 3 || n.VoterAfter != 9 {
			t.Errorf("planned node %+v, want live, 9 groups, leading 3", n)
		}
	}
	eventually(t, "each node leading three groups", func() error {
		st, err := clusterStatusJSON(n2)
		if err != nil {
			return err
		}
		leads := map[uint64]int{}
		for _, g := range st.Groups {
			leads[g.Leader]++
		}
		if leads[1] != 3 || leads[2] != 3 || leads[3] != 3 {
			return fmt.Errorf("leaders %v", leads)
		}
		return nil
	})
	if text := n1.ok("cluster", "rebalance"); !strings.Contains(text, "nothing to move") {
		t.Errorf("cluster rebalance after it was carried out:\n%s", text)
	}
}

// TestClusterCommandsOnASingleNode: a node without --node-id has no
// cluster; the commands say so instead of printing an empty one.
func TestClusterCommandsOnASingleNode(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	for _, args := range [][]string{
		{"cluster", "status"}, {"cluster", "vnodes", "-o", "json"}, {"cluster", "remove", "2", "--yes"},
		{"cluster", "rebalance"}, {"cluster", "rebalance", "--apply"},
	} {
		if stderr := c.fails(1, args...); !strings.Contains(stderr, "runs alone") || !strings.Contains(stderr, "--node-id") {
			t.Errorf("%v: %q", args, stderr)
		}
	}
	if stderr := c.fails(1, "cluster", "status", "--user", "producer", "--password", "producer123"); !strings.Contains(stderr, "only an administrator") {
		t.Errorf("cluster status as producer: %q", stderr)
	}
}

// TestDevRefusesBadLayouts: the node count and the port range are checked
// before anything starts.
func TestDevRefusesBadLayouts(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := t.TempDir()
	for _, args := range [][]string{
		{"dev", "--nodes", "0", "--data-dir", dir},
		{"dev", "--nodes", "10", "--data-dir", dir},
		{"dev", "--base-port", "65530", "--data-dir", dir},
		{"dev", "--host", "0.0.0.0", "--data-dir", dir},
	} {
		c.fails(2, args...)
	}
}

// TestReadmeClusterCommandsParse: every command of the README's cluster
// section names a command that runs, with flags and arguments that parse
// (the e2e tests start their clusters with the same serve flags).
func TestReadmeClusterCommandsParse(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## A cluster on one machine")
	if !ok {
		t.Fatal("README has no cluster section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	comment := regexp.MustCompile(`\s+#.*$`)
	n := 0
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, l := range lines(block[1]) {
			l = strings.TrimSpace(comment.ReplaceAllString(l, ""))
			args := shellWords(l)
			if len(args) < 2 || args[0] != "./malachi" {
				t.Errorf("not a malachi command: %q", l)
				continue
			}
			if err := resolves(args[1:]); err != nil {
				t.Errorf("%q: %v", l, err)
			}
			n++
		}
	}
	if n < 5 {
		t.Errorf("the cluster section shows %d commands", n)
	}
}

// TestDevStopsTheOthersWhenANodeCannotStart: node 2's client port is
// taken, so node 2 cannot start; dev says why and stops node 1 before it
// exits, leaving nothing listening.
func TestDevStopsTheOthersWhenANodeCannotStart(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	base := devBase(t, 2)
	taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+devPortStride))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	stderr := c.fails(1, "dev", "--nodes", "2", "--data-dir", t.TempDir(), "--base-port", strconv.Itoa(base))
	if !strings.Contains(stderr, "node 2 stopped while starting") || !strings.Contains(stderr, "address already in use") {
		t.Errorf("stderr %q", stderr)
	}
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(base))
	if err == nil {
		conn.Close()
		t.Error("node 1 still listens after dev exited")
	}
}

// TestServeWithATakenPortOpensNothing: a node whose HTTP port another
// process holds stops before it opens its data directory, let alone joins
// a cluster: its ports are bound first. (Bound after, a node joined, then
// left and exited, and the e2e harness, which starts a node again on new
// ports only when it failed before joining, gave up.)
func TestServeWithATakenPortOpensNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := filepath.Join(t.TempDir(), "data")
	stderr := c.fails(1, "serve", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http", taken.Addr().String())
	if !strings.Contains(stderr, "address already in use") {
		t.Errorf("stderr %q", stderr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data directory was opened: %v", err)
	}
}
