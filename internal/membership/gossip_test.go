package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"
)

// waitTimeout bounds every wait on gossip. It is generous because the
// tests share two cores with other work; the protocol timeouts below are
// what the waits actually exercise.
const waitTimeout = 20 * time.Second

// testConfig is a node on loopback with tight LAN-like timeouts: probes
// every 100ms, a suspect is declared dead after 2 × 100ms.
func testConfig(t *testing.T, id uint64, bind string) Config {
	return Config{
		Node: NodeInfo{
			ID:         id,
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", 14040+id),
			PeerAddr:   fmt.Sprintf("127.0.0.1:%d", 14240+id),
			HTTPAddr:   fmt.Sprintf("127.0.0.1:%d", 14440+id),
			Attributes: map[string]string{"rack": fmt.Sprintf("r%d", id), "zone": "z1"},
			Version:    "test",
		},
		BindAddr:         bind,
		ClusterName:      "membership-test",
		ProbeInterval:    100 * time.Millisecond,
		ProbeTimeout:     50 * time.Millisecond,
		SuspicionMult:    2,
		GossipInterval:   20 * time.Millisecond,
		PushPullInterval: 500 * time.Millisecond,
		StreamTimeout:    2 * time.Second,
		DeadRetention:    5 * time.Second,
		BroadcastTimeout: 5 * time.Second,
		Logger:           slog.New(slog.NewTextHandler(testWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
}

// testWriter forwards to t.Output until the test ends, then drops:
// memberlist's goroutines may still log for a moment after Shutdown.
func testWriter(t *testing.T) io.Writer {
	w := &lateWriter{out: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

type lateWriter struct {
	mu   sync.Mutex
	out  io.Writer
	done bool
}

func (w *lateWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.out.Write(p)
}

func startGossip(t *testing.T, cfg Config) *Gossip {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// waitUntil polls cond until it holds or waitTimeout passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitEvent reads m's events until one of kind about member id arrives.
// An EventResync means events were coalesced; the test then checks the
// snapshot instead.
func waitEvent(t *testing.T, m Membership, kind EventKind, id uint64, state State) Member {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-m.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %v about %d", kind, id)
			}
			if ev.Kind == EventResync {
				if mem, ok := member(m, id); ok && mem.State == state {
					return mem
				}
			}
			if ev.Kind == kind && ev.Member.ID == id {
				if ev.Member.State != state {
					t.Fatalf("%v about %d with state %v, want %v", kind, id, ev.Member.State, state)
				}
				return ev.Member
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %v about %d", kind, id)
		}
	}
}

func member(m Membership, id uint64) (Member, bool) {
	for _, mem := range m.Members() {
		if mem.ID == id {
			return mem, true
		}
	}
	return Member{}, false
}

func aliveCount(m Membership) int {
	n := 0
	for _, mem := range m.Members() {
		if mem.State == StateAlive {
			n++
		}
	}
	return n
}

// TestGossipCluster runs three nodes on loopback through one life: they
// join through one seed and see each other's metadata; an attribute
// change propagates; a graceful leave is seen as a leave; the node
// restarts with its id and is seen joining; it stops without a leave and
// is declared dead within the configured timeouts; it restarts once more
// and is seen joining again, then once more at another gossip address. The steps share the cluster, so each starts
// from the state the previous one left.
//
// Each node's events are read in order, so a wait only sees events that
// follow the ones the previous steps consumed.
func TestGossipCluster(t *testing.T) {
	ctx := context.Background()
	cluster := t // restarted nodes live until the whole test ends
	a := startGossip(t, testConfig(t, 1, "127.0.0.1:0"))
	b := startGossip(t, testConfig(t, 2, "127.0.0.1:0"))
	cCfg := testConfig(t, 3, "127.0.0.1:0")
	c := startGossip(t, cCfg)
	cCfg.BindAddr = c.Addr() // restarts reuse the gossip address
	for _, g := range []*Gossip{b, c} {
		if n, err := g.Join(ctx, []string{a.Addr()}); err != nil || n != 1 {
			t.Fatalf("join: %d, %v", n, err)
		}
	}

	t.Run("join", func(t *testing.T) {
		for _, g := range []*Gossip{a, b, c} {
			waitUntil(t, fmt.Sprintf("node %d to see 3 alive", g.cfg.Node.ID), func() bool { return aliveCount(g) == 3 })
			for _, want := range []*Gossip{a, b, c} {
				got, _ := member(g, want.cfg.Node.ID)
				if !equalInfo(got.NodeInfo, want.cfg.Node) || got.GossipAddr != want.Addr() {
					t.Fatalf("node %d sees %+v, want %+v at %s", g.cfg.Node.ID, got, want.cfg.Node, want.Addr())
				}
			}
		}
		waitEvent(t, a, EventJoin, 3, StateAlive)
	})

	t.Run("attributes", func(t *testing.T) {
		attrs := map[string]string{"rack": "r9", "zone": "z2"}
		if err := b.SetAttributes(ctx, attrs); err != nil {
			t.Fatal(err)
		}
		for _, g := range []*Gossip{a, c} {
			got := waitEvent(t, g, EventUpdate, 2, StateAlive)
			if !maps.Equal(got.Attributes, attrs) {
				t.Fatalf("node %d: update carries %v, want %v", g.cfg.Node.ID, got.Attributes, attrs)
			}
			if m, _ := member(g, 2); !maps.Equal(m.Attributes, attrs) {
				t.Fatalf("node %d: snapshot has %v, want %v", g.cfg.Node.ID, m.Attributes, attrs)
			}
		}
	})

	t.Run("leave", func(t *testing.T) {
		if err := c.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close()
		for _, g := range []*Gossip{a, b} {
			waitEvent(t, g, EventLeave, 3, StateLeft)
		}
	})

	t.Run("rejoin after leave", func(t *testing.T) {
		c = startGossip(cluster, cCfg)
		if _, err := c.Join(ctx, []string{b.Addr()}); err != nil {
			t.Fatal(err)
		}
		for _, g := range []*Gossip{a, b} {
			waitEvent(t, g, EventJoin, 3, StateAlive)
		}
	})

	t.Run("dead", func(t *testing.T) {
		c.Close()
		for _, g := range []*Gossip{a, b} {
			waitEvent(t, g, EventDead, 3, StateDead)
			if m, _ := member(g, 3); m.State != StateDead {
				t.Fatalf("node %d: snapshot says %v", g.cfg.Node.ID, m.State)
			}
		}
	})

	t.Run("rejoin after restart", func(t *testing.T) {
		c = startGossip(cluster, cCfg)
		if _, err := c.Join(ctx, []string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
		for _, g := range []*Gossip{a, b} {
			waitEvent(t, g, EventJoin, 3, StateAlive)
		}
		waitUntil(t, "the restarted node to see 3 alive", func() bool { return aliveCount(c) == 3 })
	})

	t.Run("rejoin at a new address", func(t *testing.T) {
		old := c.Addr()
		c.Close()
		waitEvent(t, a, EventDead, 3, StateDead)
		moved := cCfg
		moved.BindAddr = "127.0.0.1:0"
		c = startGossip(cluster, moved)
		if c.Addr() == old {
			t.Skip("the kernel gave back the same port")
		}
		if _, err := c.Join(ctx, []string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
		if got := waitEvent(t, a, EventJoin, 3, StateAlive); got.GossipAddr != c.Addr() {
			t.Fatalf("node 3 rejoined at %s, want %s", got.GossipAddr, c.Addr())
		}
	})
}

func equalInfo(a, b NodeInfo) bool {
	return a.ID == b.ID && a.ClientAddr == b.ClientAddr && a.PeerAddr == b.PeerAddr &&
		a.HTTPAddr == b.HTTPAddr && a.Version == b.Version && maps.Equal(a.Attributes, b.Attributes)
}

// TestGossipDuplicateID: a second node with a live node's id is refused
// when it joins, the seed reports the conflict, and the first node stays
// in the cluster.
func TestGossipDuplicateID(t *testing.T) {
	ctx := context.Background()
	a := startGossip(t, testConfig(t, 1, "127.0.0.1:0"))
	b := startGossip(t, testConfig(t, 2, "127.0.0.1:0"))
	if _, err := b.Join(ctx, []string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "two alive", func() bool { return aliveCount(a) == 2 })

	twin := startGossip(t, testConfig(t, 2, "127.0.0.1:0"))
	_, err := twin.Join(ctx, []string{a.Addr()})
	if !errors.Is(err, ErrDuplicateNodeID) {
		t.Fatalf("Join with a taken id = %v, want ErrDuplicateNodeID", err)
	}
	if _, err := twin.Join(ctx, []string{a.Addr()}); !errors.Is(err, ErrClosed) {
		t.Fatalf("the refused node still gossips: %v", err)
	}
	got := waitEvent(t, a, EventConflict, 2, StateAlive)
	if got.GossipAddr == b.Addr() {
		t.Fatalf("conflict names the incumbent %s, want the claimant", got.GossipAddr)
	}
	if m, _ := member(a, 2); m.State != StateAlive || m.GossipAddr != b.Addr() {
		t.Fatalf("the seed now sees %+v, want node 2 alive at %s", m, b.Addr())
	}
}

// TestGossipSecretKey: nodes that share a key form a cluster; a node with
// another key cannot join it.
func TestGossipSecretKey(t *testing.T) {
	ctx := context.Background()
	key := []byte("0123456789abcdef")
	cfgA, cfgB, cfgC := testConfig(t, 1, "127.0.0.1:0"), testConfig(t, 2, "127.0.0.1:0"), testConfig(t, 3, "127.0.0.1:0")
	cfgA.SecretKey, cfgB.SecretKey, cfgC.SecretKey = key, key, []byte("fedcba9876543210")
	cfgC.StreamTimeout = 500 * time.Millisecond
	a, b, c := startGossip(t, cfgA), startGossip(t, cfgB), startGossip(t, cfgC)
	if _, err := b.Join(ctx, []string{a.Addr()}); err != nil {
		t.Fatalf("same key: %v", err)
	}
	waitUntil(t, "two alive", func() bool { return aliveCount(a) == 2 })
	if n, err := c.Join(ctx, []string{a.Addr()}); err == nil {
		t.Fatalf("another key joined %d nodes", n)
	}
}

// TestGossipRefusesOversizedAttributes: attributes that are each valid
// but do not fit memberlist's metadata limit are refused before anything
// is announced.
func TestGossipRefusesOversizedAttributes(t *testing.T) {
	cfg := testConfig(t, 1, "127.0.0.1:0")
	g := startGossip(t, cfg)
	big := make(map[string]string)
	for i := range MaxAttributes {
		big[fmt.Sprintf("key%02d", i)] = fmt.Sprintf("%064d", i)
	}
	if err := g.SetAttributes(context.Background(), big); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("SetAttributes = %v, want ErrMetaTooLarge", err)
	}
	if m, _ := member(g, 1); !maps.Equal(m.Attributes, cfg.Node.Attributes) {
		t.Fatalf("attributes changed to %v after a refusal", m.Attributes)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]func(*Config){
		"zero node id":               func(c *Config) { c.Node.ID = 0 },
		"bind address without port":  func(c *Config) { c.BindAddr = "127.0.0.1" },
		"bind address not an IP":     func(c *Config) { c.BindAddr = "localhost:7946" },
		"advertise port 0":           func(c *Config) { c.AdvertiseAddr = "10.0.0.1:0" },
		"secret key of 5 bytes":      func(c *Config) { c.SecretKey = []byte("short") },
		"probe timeout above period": func(c *Config) { c.ProbeTimeout = time.Second },
		"negative suspicion":         func(c *Config) { c.SuspicionMult = -1 },
		"member bound too large":     func(c *Config) { c.MaxMembers = MaxMaxMembers + 1 },
		"event buffer too large":     func(c *Config) { c.EventBuffer = MaxEventBuf + 1 },
		"bad attribute":              func(c *Config) { c.Node.Attributes = map[string]string{"Rack": "a"} },
	}
	for name, edit := range cases {
		cfg := testConfig(t, 1, "127.0.0.1:0")
		edit(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := New(testConfig(t, 1, "127.0.0.1:0")); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

// TestGossipSlowConsumer: a node whose consumer reads nothing, with room
// for one event, gets an EventResync instead of losing joins silently,
// and its snapshot has every member.
func TestGossipSlowConsumer(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, 1, "127.0.0.1:0")
	cfg.EventBuffer = 1
	a := startGossip(t, cfg)
	for id := uint64(2); id <= 4; id++ {
		g := startGossip(t, testConfig(t, id, "127.0.0.1:0"))
		if _, err := g.Join(ctx, []string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "4 alive", func() bool { return aliveCount(a) == 4 })
	waitUntil(t, "coalescing", func() bool { return a.Coalesced() > 0 })
	if got := drain(a.Events()); len(got) != 1 || got[0].Kind != EventResync {
		t.Fatalf("queued events %v, want one EventResync", got)
	}
}

// TestGossipFailedLeaveThenCrash: a Leave that cannot announce the
// leaving mark (its ctx has ended) withdraws it, so the node is still
// alive to its members, later announcements do not carry the mark, and a
// crash afterwards is reported as a death, not a leave.
func TestGossipFailedLeaveThenCrash(t *testing.T) {
	ctx := context.Background()
	a := startGossip(t, testConfig(t, 1, "127.0.0.1:0"))
	b := startGossip(t, testConfig(t, 2, "127.0.0.1:0"))
	if _, err := b.Join(ctx, []string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, EventJoin, 1, StateAlive)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Leave(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Leave with an ended ctx = %v, want context.Canceled", err)
	}
	attrs := map[string]string{"rack": "r7"}
	if err := a.SetAttributes(ctx, attrs); err != nil {
		t.Fatal(err)
	}
	if got := waitEvent(t, b, EventUpdate, 1, StateAlive); !maps.Equal(got.Attributes, attrs) {
		t.Fatalf("update carries %v, want %v", got.Attributes, attrs)
	}
	a.Close()
	waitEvent(t, b, EventDead, 1, StateDead)
}
