package membership

import (
	"context"
	"errors"
	"testing"
)

func fakeNode(t *testing.T, net *Network, id uint64) *Fake {
	t.Helper()
	f, err := net.Node(NodeInfo{ID: id, PeerAddr: "127.0.0.1:1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// lastAbout is the newest queued event about member id.
func lastAbout(t *testing.T, m Membership, id uint64) Event {
	t.Helper()
	var last Event
	for _, ev := range drain(m.Events()) {
		if ev.Member.ID == id {
			last = ev
		}
	}
	return last
}

func stateOf(m Membership, id uint64) State {
	for _, mem := range m.Members() {
		if mem.ID == id {
			return mem.State
		}
	}
	return 0
}

// TestFakeLifecycle drives three in-memory nodes through join, update,
// suspicion, leave and failure, checking each node's events and snapshot.
func TestFakeLifecycle(t *testing.T) {
	ctx := context.Background()
	net := NewNetwork()
	a, b, c := fakeNode(t, net, 1), fakeNode(t, net, 2), fakeNode(t, net, 3)
	for _, f := range []*Fake{a, b, c} {
		if _, err := f.Join(ctx, []string{"fake:1"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []*Fake{a, b, c} {
		if n := len(f.Members()); n != 3 {
			t.Fatalf("node %d sees %d members, want 3", f.info.ID, n)
		}
	}
	if ev := lastAbout(t, a, 3); ev.Kind != EventJoin {
		t.Fatalf("a: last event about 3 = %v, want join", ev.Kind)
	}
	if err := b.SetAttributes(ctx, map[string]string{"rack": "r2"}); err != nil {
		t.Fatal(err)
	}
	if ev := lastAbout(t, c, 2); ev.Kind != EventUpdate || ev.Member.Attributes["rack"] != "r2" {
		t.Fatalf("c: last event about 2 = %+v, want an update with rack=r2", ev)
	}
	net.Suspect(3)
	if ev := lastAbout(t, a, 3); ev.Kind != EventSuspect || stateOf(a, 3) != StateSuspect {
		t.Fatalf("a: %v / %v, want suspect", ev.Kind, stateOf(a, 3))
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := lastAbout(t, b, 3); ev.Kind != EventLeave || stateOf(b, 3) != StateLeft {
		t.Fatalf("b: %v / %v, want leave", ev.Kind, stateOf(b, 3))
	}
	net.Fail(2)
	if ev := lastAbout(t, a, 2); ev.Kind != EventDead || stateOf(a, 2) != StateDead {
		t.Fatalf("a: %v / %v, want dead", ev.Kind, stateOf(a, 2))
	}
	a.Close()
	if _, open := <-a.Events(); open {
		t.Fatal("a's events still open after Close")
	}
	if _, err := a.Join(ctx, []string{"fake:2"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Join after Close = %v, want ErrClosed", err)
	}
}

func TestFakeDuplicateID(t *testing.T) {
	ctx := context.Background()
	net := NewNetwork()
	a, b := fakeNode(t, net, 1), fakeNode(t, net, 2)
	a.Join(ctx, []string{"fake:2"})
	b.Join(ctx, []string{"fake:1"})
	same, err := net.Node(NodeInfo{ID: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := same.Start(ctx); err == nil {
		t.Fatal("a second node started at the same fake address")
	}
	twin, err := net.NodeAt("fake:2b", NodeInfo{ID: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := twin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := twin.Join(ctx, []string{"fake:1"}); !errors.Is(err, ErrDuplicateNodeID) {
		t.Fatalf("Join with a taken id = %v, want ErrDuplicateNodeID", err)
	}
}
