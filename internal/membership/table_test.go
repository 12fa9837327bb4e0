package membership

import (
	"errors"
	"testing"
)

func memberN(id uint64, state State) Member {
	return Member{NodeInfo: NodeInfo{ID: id}, State: state}
}

// drain reads every queued event without blocking.
func drain(ch <-chan Event) []Event {
	var out []Event
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		default:
			return out
		}
	}
}

// TestEventsInOrder: below capacity, every event arrives once, in order,
// and none about the local node.
func TestEventsInOrder(t *testing.T) {
	tb := newTable(1, 10, 8)
	tb.set(EventJoin, memberN(1, StateAlive))
	tb.set(EventJoin, memberN(2, StateAlive))
	tb.set(EventUpdate, memberN(2, StateAlive))
	tb.set(EventDead, memberN(2, StateDead))
	got := drain(tb.events)
	want := []EventKind{EventJoin, EventUpdate, EventDead}
	if len(got) != len(want) {
		t.Fatalf("events %v, want kinds %v", got, want)
	}
	for i, ev := range got {
		if ev.Kind != want[i] || ev.Member.ID != 2 {
			t.Fatalf("event %d = %v about %d, want %v about 2", i, ev.Kind, ev.Member.ID, want[i])
		}
	}
}

// TestSlowConsumerGetsResync: a full channel is coalesced into one
// EventResync, later events queue behind it, and the snapshot holds every
// change, including the coalesced ones.
func TestSlowConsumerGetsResync(t *testing.T) {
	tb := newTable(1, 100, 4)
	for id := uint64(2); id < 12; id++ {
		tb.set(EventJoin, memberN(id, StateAlive))
	}
	got := drain(tb.events)
	if len(got) == 0 || got[0].Kind != EventResync {
		t.Fatalf("events %v, want an EventResync first", got)
	}
	for _, ev := range got[1:] {
		if ev.Kind != EventJoin {
			t.Fatalf("after the resync: %v", ev)
		}
	}
	if last := got[len(got)-1]; last.Member.ID != 11 {
		t.Fatalf("last event is about %d, want 11: the newest change must not be lost", last.Member.ID)
	}
	if n := len(tb.members()); n != 10 {
		t.Fatalf("snapshot has %d members, want 10", n)
	}
	if tb.coalesced() == 0 {
		t.Fatal("no coalesced events counted")
	}
}

// TestTableBound: departed members are evicted oldest first to make room;
// a table full of live members refuses a newcomer.
func TestTableBound(t *testing.T) {
	tb := newTable(1, 3, 16)
	tb.set(EventJoin, memberN(1, StateAlive))
	tb.set(EventJoin, memberN(2, StateAlive))
	tb.set(EventJoin, memberN(3, StateAlive))
	if err := tb.admit(4); !errors.Is(err, ErrTableFull) {
		t.Fatalf("admit to a full live table = %v", err)
	}
	if tb.set(EventJoin, memberN(4, StateAlive)) {
		t.Fatal("set into a full live table succeeded")
	}
	if err := tb.admit(3); err != nil {
		t.Fatalf("a known member must stay admissible: %v", err)
	}
	tb.set(EventDead, memberN(3, StateDead))
	tb.set(EventLeave, memberN(2, StateLeft))
	if err := tb.admit(4); err != nil {
		t.Fatalf("admit with departed members to evict: %v", err)
	}
	if !tb.set(EventJoin, memberN(4, StateAlive)) {
		t.Fatal("set with a departed member to evict failed")
	}
	if _, ok := tb.member(3); ok {
		t.Fatal("the oldest departed member (3) was not the one evicted")
	}
	if _, ok := tb.member(2); !ok {
		t.Fatal("member 2 evicted before the older 3")
	}
}

func TestTableClose(t *testing.T) {
	tb := newTable(1, 3, 4)
	tb.close()
	tb.close()
	if tb.set(EventJoin, memberN(2, StateAlive)) {
		t.Fatal("set after close succeeded")
	}
	if _, open := <-tb.events; open {
		t.Fatal("events still open after close")
	}
}
