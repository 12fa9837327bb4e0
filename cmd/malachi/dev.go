package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/pkg/client"
)

// devFlags are the flags of `malachi dev`.
type devFlags struct {
	nodes    int
	dataDir  string
	basePort int
	host     string
	vnodes   int
	factor   int
	logLevel string
}

// Bounds of `malachi dev`: a local cluster for trying things, not a
// deployment.
const (
	maxDevNodes = 9
	// devPortStride separates the ports of successive nodes: node i uses
	// base+stride*(i-1) and the three after it.
	devPortStride = 10
	// devReadyTimeout bounds how long one node may take to print "ready".
	devReadyTimeout = 2 * time.Minute
	// devStopGrace is how long the nodes get to stop after SIGTERM before
	// they are killed.
	devStopGrace = 30 * time.Second
	// devEarlyLines is how many of a node's start-up lines are kept to
	// explain a failed start.
	devEarlyLines = 50
)

func newDevCmd() *cobra.Command {
	f := &devFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster of nodes for development, in one command",
		Long: `Run a local cluster of --nodes nodes (default 3), each a 'malachi serve --dev'
child process of this executable, with its data under --data-dir/node-N and
its ports counted from --base-port: node N listens on base+10(N-1) (client),
the next port (HTTP), the one after (peer) and the one after that (gossip).
Node 1 bootstraps the cluster and the others join it. The development users
(admin/admin123, producer/producer123, consumer/consumer123, app/app123) log
in on every node.

It prints each node's addresses and how to point the command line at them,
then forwards the nodes' log lines (at --log-level) prefixed with their
names. Ctrl-C (or SIGTERM) stops every node and waits for them. Starting it
again on the same --data-dir brings the same cluster back.`,
		Example: `  malachi dev
  malachi dev --nodes 3 --data-dir ./malachi-dev --base-port 4040
  malachi --server 127.0.0.1:4050 cluster status`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.nodes, "nodes", 3, "nodes to start (1 to 9)")
	fl.StringVar(&f.dataDir, "data-dir", "./malachi-dev", "folder holding every node's data directory (node-1, node-2, ...)")
	fl.IntVar(&f.basePort, "base-port", 4040, "node 1's client port; node N's ports start 10(N-1) above it")
	fl.StringVar(&f.host, "host", "127.0.0.1", "address every node listens on and advertises")
	fl.IntVar(&f.vnodes, "vnodes", 8, "metadata shards of a new cluster")
	fl.IntVar(&f.factor, "replication-factor", 3, "metadata voters per vnode")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level of the nodes: debug, info, warn or error")
	return cmd
}

// devNode is one child `malachi serve` and the addresses it was given.
type devNode struct {
	id                        int
	client, http, peer, gossp string
	dataDir                   string

	cmd   *exec.Cmd
	ready chan struct{} // closed when the node printed "ready"
	done  chan struct{} // closed once the process has been waited for
	err   error         // the exit, once done is closed
	// early holds the last lines before "ready", shown if the node fails
	// to start; guarded by mu, as the reader goroutine appends to it.
	mu    sync.Mutex
	early []string
}

func (f *devFlags) check() error {
	switch {
	case f.nodes < 1 || f.nodes > maxDevNodes:
		return usageErr("--nodes %d: want 1 to %d", f.nodes, maxDevNodes)
	case f.basePort < 1 || f.basePort+devPortStride*(f.nodes-1)+3 > 65535:
		return usageErr("--base-port %d: the ports of %d nodes must fit under 65536", f.basePort, f.nodes)
	case f.dataDir == "":
		return usageErr("--data-dir is required")
	case net.ParseIP(f.host) == nil && f.host != "localhost":
		return usageErr("--host %q: want an IP address such as 127.0.0.1", f.host)
	case unspecifiedHost(f.host):
		return usageErr("--host %q: the nodes advertise it, so it must be an address they can be reached at", f.host)
	}
	return nil
}

// layout places the nodes: their addresses and data directories.
func (f *devFlags) layout() []*devNode {
	nodes := make([]*devNode, f.nodes)
	for i := range nodes {
		base := f.basePort + devPortStride*i
		addr := func(off int) string { return net.JoinHostPort(f.host, strconv.Itoa(base+off)) }
		nodes[i] = &devNode{
			id: i + 1, client: addr(0), http: addr(1), peer: addr(2), gossp: addr(3),
			dataDir: filepath.Join(f.dataDir, "node-"+strconv.Itoa(i+1)),
			ready:   make(chan struct{}), done: make(chan struct{}),
		}
	}
	return nodes
}

// args are the serve flags of n. Node 1 bootstraps a new cluster; every
// other node joins node 1's gossip address. A node 1 that already has
// data joins the others instead, so that it finds them again after a
// restart.
func (f *devFlags) args(n *devNode, all []*devNode) []string {
	args := []string{"serve", "--dev", "--node-id", strconv.Itoa(n.id),
		"--data-dir", n.dataDir, "--listen", n.client, "--http", n.http,
		"--peer-listen", n.peer, "--gossip-listen", n.gossp, "--advertise", f.host,
		"--vnodes", strconv.Itoa(f.vnodes), "--replication-factor", strconv.Itoa(f.factor),
		"--log-level", f.logLevel}
	var join []string
	switch {
	case n.id != 1:
		join = []string{all[0].gossp}
	case hasData(n.dataDir):
		for _, o := range all[1:] {
			join = append(join, o.gossp)
		}
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	return args
}

func hasData(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

func runDev(cmd *cobra.Command, f *devFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable to start the nodes: %w", err)
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(benchContext(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nodes := f.layout()
	logs := &lockedWriter{w: cmd.ErrOrStderr()}
	defer stopNodes(nodes, logs)
	for _, n := range nodes {
		if err := n.start(exe, f.args(n, nodes), logs); err != nil {
			return err
		}
		if err := n.waitReady(ctx); err != nil {
			return err
		}
	}
	waitFormed(ctx, f, nodes, logs)
	printDevSummary(cmd.OutOrStdout(), f, nodes)
	waitNodes(ctx, nodes, logs)
	return nil
}

// start runs the node's process. One goroutine, owned by the node, reads
// its stderr until the process closes it and then waits for the process.
func (n *devNode) start(exe string, args []string, logs io.Writer) error {
	n.cmd = exec.Command(exe, args...)
	n.cmd.Env = devEnv()
	setParentDeathSignal(n.cmd)
	stderr, err := n.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("starting node %d: %w", n.id, err)
	}
	go n.read(stderr, logs)
	return nil
}

// devEnv is this process's environment without the MALACHI_ variables
// that would override the flags dev passes (a node id, a data directory).
func devEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MALACHI_") || strings.HasPrefix(kv, "MALACHI_ADMIN_PASS=") {
			env = append(env, kv)
		}
	}
	return env
}

func (n *devNode) read(stderr io.Reader, logs io.Writer) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ready := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case ready:
			fmt.Fprintf(logs, "node-%d | %s\n", n.id, line)
		case line == "ready":
			ready = true
			close(n.ready)
		default:
			n.mu.Lock()
			n.early = append(n.early, line)
			if len(n.early) > devEarlyLines {
				n.early = n.early[len(n.early)-devEarlyLines:]
			}
			n.mu.Unlock()
		}
	}
	// Read to the end whatever happens, so the node never blocks on a
	// full pipe; then the process can be waited for.
	_, _ = io.Copy(io.Discard, stderr)
	n.err = n.cmd.Wait()
	close(n.done)
}

// waitReady waits for the node's "ready" line; a node that exits first
// fails the start with what it printed.
func (n *devNode) waitReady(ctx context.Context) error {
	timer := time.NewTimer(devReadyTimeout)
	defer timer.Stop()
	select {
	case <-n.ready:
		return nil
	case <-n.done:
		n.mu.Lock()
		defer n.mu.Unlock()
		return fmt.Errorf("node %d stopped while starting (%v):\n  %s", n.id, n.err, strings.Join(n.early, "\n  "))
	case <-timer.C:
		return fmt.Errorf("node %d did not become ready within %s", n.id, devReadyTimeout)
	case <-ctx.Done():
		return errInterrupted
	}
}

// waitNodes returns when ctx ends (Ctrl-C) or every node has exited. A
// node that exits on its own is reported; the others keep running, so a
// failure can be tried out by killing one.
func waitNodes(ctx context.Context, nodes []*devNode, logs io.Writer) {
	running := len(nodes)
	exited := make(chan *devNode, len(nodes))
	for _, n := range nodes {
		go func() {
			select {
			case <-n.done:
				exited <- n
			case <-ctx.Done():
			}
		}()
	}
	for running > 0 {
		select {
		case <-ctx.Done():
			return
		case n := <-exited:
			running--
			fmt.Fprintf(logs, "node-%d exited (%v); %d still running\n", n.id, exitText(n.err), running)
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// stopNodes sends SIGTERM to every node still running and waits for them
// all, killing those that have not stopped within devStopGrace.
func stopNodes(nodes []*devNode, logs io.Writer) {
	var started []*devNode
	running := 0
	for _, n := range nodes {
		if n.cmd == nil || n.cmd.Process == nil {
			continue
		}
		started = append(started, n)
		select {
		case <-n.done:
		default:
			running++
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	if running == 0 {
		return
	}
	fmt.Fprintf(logs, "stopping %d nodes\n", running)
	deadline := time.NewTimer(devStopGrace)
	defer deadline.Stop()
	for _, n := range started {
		select {
		case <-n.done:
		case <-deadline.C:
			for _, m := range started {
				_ = m.cmd.Process.Kill()
			}
			<-n.done
		}
	}
}

func printDevSummary(w io.Writer, f *devFlags, nodes []*devNode) {
	fmt.Fprintf(w, "malachi dev: %d nodes, data in %s\n", len(nodes), f.dataDir)
	for _, n := range nodes {
		fmt.Fprintf(w, "  node-%d  client %s  http http://%s/health  peer %s  gossip %s  pid %d\n",
			n.id, n.client, n.http, n.peer, n.gossp, n.cmd.Process.Pid)
	}
	fmt.Fprintln(w, "users admin/admin123 producer/producer123 consumer/consumer123 app/app123 on every node")
	fmt.Fprintln(w, "point the command line at any node:")
	fmt.Fprintf(w, "  export MALACHI_SERVER=%s\n", nodes[0].client)
	fmt.Fprintln(w, "  malachi cluster status")
	fmt.Fprintf(w, "  malachi --server %s topic list\n", nodes[len(nodes)-1].client)
	fmt.Fprintln(w, "Ctrl-C stops every node")
}

// lockedWriter serialises the nodes' forwarded log lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// devFormTimeout bounds how long dev waits for the metadata groups to
// take every node as a voter before it prints the addresses anyway.
const devFormTimeout = time.Minute

// waitFormed waits until node 1 reports every node registered and every
// metadata group with as many voters as the nodes allow (the factor) and
// no learner left to promote, so that the cluster dev reports survives
// the loss of a node. It gives up quietly after devFormTimeout: the
// addresses are worth printing either way.
func waitFormed(ctx context.Context, f *devFlags, nodes []*devNode, logs io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, devFormTimeout)
	defer cancel()
	c, err := client.Dial(ctx, nodes[0].client, client.WithCredentials(defaultUser, defaultPassword))
	if err != nil {
		fmt.Fprintf(logs, "could not ask node 1 whether the cluster has formed: %v\n", err)
		return
	}
	defer c.Close()
	want := min(len(nodes), f.factor)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.ClusterStatus(ctx)
		if err == nil && formed(&st, len(nodes), want) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			fmt.Fprintln(logs, "the cluster is still forming: see 'malachi cluster status'")
			return
		}
	}
}

func formed(st *client.ClusterStatus, nodes, voters int) bool {
	registered := 0
	for _, n := range st.Nodes {
		if n.Registered {
			registered++
		}
	}
	if registered != nodes || len(st.Groups) == 0 {
		return false
	}
	for _, g := range st.Groups {
		if g.Leader == 0 || len(g.Voters) < voters || len(g.Learners) > 0 {
			return false
		}
	}
	return true
}
