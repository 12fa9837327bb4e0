package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/groups"
)

// leadAt is the leadCheck of a node that the raft host names leader of
// every vnode (leads) at term.
func leadAt(co *coordinator, leads bool, term uint64) leadCheck {
	return func(topicID uint64, now int64) (genSpace, error) {
		return co.lead(topicID>>8, topicID, leads, term, now)
	}
}

// A reading of an earlier term (a lookup that raced an election) never
// replaces the newer leadership: it is refused, and the newer
// leadership's members and generations stay. A later term drops the
// vnode's groups, and its generations are above every earlier one.
func TestCoordinatorNeverReplacedByAnEarlierTerm(t *testing.T) {
	co := newCoordinator(Config{}.withDefaults())
	const topic = 1<<8 | 1 // vnode 1
	a, err := co.join(leadAt(co, true, 5), topic, "g", "m", "", []uint64{1, 2}, 0)
	if err != nil || a.Generation>>genTermShift != 5 {
		t.Fatalf("join at term 5: %+v, %v", a, err)
	}
	if _, err := co.join(leadAt(co, true, 4), topic, "g", "n", "", []uint64{1, 2}, 0); !errors.Is(err, errNotCoordinator) {
		t.Fatalf("join read at term 4 after term 5: %v, want errNotCoordinator", err)
	}
	if _, err := co.touch(leadAt(co, false, 4), topic, "g", "m", 0); !errors.Is(err, errNotCoordinator) {
		t.Fatalf("touch read at term 4 (another leader) after term 5: %v, want errNotCoordinator", err)
	}
	st, err := co.touch(leadAt(co, true, 5), topic, "g", "m", 0)
	if err != nil || st.Generation != a.Generation || st.Members != 1 {
		t.Fatalf("the term-5 leadership after earlier readings: %+v, %v; want generation %#x, one member", st, err, a.Generation)
	}
	b, err := co.join(leadAt(co, true, 6), topic, "g", "m", "", []uint64{1, 2}, 0)
	if err != nil || b.Generation <= a.Generation || b.Generation>>genTermShift != 6 {
		t.Fatalf("join at term 6: %+v, %v; want a generation of term 6", b, err)
	}
	if _, err := co.commitRanges(leadAt(co, true, 6), topic, "g", "m", a.Generation, 0); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("commit under term 5's generation at term 6: %v, want stale_member", err)
	}
	if _, err := co.commitRanges(leadAt(co, true, 6), topic, "g", "m", b.Generation, 0); err != nil {
		t.Fatalf("commit under term 6's generation: %v", err)
	}
}

// Losing a vnode drops its groups and no other vnode's; the node's group
// limit counts the groups of every vnode it leads.
func TestCoordinatorDropsOneVnode(t *testing.T) {
	cfg := Config{MaxGroups: 2}.withDefaults()
	co := newCoordinator(cfg)
	const t1, t2, t3 = 1<<8 | 1, 2<<8 | 1, 3<<8 | 1
	for _, topic := range []uint64{t1, t2} {
		if _, err := co.join(leadAt(co, true, 3), topic, "g", "m", "", []uint64{1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := co.join(leadAt(co, true, 3), t3, "g", "m", "", []uint64{1}, 0); !errors.Is(err, groups.ErrTooManyGroups) {
		t.Fatalf("a third group on a third vnode with MaxGroups 2: %v, want a refusal", err)
	}
	if _, err := co.touch(leadAt(co, false, 4), t1, "g", "m", 0); !errors.Is(err, errNotCoordinator) {
		t.Fatalf("touch after losing vnode 1: %v", err)
	}
	if names, _ := co.liveAt(leadAt(co, true, 3), t2, 0); len(names) != 1 {
		t.Fatalf("vnode 2's groups after vnode 1 was lost: %v", names)
	}
	if names := co.c.Groups(t1); len(names) != 0 {
		t.Fatalf("vnode 1's groups after it was lost: %v", names)
	}
	if _, err := co.join(leadAt(co, true, 3), t3, "g", "m", "", []uint64{1}, 0); err != nil {
		t.Fatalf("a group on vnode 3 once vnode 1's was dropped: %v", err)
	}
}

// A leadership hands out at most genLimit generations: past it, it
// refuses rather than hand out one that reads as the next term's, and a
// generation beyond its space is never taken for one of its own.
func TestCoordinatorGenerationsBoundedPerLeadership(t *testing.T) {
	co := newCoordinator(Config{}.withDefaults())
	co.genLimit = 4
	const topic = 1<<8 | 1
	check := leadAt(co, true, 7)
	var last uint64
	var err error
	for i := 0; err == nil; i++ {
		var a groups.Assignment
		a, err = co.join(check, topic, "g", string(rune('a'+i)), "", []uint64{1, 2}, 0)
		if err == nil {
			if a.Generation>>genTermShift != 7 || a.Generation-7<<genTermShift >= co.genLimit {
				t.Fatalf("generation %#x outside term 7's space of %d", a.Generation, co.genLimit)
			}
			last = a.Generation
		}
		if i > 10 {
			t.Fatal("generations never ran out")
		}
	}
	if !errors.Is(err, errGenerationsExhausted) || !errors.Is(err, ErrMetadataUnavailable) {
		t.Fatalf("past the leadership's generations: %v, want errGenerationsExhausted", err)
	}
	if _, err := co.commitRanges(check, topic, "g", "a", last+co.genLimit, 0); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("commit under a generation past the space: %v, want stale_member", err)
	}
	if _, err := co.commitRanges(check, topic, "g", "a", 8<<genTermShift|1, 0); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("commit under a later term's generation: %v, want stale_member", err)
	}
	// The next leadership starts a fresh space.
	if a, err := co.join(leadAt(co, true, 8), topic, "g", "a", "", []uint64{1, 2}, 0); err != nil || a.Generation != 8<<genTermShift|1 {
		t.Fatalf("first join at term 8: %+v, %v", a, err)
	}
}

// A group message the coordinator cannot decode is refused for good
// (malformed_request), never answered as a handler error, which the
// sender would take for an unreachable coordinator and retry.
func TestServeGroupRefusesMalformed(t *testing.T) {
	d := &dataPlane{self: 1}
	long := make([]byte, dataplane.MaxNameBytes+1)
	for i := range long {
		long[i] = 'x'
	}
	msg := (&dataplane.Group{Op: dataplane.GroupTouch, Topic: 1, Group: "g", Member: string(long)}).Encode()
	resp, err := d.serveGroup(context.Background(), msg)
	if err != nil {
		t.Fatalf("handler error %v, want a refusal", err)
	}
	_, err = dataplane.DecodeGroupAnswer(resp)
	var r *dataplane.Refusal
	if !errors.As(err, &r) || r.Status != dataplane.StatusRefused || r.Reason != "malformed_request" {
		t.Fatalf("answer: %v, want a refusal malformed_request", err)
	}
	if e := groupRemoteError(1, r); retryAtCoordinator(e) || errors.Is(e, ErrMetadataUnavailable) {
		t.Fatalf("the sender reads it as %v, which it would retry", e)
	}
}

// A node has at most groupCallsPerNode group calls in flight to one
// other node; the bound is per destination.
func TestGroupCallsBoundedPerNode(t *testing.T) {
	var tab coordTable
	for range groupCallsPerNode {
		if !tab.acquire(2) {
			t.Fatal("refused below the bound")
		}
	}
	if tab.acquire(2) {
		t.Fatal("a call past the bound to node 2 was let through")
	}
	if !tab.acquire(3) {
		t.Fatal("node 3's calls refused for node 2's")
	}
	tab.release(2)
	if !tab.acquire(2) {
		t.Fatal("refused after a call to node 2 finished")
	}
}
