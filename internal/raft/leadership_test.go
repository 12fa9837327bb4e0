package raft

import (
	"sync"
	"testing"
	"time"
)

// gatedStore is a log store whose Save waits, once armed, until the test
// opens the gate: a disk whose fsync has stalled.
type gatedStore struct {
	LogStore
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when an armed Save starts waiting
	open    chan struct{} // closed by the test to let it finish
}

func (s *gatedStore) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.entered, s.open = true, make(chan struct{}), make(chan struct{})
}

func (s *gatedStore) Save(updates []Update) error {
	s.mu.Lock()
	armed, entered, open := s.armed, s.entered, s.open
	s.armed = false
	s.mu.Unlock()
	if armed {
		close(entered)
		<-open
	}
	return s.LogStore.Save(updates)
}

// agreesWithStatus fails the test unless every live host's Leadership of
// group is what its Status says.
func (n *simNet) agreesWithStatus(group uint64) {
	n.t.Helper()
	for _, id := range n.ids {
		h := n.hosts[id]
		if h == nil {
			continue
		}
		st, err := h.Status(group)
		if err != nil {
			n.t.Fatal(err)
		}
		l, err := h.Leadership(group)
		if err != nil || l != (Leadership{Leader: st.Leader, Term: st.Term}) {
			n.t.Fatalf("node %d, group %d: Leadership %+v (%v), Status leader %d term %d", id, group, l, err, st.Leader, st.Term)
		}
	}
}

// TestLeadershipFollowsElections: Leadership names what Status does after
// an election and after the leader is cut off and replaced, and refuses a
// group the host does not have.
func TestLeadershipFollowsElections(t *testing.T) {
	n := newSim(t, 11, 3, nil)
	groups := groupIDs(4)
	for _, g := range groups {
		n.createGroup(g, n.ids)
	}
	n.runUntil("leaders", 300, func() bool { return n.allHaveLeaders(groups) })
	n.tick() // a cycle after the last election's messages
	n.agreesWithStatus(1)
	old := n.leader(1)
	oldLead, _ := n.hosts[old].Leadership(1)
	n.partition(old)
	n.runUntil("a new leader of group 1", 300, func() bool {
		l := n.leader(1)
		return l != 0 && l != old
	})
	n.heal()
	n.runUntil("every node to follow the new leader", 300, func() bool { return n.allHaveLeaders([]uint64{1}) })
	n.tick()
	n.agreesWithStatus(1)
	newLead, _ := n.hosts[n.leader(1)].Leadership(1)
	if newLead.Leader == old || newLead.Term <= oldLead.Term {
		t.Fatalf("after node %d (term %d) was cut off: Leadership %+v", old, oldLead.Term, newLead)
	}
	if _, err := n.hosts[old].Leadership(999); err != ErrUnknownGroup {
		t.Fatalf("Leadership of a group not hosted: %v, want ErrUnknownGroup", err)
	}
}

// TestLeadershipAnswersDuringStalledSave: while a processing cycle waits
// in the log's Save (holding the host's lock), Leadership still answers,
// with the leadership as of the cycle before.
func TestLeadershipAnswersDuringStalledSave(t *testing.T) {
	stores := map[uint64]*gatedStore{}
	n := newSim(t, 12, 3, func(o *Options) {
		s := stores[o.NodeID]
		if s == nil {
			s = &gatedStore{LogStore: o.LogStore}
			stores[o.NodeID] = s
		}
		o.LogStore = s
	})
	n.createGroup(1, n.ids)
	n.runUntil("a leader", 300, func() bool { return n.allHaveLeaders([]uint64{1}) })
	l := n.leader(1)
	h := n.hosts[l]
	want, err := h.Leadership(1)
	if err != nil || want.Leader != l {
		t.Fatalf("leader %d: Leadership %+v, %v", l, want, err)
	}
	if _, err := h.ProposeAsync(1, putCmd("k", "v")); err != nil {
		t.Fatal(err)
	}
	stores[l].arm()
	processed := make(chan error, 1)
	go func() {
		_, err := h.Process()
		processed <- err
	}()
	select {
	case <-stores[l].entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the cycle never saved the proposal")
	}
	answered := make(chan Leadership, 1)
	go func() {
		got, _ := h.Leadership(1)
		answered <- got
	}()
	select {
	case got := <-answered:
		if got != want {
			t.Errorf("Leadership during the stalled save: %+v, want %+v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Error("Leadership waited on the stalled save")
	}
	close(stores[l].open)
	if err := <-processed; err != nil {
		t.Fatal(err)
	}
}
