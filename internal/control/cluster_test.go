package control

// The test cluster: nodes with in-memory raft logs on a peer.MemNetwork,
// all on one manual clock. A ticker goroutine moves the clock one raft
// tick at a time while a test runs, so raft timing is counted in ticks
// (elections, timeouts, reconciler rounds) and tests bound what they wait
// for in ticks; frames move between nodes on the network's own goroutines.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/raft"
)

const testTick = 100 * time.Millisecond

var testSecret = []byte("0123456789abcdef-cluster-secret")

type testCluster struct {
	t      *testing.T
	net    *peer.MemNetwork
	clock  *clock.Manual
	ticks  atomic.Int64
	vnodes int
	tune   func(*Config) // applied to every node's Config, when set

	mu      sync.Mutex
	nodes   map[uint64]*Node
	trs     map[uint64]*peer.MemTransport
	stores  map[uint64]*raft.MemLogStore
	applied map[uint64]*appliedLog

	stop chan struct{}
	done chan struct{}
}

// appliedLog records what OnApplied reported on one node.
type appliedLog struct {
	mu   sync.Mutex
	cmds []string // kind/topic
}

func (a *appliedLog) has(kind, topic string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.cmds, kind+"/"+topic)
}

func newTestCluster(t *testing.T, vnodes int) *testCluster {
	c := &testCluster{
		t: t, net: peer.NewMemNetwork(), clock: clock.NewManual(time.Unix(1_700_000_000, 0)), vnodes: vnodes,
		nodes: map[uint64]*Node{}, trs: map[uint64]*peer.MemTransport{}, stores: map[uint64]*raft.MemLogStore{},
		applied: map[uint64]*appliedLog{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.tickLoop()
	t.Cleanup(c.close)
	return c
}

// tickLoop moves the manual clock one raft tick per real millisecond.
func (c *testCluster) tickLoop() {
	defer close(c.done)
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tk.C:
			c.clock.Advance(testTick)
			c.ticks.Add(1)
		}
	}
}

func (c *testCluster) close() {
	close(c.stop)
	<-c.done
	for _, id := range c.ids() {
		c.stopNode(id)
	}
}

func (c *testCluster) ids() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for id := range c.nodes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (c *testCluster) node(id uint64) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// start opens node id over its (kept) log store; bootstrap only for the
// first node of a cluster.
func (c *testCluster) start(id uint64, bootstrap bool) *Node {
	c.t.Helper()
	c.mu.Lock()
	store := c.stores[id]
	if store == nil {
		store = raft.NewMemLogStore()
		c.stores[id] = store
	}
	log := c.applied[id]
	if log == nil {
		log = &appliedLog{}
		c.applied[id] = log
	}
	c.mu.Unlock()
	tr := c.net.Transport(id)
	cfg := Config{
		NodeID: id, Addr: peer.MemAddr(id), Transport: tr, LogStore: store,
		Bootstrap: bootstrap, Vnodes: c.vnodes, ClusterID: "test", ClusterSecret: testSecret,
		Seeds: map[uint64]string{1: peer.MemAddr(1), 2: peer.MemAddr(2), 3: peer.MemAddr(3)},
		Clock: c.clock, TickInterval: testTick, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnApplied: func(_ uint64, cmd metadata.Command, res metadata.Result) {
			if res.Err == nil {
				log.mu.Lock()
				log.cmds = append(log.cmds, cmd.Kind+"/"+cmd.Topic)
				log.mu.Unlock()
			}
		},
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	n, err := Open(context.Background(), cfg)
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

// join starts node id and joins it through the seeds.
func (c *testCluster) join(id uint64) *Node {
	c.t.Helper()
	n := c.start(id, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Join(ctx); err != nil {
		c.t.Fatalf("node %d: join: %v", id, err)
	}
	return n
}

// stopNode stops node id as a crash would: its log store is kept.
func (c *testCluster) stopNode(id uint64) {
	c.mu.Lock()
	n, tr := c.nodes[id], c.trs[id]
	delete(c.nodes, id)
	delete(c.trs, id)
	c.mu.Unlock()
	if n == nil {
		return
	}
	if err := n.Close(); err != nil {
		c.t.Errorf("node %d: close: %v", id, err)
	}
	_ = tr.Close()
}

// threeNodes bootstraps node 1 and joins 2 and 3, then waits until every
// group's voters are what placement picks.
func threeNodes(t *testing.T, vnodes int) *testCluster {
	c := newTestCluster(t, vnodes)
	c.start(1, true)
	c.join(2)
	c.join(3)
	c.waitPlaced(3000)
	return c
}

// waitFor waits, in ticks of the cluster's clock, until cond holds.
func (c *testCluster) waitFor(what string, maxTicks int64, cond func() bool) {
	c.t.Helper()
	start := c.ticks.Load()
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	deadline := time.After(2 * time.Minute) // a stuck clock must not hang the test
	for !cond() {
		if c.ticks.Load()-start > maxTicks {
			c.t.Fatalf("after %d ticks: %s did not happen\n%s", maxTicks, what, c.describe())
		}
		select {
		case <-tk.C:
		case <-deadline:
			c.t.Fatalf("%s did not happen in real time\n%s", what, c.describe())
		}
	}
}

// waitPlaced waits until, on every running node, every group has exactly
// the voters placement picks and every other running member as learner.
func (c *testCluster) waitPlaced(maxTicks int64) {
	c.t.Helper()
	c.waitFor("every group placed on every node", maxTicks, c.placed)
}

func (c *testCluster) placed() bool {
	for _, id := range c.ids() {
		n := c.node(id)
		reg, err := n.Registry()
		if err != nil || !slices.Equal(reg.NodeIDs(), c.memberIDs()) {
			return false
		}
		st := n.Status()
		if len(st.Groups) != c.vnodes+1 {
			return false
		}
		for _, g := range st.Groups {
			all := sortedIDs(append(slices.Clone(g.Voters), g.Learners...))
			if g.Leader == 0 || !slices.Equal(g.Voters, g.Placed) || !slices.Equal(all, reg.NodeIDs()) {
				return false
			}
		}
	}
	return true
}

// memberIDs is the registry of the lowest running node, the reference.
func (c *testCluster) memberIDs() []uint64 {
	ids := c.ids()
	if len(ids) == 0 {
		return nil
	}
	reg, err := c.node(ids[0]).Registry()
	if err != nil {
		return nil
	}
	return reg.NodeIDs()
}

func (c *testCluster) describe() string {
	var s string
	for _, id := range c.ids() {
		st := c.node(id).Status()
		s += fmt.Sprintf("node %d (vnodes %d, %d registered): host %+v\n", id, st.Vnodes, len(st.Nodes), c.node(id).host.Stats())
		c.mu.Lock()
		for peerID, ns := range c.trs[id].Stats().Nodes {
			s += fmt.Sprintf("  to %d: %+v\n", peerID, ns)
		}
		c.mu.Unlock()
		for _, g := range st.Groups {
			s += fmt.Sprintf("  %-8s %-15s leader %d term %d applied %d voters %v learners %v placed %v\n",
				g.Name, g.State, g.Leader, g.Term, g.Applied, g.Voters, g.Learners, g.Placed)
		}
	}
	return s
}

// apply runs cmd through node id with a generous context and fails the
// test on an unknown outcome.
func (c *testCluster) apply(id uint64, cmd metadata.Command) metadata.Result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd.V, cmd.Now = metadata.Version, c.clock.Now().UnixMilli()
	res, err := c.node(id).Apply(ctx, cmd)
	if err != nil {
		c.t.Fatalf("node %d: apply %s %q: %v", id, cmd.Kind, cmd.Topic, err)
	}
	return res
}

func createTopic(name string) metadata.Command {
	return metadata.Command{Kind: metadata.KindCreateTopic, Topic: name, Ranges: 2}
}

// topicOn looks a topic up in node id's local replica.
func (c *testCluster) topicOn(id uint64, name string) (metadata.Topic, bool) {
	var t metadata.Topic
	var ok bool
	if err := c.node(id).ViewTopicName(name, func(st *metadata.State) { t, ok = st.Topic(name) }); err != nil {
		return metadata.Topic{}, false
	}
	return t, ok
}

// leaderOf is the leader of group as the lowest running node sees it.
func (c *testCluster) leaderOf(group uint64) uint64 {
	for _, id := range c.ids() {
		for _, g := range c.node(id).Status().Groups {
			if g.Group == group && g.Leader != 0 {
				return g.Leader
			}
		}
	}
	return 0
}

func isUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
