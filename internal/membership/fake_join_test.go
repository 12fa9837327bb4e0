package membership

import (
	"context"
	"errors"
	"testing"
)

// drainClosed returns the events queued on ch and whether ch is closed.
func drainClosed(ch <-chan Event) (evs []Event, closed bool) {
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs, true
			}
			evs = append(evs, ev)
		default:
			return evs, false
		}
	}
}

// TestFakeDuplicateJoinMatchesGossip checks the Fake against the
// Membership contract for a duplicate id, which Gossip implements: "Join
// ... fails with ErrDuplicateNodeID when a live member already uses the
// local node id, and the node is then closed", and the incumbent's side is
// told with EventConflict. Code tested against the Fake must meet the path
// a real duplicate takes: the newcomer's Events channel closes, Leave
// answers ErrClosed, the members see EventConflict.
func TestFakeDuplicateJoinMatchesGossip(t *testing.T) {
	ctx := context.Background()
	net := NewNetwork()
	a, b := fakeNode(t, net, 1), fakeNode(t, net, 2)
	if _, err := a.Join(ctx, []string{"fake:2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join(ctx, []string{"fake:1"}); err != nil {
		t.Fatal(err)
	}
	drainClosed(a.Events())
	drainClosed(b.Events())
	twin, err := net.NodeAt("fake:2b", NodeInfo{ID: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := twin.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { twin.Close() })
	if _, err := twin.Join(ctx, []string{"fake:1"}); !errors.Is(err, ErrDuplicateNodeID) {
		t.Fatalf("Join with a taken id = %v, want ErrDuplicateNodeID", err)
	}
	var problems []string
	if _, closed := drainClosed(twin.Events()); !closed {
		problems = append(problems, "the refused newcomer's Events channel is still open (Gossip closes the node)")
	}
	if err := twin.Leave(ctx); !errors.Is(err, ErrClosed) {
		problems = append(problems, "Leave on the refused newcomer = "+errString(err)+", want ErrClosed")
	}
	evs, _ := drainClosed(a.Events())
	conflict := false
	for _, ev := range evs {
		conflict = conflict || ev.Kind == EventConflict
	}
	if !conflict {
		problems = append(problems, "the incumbent's peers saw no EventConflict")
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestFakeJoinReachesSeed starts a seed that joins no one (a cluster of
// one, bootstrapped with no --join; Gossip.Join with no address is a
// no-op) and lets a second node join it, the way nodes form a cluster.
// With Gossip both see each other, so with the Fake too: the contacted
// seed enters the mesh along with the node that joined it.
func TestFakeJoinReachesSeed(t *testing.T) {
	ctx := context.Background()
	net := NewNetwork()
	seed, b := fakeNode(t, net, 1), fakeNode(t, net, 2)
	if n, err := seed.Join(ctx, nil); n != 0 || err != nil {
		t.Errorf("the seed's Join with no address: %d, %v; want 0, nil as Gossip", n, err)
	}
	if _, err := b.Join(ctx, []string{"fake:1"}); err != nil {
		t.Fatal(err)
	}
	has := func(ms []Member, id uint64) bool {
		for _, m := range ms {
			if m.ID == id && m.State.Live() {
				return true
			}
		}
		return false
	}
	if !has(seed.Members(), 2) {
		t.Errorf("the seed does not see the node that joined it: %v", seed.Members())
	}
	if !has(b.Members(), 1) {
		t.Errorf("the joining node does not see the seed it joined: %v", b.Members())
	}
}
