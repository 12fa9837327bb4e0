package membership

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// table is a node's bounded view of the members and its bounded event
// queue, shared by the memberlist-backed implementation and the Fake.
//
// Event policy: events go into a channel of fixed capacity without ever
// blocking the sender (memberlist calls in while holding its own locks).
// When the channel is full, the queued events are discarded and replaced
// by one EventResync: the consumer then reads Members(), which already
// reflects every discarded change. Nothing is dropped silently, and the
// consumer never has to drain faster than it can reconcile.
type table struct {
	self       uint64
	maxMembers int
	events     chan Event
	mu         struct {
		sync.Mutex
		members   map[uint64]*entry
		seq       uint64 // orders entries for eviction, oldest first
		closed    bool
		coalesced uint64 // events replaced by EventResync
	}
}

type entry struct {
	Member
	seq uint64
}

func newTable(self uint64, maxMembers, eventBuffer int) *table {
	t := &table{self: self, maxMembers: maxMembers, events: make(chan Event, eventBuffer)}
	t.mu.members = make(map[uint64]*entry)
	return t
}

// admit reports whether member id may enter the table: a known id always
// may; a new one while there is room or a departed member to evict.
func (t *table) admit(id uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mu.members[id]; ok || len(t.mu.members) < t.maxMembers || t.evictableLocked() != nil {
		return nil
	}
	return fmt.Errorf("%w: %d live members, the limit is %d; node %d refused", ErrTableFull, len(t.mu.members), t.maxMembers, id)
}

// evictableLocked is the oldest member that has left or died, or nil.
// REQUIRES: t.mu held.
func (t *table) evictableLocked() *entry {
	var oldest *entry
	for _, e := range t.mu.members {
		if !e.State.Live() && e.ID != t.self && (oldest == nil || e.seq < oldest.seq) {
			oldest = e
		}
	}
	return oldest
}

// set records m and, unless m is the local node, emits kind. A new member
// that finds the table full of live members is refused and false returned.
func (t *table) set(kind EventKind, m Member) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return false
	}
	if _, ok := t.mu.members[m.ID]; !ok && len(t.mu.members) >= t.maxMembers {
		old := t.evictableLocked()
		if old == nil {
			return false
		}
		delete(t.mu.members, old.ID)
	}
	t.mu.seq++
	m.NodeInfo = m.NodeInfo.Clone()
	t.mu.members[m.ID] = &entry{Member: m, seq: t.mu.seq}
	if m.ID != t.self {
		t.emitLocked(Event{Kind: kind, Member: m})
	}
	return true
}

// learn records m, a departure a peer reported, only when the table has
// no entry for m.ID and has room: what this node saw itself, alive or
// departed, always wins over hearsay, and hearsay evicts nothing. The
// entry is marked Reported and emits no event: nothing acts at once on
// hearsay (a latecomer may learn of up to MaxMembers departures in one
// exchange); the heal planner finds it on its next look. It reports
// whether m was recorded.
func (t *table) learn(m Member) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, known := t.mu.members[m.ID]
	if t.mu.closed || known || m.ID == t.self || len(t.mu.members) >= t.maxMembers {
		return false
	}
	t.mu.seq++
	m.NodeInfo = m.NodeInfo.Clone()
	m.Reported = true
	t.mu.members[m.ID] = &entry{Member: m, seq: t.mu.seq}
	return true
}

// departedMembers is every member that died or left, the local node
// never among them.
func (t *table) departedMembers() []Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Member
	for _, e := range t.mu.members {
		if departed(e.State) && e.ID != t.self {
			m := e.Member
			m.NodeInfo = m.NodeInfo.Clone()
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// emit queues ev without touching the table.
func (t *table) emit(ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.mu.closed {
		t.emitLocked(ev)
	}
}

// emitLocked queues ev, or coalesces the queue into EventResync when it is
// full. Only holders of t.mu send, so after draining there is room.
// REQUIRES: t.mu held.
func (t *table) emitLocked(ev Event) {
	ev.Member.NodeInfo = ev.Member.NodeInfo.Clone()
	select {
	case t.events <- ev:
		return
	default:
	}
	for drained := false; !drained; {
		select {
		case <-t.events:
			t.mu.coalesced++
		default:
			drained = true
		}
	}
	t.mu.coalesced++
	t.events <- Event{Kind: EventResync}
}

// member returns the entry for id.
func (t *table) member(id uint64) (Member, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.mu.members[id]
	if !ok {
		return Member{}, false
	}
	m := e.Member
	m.NodeInfo = m.NodeInfo.Clone()
	return m, true
}

// members is a snapshot ordered by id.
func (t *table) members() []Member {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Member, 0, len(t.mu.members))
	for _, e := range t.mu.members {
		m := e.Member
		m.NodeInfo = m.NodeInfo.Clone()
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// coalesced counts the events replaced by EventResync so far.
func (t *table) coalesced() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.coalesced
}

// close stops all further events and closes the channel.
func (t *table) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.mu.closed {
		t.mu.closed = true
		close(t.events)
	}
}
