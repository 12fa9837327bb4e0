package raft

// The deterministic network every multi-host test here runs on: N hosts in
// one goroutine, a loop that ticks them, delivers frames and runs Process,
// and a seeded RNG that drops and delays frames. Partitions cut links
// both ways. No real time passes: one tick stands for Options.TickInterval.
// Raft draws its own election jitter, so a seed replays the same faults
// with slightly different election timing.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// kvSM is a small key-value state machine. Commands are JSON
// {"k":..., "v":...}; Apply stores v under k and returns the previous value.
type kvSM struct {
	data    map[string]string
	applied []uint64 // every index applied, to check order and duplicates
}

func newKV() *kvSM { return &kvSM{data: make(map[string]string)} }

type kvCmd struct {
	K string `json:"k"`
	V string `json:"v"`
}

func putCmd(k, v string) []byte {
	b, _ := json.Marshal(kvCmd{K: k, V: v})
	return b
}

func (s *kvSM) Apply(index uint64, data []byte) []byte {
	if n := len(s.applied); n > 0 && index <= s.applied[n-1] {
		panic(fmt.Sprintf("kvSM: index %d applied after %d", index, s.applied[n-1]))
	}
	s.applied = append(s.applied, index)
	var c kvCmd
	if err := json.Unmarshal(data, &c); err != nil {
		return []byte("error: " + err.Error())
	}
	prev := s.data[c.K]
	s.data[c.K] = c.V
	return []byte(prev)
}

func (s *kvSM) Snapshot() ([]byte, error) { return json.Marshal(s.data) }

func (s *kvSM) Restore(data []byte) error {
	s.data = make(map[string]string)
	s.applied = nil
	return json.Unmarshal(data, &s.data)
}

type simFrame struct {
	from, to  uint64
	payload   []byte
	deliverAt int // round
}

type simNet struct {
	t      testing.TB
	rng    *rand.Rand
	ids    []uint64
	hosts  map[uint64]*Host
	stores map[uint64]*MemLogStore
	sms    map[uint64]map[uint64]*kvSM // node → group → state machine
	opts   func(*Options)

	queue     []simFrame
	round     int
	ticks     int
	dropRate  float64
	maxDelay  int // rounds
	cut       map[[2]uint64]bool
	down      map[uint64]bool
	pairCount map[[2]uint64]int // frames sent per directed pair
	pairBytes map[[2]uint64]int
	// groupFailures lets groups stop (ErrGroupFailed) without failing the
	// test; otherwise a stopped group, such as one whose state machine
	// panicked on an index applied twice, fails it at once.
	groupFailures bool
}

// roundsPerTick is how many deliver-and-process rounds fit in a tick: a
// message and its answer can cross within one tick, as on a fast network.
const roundsPerTick = 3

type simSender struct {
	n    *simNet
	from uint64
}

func (s simSender) Send(to uint64, payload []byte) error {
	n := s.n
	n.pairCount[[2]uint64{s.from, to}]++
	n.pairBytes[[2]uint64{s.from, to}] += len(payload)
	delay := 1
	if n.maxDelay > 0 {
		delay += n.rng.IntN(n.maxDelay + 1)
	}
	n.queue = append(n.queue, simFrame{from: s.from, to: to, payload: payload, deliverAt: n.round + delay})
	return nil
}

func newSim(t testing.TB, seed uint64, nodes int, opts func(*Options)) *simNet {
	n := &simNet{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		hosts: map[uint64]*Host{}, stores: map[uint64]*MemLogStore{}, sms: map[uint64]map[uint64]*kvSM{},
		opts: opts, cut: map[[2]uint64]bool{}, down: map[uint64]bool{},
		pairCount: map[[2]uint64]int{}, pairBytes: map[[2]uint64]int{},
	}
	for i := 1; i <= nodes; i++ {
		id := uint64(i)
		n.ids = append(n.ids, id)
		n.stores[id] = NewMemLogStore()
		n.start(id)
	}
	return n
}

// start opens node id's host over its log store, recovering its groups
// with fresh state machines.
func (n *simNet) start(id uint64) {
	n.sms[id] = map[uint64]*kvSM{}
	o := Options{
		NodeID: id, LogStore: n.stores[id], Sender: simSender{n: n, from: id},
		NewStateMachine: func(group uint64) StateMachine {
			sm := newKV()
			n.sms[id][group] = sm
			return sm
		},
		Incarnation: n.rng.Uint64() | 1,
	}
	if n.opts != nil {
		n.opts(&o)
	}
	h, err := NewHost(o)
	if err != nil {
		n.t.Fatalf("node %d: %v", id, err)
	}
	n.hosts[id] = h
	delete(n.down, id)
}

// crash stops node id: its host is dropped, frames to it are lost, and its
// log store is kept as a disk would be.
func (n *simNet) crash(id uint64) {
	n.down[id] = true
	delete(n.hosts, id)
}

func (n *simNet) createGroup(group uint64, voters []uint64) {
	for _, id := range voters {
		sm := newKV()
		n.sms[id][group] = sm
		if err := n.hosts[id].CreateGroup(group, voters, sm); err != nil {
			n.t.Fatalf("node %d: create group %d: %v", id, group, err)
		}
	}
}

func (n *simNet) partition(id uint64) {
	for _, o := range n.ids {
		if o != id {
			n.cut[[2]uint64{id, o}], n.cut[[2]uint64{o, id}] = true, true
		}
	}
}

func (n *simNet) heal() { n.cut = map[[2]uint64]bool{} }

// tick advances simulated time by one tick.
func (n *simNet) tick() {
	n.ticks++
	for _, id := range n.ids {
		if h := n.hosts[id]; h != nil {
			h.Tick()
		}
	}
	for range roundsPerTick {
		n.roundStep()
	}
}

func (n *simNet) roundStep() {
	n.round++
	var keep []simFrame
	for _, f := range n.queue {
		switch {
		case f.deliverAt > n.round:
			keep = append(keep, f)
		case n.down[f.to] || n.cut[[2]uint64{f.from, f.to}]:
		case n.dropRate > 0 && n.rng.Float64() < n.dropRate:
		default:
			if h := n.hosts[f.to]; h != nil {
				if err := h.Receive(f.from, f.payload); errors.Is(err, ErrFrameTooLarge) {
					n.t.Fatalf("node %d sent node %d a frame over the bound: %v", f.from, f.to, err)
				}
			}
		}
	}
	n.queue = keep
	for _, id := range n.ids {
		h := n.hosts[id]
		if h == nil {
			continue
		}
		if _, err := h.Process(); err != nil {
			n.t.Fatalf("node %d: process: %v", id, err)
		}
		if !n.groupFailures && h.Stats().GroupFailures > 0 {
			for _, g := range h.Groups() {
				if st, _ := h.Status(g); st.Failed != nil {
					n.t.Fatalf("node %d: %v", id, st.Failed)
				}
			}
		}
	}
}

// runUntil ticks until cond holds, failing the test after maxTicks.
func (n *simNet) runUntil(what string, maxTicks int, cond func() bool) {
	n.t.Helper()
	for i := 0; i < maxTicks; i++ {
		if cond() {
			return
		}
		n.tick()
	}
	if !cond() {
		n.t.Fatalf("after %d ticks: %s did not happen", maxTicks, what)
	}
}

// leader returns the node that leads group at the highest term among the
// live hosts, or 0.
func (n *simNet) leader(group uint64) uint64 {
	var best, term uint64
	for _, id := range n.ids {
		h := n.hosts[id]
		if h == nil {
			continue
		}
		st, err := h.Status(group)
		if err == nil && st.State == "StateLeader" && st.Term >= term {
			best, term = id, st.Term
		}
	}
	return best
}

// allHaveLeaders reports whether every group has a leader that every live
// voter of the group agrees on.
func (n *simNet) allHaveLeaders(groups []uint64) bool {
	for _, g := range groups {
		l := n.leader(g)
		if l == 0 {
			return false
		}
		for _, id := range n.ids {
			if h := n.hosts[id]; h != nil && !n.isCut(id) {
				if st, err := h.Status(g); err == nil && slices.Contains(st.Voters, id) && st.Leader != l {
					return false
				}
			}
		}
	}
	return true
}

func (n *simNet) isCut(id uint64) bool {
	for k := range n.cut {
		if k[0] == id {
			return true
		}
	}
	return false
}

// propose proposes through the group's leader and runs until the result.
func (n *simNet) propose(group uint64, data []byte) ([]byte, error) {
	n.t.Helper()
	var l uint64
	n.runUntil(fmt.Sprintf("a leader for group %d", group), 200, func() bool { l = n.leader(group); return l != 0 })
	f, err := n.hosts[l].ProposeAsync(group, data)
	if err != nil {
		return nil, err
	}
	n.runUntil("the proposal to complete", 200, func() bool {
		select {
		case <-f.Done():
			return true
		default:
			return false
		}
	})
	return f.Result()
}

func (n *simNet) mustPropose(group uint64, data []byte) []byte {
	n.t.Helper()
	for attempt := 0; attempt < 10; attempt++ {
		res, err := n.propose(group, data)
		if err == nil {
			return res
		}
		if !Retriable(err) {
			n.t.Fatalf("propose: %v", err)
		}
	}
	n.t.Fatalf("propose to group %d kept failing", group)
	return nil
}

func groupIDs(count int) []uint64 {
	ids := make([]uint64, count)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	return ids
}
