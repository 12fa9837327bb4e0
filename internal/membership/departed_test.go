package membership

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// A node that joins after a member died, or left, must hear of it from
// the members that saw it go: memberlist alone tells a joining node only
// of live members, and a node it never heard of is one whose copies the
// broker still counts. A member that comes back is alive again for the
// latecomer too.
func TestGossipLatecomerLearnsDepartedMembers(t *testing.T) {
	ctx := context.Background()
	a := startGossip(t, testConfig(t, 1, "127.0.0.1:0"))
	var dead, left *Gossip
	deadCfg := testConfig(t, 2, "127.0.0.1:0")
	dead = startGossip(t, deadCfg)
	deadCfg.BindAddr = dead.Addr()
	left = startGossip(t, testConfig(t, 3, "127.0.0.1:0"))
	for _, g := range []*Gossip{dead, left} {
		if _, err := g.Join(ctx, []string{a.Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "node 1 to see 3 alive", func() bool { return aliveCount(a) == 3 })
	dead.Close()
	if err := left.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	left.Close()
	waitUntil(t, "node 1 to see node 2 dead and node 3 left", func() bool {
		return stateOf(a, 2) == StateDead && stateOf(a, 3) == StateLeft
	})

	late := startGossip(t, testConfig(t, 4, "127.0.0.1:0"))
	if _, err := late.Join(ctx, []string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the latecomer to see node 2 dead and node 3 left", func() bool {
		return stateOf(late, 2) == StateDead && stateOf(late, 3) == StateLeft
	})
	if got, _ := member(late, 2); !equalInfo(got.NodeInfo, deadCfg.Node) || got.GossipAddr != deadCfg.BindAddr {
		t.Fatalf("the latecomer learned node 2 as %+v, want %+v at %s", got, deadCfg.Node, deadCfg.BindAddr)
	}

	dead = startGossip(t, deadCfg)
	if _, err := dead.Join(ctx, []string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the latecomer to see node 2 back", func() bool { return stateOf(late, 2) == StateAlive })
}

// A departure a peer reports never overrides what the node saw itself,
// never names the node itself, and evicts nothing from a full table. It
// is marked Reported, emits no event (nothing acts at once on hearsay),
// and the node's own observation of the member replaces it.
func TestTableLearnsOnlyUnknownDepartures(t *testing.T) {
	tb := newTable(1, 3, 16)
	tb.set(EventJoin, memberN(1, StateAlive))
	tb.set(EventJoin, memberN(2, StateAlive))
	events := len(tb.events)
	for _, m := range []Member{memberN(1, StateDead), memberN(2, StateDead)} {
		if tb.learn(m) {
			t.Fatalf("learned node %d dead over its own view", m.ID)
		}
	}
	if !tb.learn(memberN(3, StateLeft)) {
		t.Fatal("did not learn of an unknown departed node")
	}
	if tb.learn(memberN(4, StateDead)) {
		t.Fatal("hearsay took a place in a full table")
	}
	if len(tb.events) != events {
		t.Fatalf("learning a departure queued %d events, want none", len(tb.events)-events)
	}
	got := tb.departedMembers()
	if len(got) != 1 || got[0].ID != 3 || got[0].State != StateLeft || !got[0].Reported {
		t.Fatalf("departed members %+v, want node 3 left, reported", got)
	}
	if m, _ := tb.member(2); m.State != StateAlive {
		t.Fatalf("node 2 is %v, want alive", m.State)
	}
	tb.set(EventJoin, memberN(3, StateAlive)) // node 3 comes back, seen here
	if m, _ := tb.member(3); m.State != StateAlive || m.Reported {
		t.Fatalf("node 3 after this node saw it: %+v, want alive and not reported", m)
	}
}

func TestDepartedEncoding(t *testing.T) {
	ms := []Member{
		{NodeInfo: NodeInfo{ID: 7, PeerAddr: "127.0.0.1:9", Attributes: map[string]string{"zone": "z1"}}, GossipAddr: "127.0.0.1:8", State: StateDead},
		{NodeInfo: NodeInfo{ID: 9, Version: "v1"}, GossipAddr: "127.0.0.1:10", State: StateLeft},
		{NodeInfo: NodeInfo{ID: 11}, State: StateAlive}, // not departed: left out
	}
	b := encodeDeparted(ms)
	got, skipped, err := decodeDeparted(b, 8)
	if err != nil || skipped != 0 {
		t.Fatal(skipped, err)
	}
	if len(got) != 2 || got[0].State != StateDead || got[1].State != StateLeft ||
		!equalInfo(got[0].NodeInfo, ms[0].NodeInfo) || got[1].GossipAddr != "127.0.0.1:10" {
		t.Fatalf("decoded %+v", got)
	}
	if encodeDeparted(ms[2:]) != nil || encodeDeparted(nil) != nil {
		t.Fatal("no departed members must encode to no state at all")
	}
	// Past the receiver's limit the rest is not read; an entry it cannot
	// take is skipped alone.
	if got, _, err := decodeDeparted(b, 1); err != nil || len(got) != 1 || got[0].ID != 7 {
		t.Fatalf("limit 1: %+v, %v; want node 7 alone", got, err)
	}
	odd := slices.Concat(b[:2], []byte{7}, b[3:]) // the first entry in an unknown state
	if got, skipped, err := decodeDeparted(odd, 8); err != nil || skipped != 1 || len(got) != 1 || got[0].ID != 9 {
		t.Fatalf("an entry in an unknown state: %+v, %d skipped, %v; want node 9, one skipped", got, skipped, err)
	}
	bad := map[string][]byte{
		"truncated":          b[:len(b)-1],
		"trailing":           append(slices.Clone(b), 0),
		"unknown format":     append([]byte{9}, b[1:]...),
		"count past the end": {departedFormat, 0xff, 0xff, 0xff, 0x7f, 1, 0, 0},
		"empty":              {},
	}
	for name, buf := range bad {
		if _, _, err := decodeDeparted(buf, 8); !errors.Is(err, ErrInvalidNode) {
			t.Fatalf("%s: %v, want ErrInvalidNode", name, err)
		}
	}
}

// The in-memory twin behaves as Gossip does: a node joining after a
// member failed sees it dead.
func TestFakeLatecomerLearnsDepartedMembers(t *testing.T) {
	net := NewNetwork()
	a, b := fakeNode(t, net, 1), fakeNode(t, net, 2)
	if _, err := b.Join(context.Background(), []string{"fake:1"}); err != nil {
		t.Fatal(err)
	}
	net.Fail(2)
	late := fakeNode(t, net, 3)
	if _, err := late.Join(context.Background(), []string{"fake:1"}); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(late, 2); s != StateDead {
		t.Fatalf("the latecomer sees node 2 %v, want dead", s)
	}
	if s := stateOf(a, 3); s != StateAlive {
		t.Fatalf("node 1 sees the latecomer %v", s)
	}
}

// A peer's departed list is hostile input: decoding never panics, never
// answers more than the limit, and answers only dead or left members
// whose metadata validates.
func FuzzDecodeDeparted(f *testing.F) {
	f.Add(encodeDeparted([]Member{
		{NodeInfo: NodeInfo{ID: 7, PeerAddr: "127.0.0.1:9"}, GossipAddr: "127.0.0.1:8", State: StateDead},
		{NodeInfo: NodeInfo{ID: 9}, GossipAddr: "127.0.0.1:10", State: StateLeft},
	}), 1)
	f.Add([]byte{departedFormat, 0xff, 0xff, 0xff, 0x7f}, 8)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = min(max(limit, 0), 64)
		got, _, err := decodeDeparted(b, limit)
		if err != nil {
			return
		}
		if len(got) > limit {
			t.Fatalf("%d members past the limit %d", len(got), limit)
		}
		for _, m := range got {
			if !departed(m.State) || m.NodeInfo.Validate() != nil {
				t.Fatalf("decoded %+v", m)
			}
		}
	})
}
