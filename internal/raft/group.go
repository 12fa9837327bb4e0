package raft

import (
	"context"
	"errors"
	"fmt"
	"slices"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Future is a request waiting in the host: a proposal, a read barrier or
// a replica change. It completes exactly once.
type Future struct {
	done     chan struct{}
	result   []byte
	err      error
	term     uint64 // the leader term a proposal was made in
	deadline uint64 // the host tick after which it fails
}

func newFuture(term, deadline uint64) *Future {
	return &Future{done: make(chan struct{}), term: term, deadline: deadline}
}

func (f *Future) complete(result []byte, err error) {
	f.result, f.err = result, err
	close(f.done)
}

// Done is closed when the request completes.
func (f *Future) Done() <-chan struct{} { return f.done }

// Result returns the outcome; valid once Done is closed.
func (f *Future) Result() ([]byte, error) { return f.result, f.err }

// Wait blocks until the request completes or ctx ends. When ctx ends
// first, the request keeps running in the host (until its timeout) and its
// outcome is unknown to the caller.
func (f *Future) Wait(ctx context.Context) ([]byte, error) {
	select {
	case <-f.done:
		return f.result, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("raft: %w; outcome unknown, retriable", ctx.Err())
	}
}

// group is one hosted Raft group. Guarded by Host.mu.
type group struct {
	id        uint64
	rn        *etcdraft.RawNode
	sm        StateMachine
	storage   etcdraft.Storage
	confState *pb.ConfState
	applied   uint64
	snapIndex uint64 // index of the latest local snapshot
	// snapshotDue asks for a snapshot at the end of the cycle, whatever
	// the count of entries since the last one.
	snapshotDue  bool
	snapFailedAt uint64 // applied index of the last failed snapshot

	// term and lead as of the last cycle, to notice leadership changes.
	term, lead uint64

	proposals map[uint64]*Future // by envelope seq
	reads     map[uint64]*Future // ReadIndex requests with no index yet, by seq
	readLead  map[uint64]uint64  // the leader each read was sent to
	indexed   []indexedRead      // reads that know their index, waiting to apply it

	// The replica change in flight. It stays pending after its request
	// times out, until its entry applies or leadership moves: raft would
	// silently turn a second change proposed meanwhile into an empty entry.
	confPending uint64 // its envelope seq, 0 if none
	confTerm    uint64 // the term it was proposed in
	confIndex   uint64 // its log index, once a Ready has shown it; 0 before

	// raft refuses (silently) a replica change until a new leader has
	// applied every entry it held when elected. leaderFirst is at or above
	// that index: the stored last index when this node was first seen
	// leading in leaderTerm.
	leaderTerm, leaderFirst uint64

	// stateless: the replica was opened with neither a hard state nor a
	// snapshot and has not received a snapshot since. It cannot tell a
	// fresh replica from one whose log was lost, so it casts no vote: a
	// replica that lost its log may already have voted in the term.
	stateless bool

	// failed, once set, stops the group on this node (see ErrGroupFailed).
	failed error
}

type indexedRead struct {
	index uint64
	f     *Future
}

func newGroup(id uint64, rn *etcdraft.RawNode, sm StateMachine, st etcdraft.Storage, cs *pb.ConfState, applied uint64) *group {
	bs := rn.BasicStatus()
	return &group{
		id: id, rn: rn, sm: sm, storage: st, confState: cs, applied: applied, snapIndex: applied,
		term: bs.GetTerm(), lead: bs.Lead,
		proposals: make(map[uint64]*Future), reads: make(map[uint64]*Future), readLead: make(map[uint64]uint64),
	}
}

func (g *group) inflight() int { return len(g.proposals) + len(g.reads) + len(g.indexed) }

func (g *group) failAll(err error) {
	g.failProposals(err)
	g.failReads(err)
	for _, r := range g.indexed {
		r.f.complete(nil, err)
	}
	g.indexed = nil
}

func (g *group) failProposals(err error) {
	for seq, f := range g.proposals {
		f.complete(nil, err)
		delete(g.proposals, seq)
	}
	g.clearConf()
}

func (g *group) clearConf() { g.confPending, g.confTerm, g.confIndex = 0, 0, 0 }

func (g *group) failReads(err error) {
	for seq, f := range g.reads {
		f.complete(nil, err)
		delete(g.reads, seq)
		delete(g.readLead, seq)
	}
}

// expire fails requests whose deadline passed.
func (g *group) expire(now uint64) {
	for seq, f := range g.proposals {
		if now > f.deadline {
			// A replica change stays pending (confPending) until its entry
			// applies or leadership moves, though its request has failed.
			f.complete(nil, ErrRequestTimeout)
			delete(g.proposals, seq)
		}
	}
	for seq, f := range g.reads {
		if now > f.deadline {
			f.complete(nil, ErrRequestTimeout)
			delete(g.reads, seq)
			delete(g.readLead, seq)
		}
	}
	g.indexed = slices.DeleteFunc(g.indexed, func(r indexedRead) bool {
		if now > r.f.deadline {
			r.f.complete(nil, ErrRequestTimeout)
			return true
		}
		return false
	})
}

// leading returns the current term if this node leads the group, or a
// NotLeaderError.
func (g *group) leading() (uint64, error) {
	st := g.rn.BasicStatus()
	if st.RaftState != etcdraft.StateLeader {
		return 0, &NotLeaderError{Group: g.id, Leader: st.Lead}
	}
	return st.GetTerm(), nil
}

// lookup returns a group that can take another request.
func (h *Host) lookup(group uint64) (*group, error) {
	if h.stopped != nil {
		return nil, h.stopped
	}
	g, ok := h.groups[group]
	if !ok {
		return nil, ErrUnknownGroup
	}
	if g.failed != nil {
		return nil, g.failed
	}
	if g.inflight() >= h.opts.MaxInflight {
		return nil, ErrTooManyProposals
	}
	return g, nil
}

// lookupLeading is lookup of a group this node leads, with its term.
// REQUIRES: h.mu held.
func (h *Host) lookupLeading(group uint64) (*group, uint64, error) {
	g, err := h.lookup(group)
	if err != nil {
		return nil, 0, err
	}
	term, err := g.leading()
	if err != nil {
		return nil, 0, err
	}
	return g, term, nil
}

func (h *Host) deadline() uint64 { return h.ticks + uint64(h.opts.RequestTimeoutTicks) }

// ProposeAsync is Propose without the wait: the returned Future completes
// when the entry is applied here, or fails.
func (h *Host) ProposeAsync(group uint64, data []byte) (*Future, error) {
	if len(data) > h.opts.MaxProposalBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrProposalTooLarge, len(data), h.opts.MaxProposalBytes)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, term, err := h.lookupLeading(group)
	if err != nil {
		return nil, err
	}
	h.seq++
	if err := g.rn.Propose(envelope{incarnation: h.opts.Incarnation, seq: h.seq, payload: data}.encode()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProposalDropped, err)
	}
	f := newFuture(term, h.deadline())
	g.proposals[h.seq] = f
	h.stats.Proposals++
	h.signal()
	return f, nil
}

// ReadIndexAsync is ReadBarrier without the wait.
func (h *Host) ReadIndexAsync(group uint64) (*Future, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.lookup(group)
	if err != nil {
		return nil, err
	}
	st := g.rn.BasicStatus()
	if st.Lead == 0 {
		// raft drops a read request while it knows no leader.
		return nil, &NotLeaderError{Group: group}
	}
	h.seq++
	f := newFuture(st.GetTerm(), h.deadline())
	g.reads[h.seq] = f
	g.readLead[h.seq] = st.Lead
	g.rn.ReadIndex(envelope{incarnation: h.opts.Incarnation, seq: h.seq}.encode())
	h.signal()
	return f, nil
}

// ChangeKind is one kind of replica change.
type ChangeKind int

// Replica changes. PromoteLearner turns a learner into a voter.
const (
	AddVoter ChangeKind = iota + 1
	RemoveVoter
	AddLearner
	PromoteLearner
)

func (k ChangeKind) String() string {
	switch k {
	case AddVoter:
		return "add voter"
	case RemoveVoter:
		return "remove voter"
	case AddLearner:
		return "add learner"
	case PromoteLearner:
		return "promote learner"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// ReplicaChange adds, removes or promotes one replica of a group.
type ReplicaChange struct {
	Kind ChangeKind
	Node uint64
}

var errBadChange = errors.New("raft: replica change does not fit the group's configuration")

// check refuses a change that the current configuration makes pointless
// or unsafe, so the caller hears why rather than waiting on a no-op.
func (c ReplicaChange) check(cs *pb.ConfState) (pb.ConfChangeType, error) {
	voter, learner := slices.Contains(cs.GetVoters(), c.Node), slices.Contains(cs.GetLearners(), c.Node)
	fail := func(why string) (pb.ConfChangeType, error) {
		return 0, fmt.Errorf("%w: %s node %d: %s", errBadChange, c.Kind, c.Node, why)
	}
	switch {
	case c.Node == 0:
		return fail("node id 0")
	case c.Kind == AddVoter && (voter || learner):
		return fail("already a replica (promote a learner instead)")
	case c.Kind == AddLearner && (voter || learner):
		return fail("already a replica")
	case c.Kind == PromoteLearner && !learner:
		return fail("not a learner")
	case c.Kind == RemoveVoter && !voter && !learner:
		return fail("not a replica")
	case c.Kind == RemoveVoter && voter && len(cs.GetVoters()) == 1:
		return fail("the last voter")
	}
	switch c.Kind {
	case AddVoter, PromoteLearner:
		return pb.ConfChangeAddNode, nil
	case AddLearner:
		return pb.ConfChangeAddLearnerNode, nil
	case RemoveVoter:
		return pb.ConfChangeRemoveNode, nil
	}
	return fail("unknown kind")
}

// ChangeReplicasAsync is ChangeReplicas without the wait.
func (h *Host) ChangeReplicasAsync(group uint64, c ReplicaChange) (*Future, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, term, err := h.lookupLeading(group)
	if err != nil {
		return nil, err
	}
	if err := g.confChangeReady(term); err != nil {
		return nil, err
	}
	typ, err := c.check(g.confState)
	if err != nil {
		return nil, err
	}
	if c.Kind == PromoteLearner && !g.caughtUp(c.Node) {
		return nil, ErrLearnerBehind
	}
	h.seq++
	cc := &pb.ConfChangeV2{
		Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(c.Node)}},
		Context: envelope{incarnation: h.opts.Incarnation, seq: h.seq}.encode(),
	}
	if err := g.rn.ProposeConfChange(cc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProposalDropped, err)
	}
	f := newFuture(term, h.deadline())
	g.proposals[h.seq] = f
	g.confPending, g.confTerm, g.confIndex = h.seq, term, 0
	h.signal()
	return f, nil
}

// confChangeReady refuses a replica change that raft would silently turn
// into an empty entry: while another is pending, and while a leader
// elected in term has not applied the entries it held when elected (raft's
// pendingConfIndex; one of them may be a replica change of the old term).
func (g *group) confChangeReady(term uint64) error {
	if g.confPending != 0 {
		return fmt.Errorf("%w: group %d", ErrConfChangeInProgress, g.id)
	}
	if g.leaderTerm != term {
		return fmt.Errorf("%w: group %d: leadership in term %d is not settled yet", ErrConfChangeInProgress, g.id, term)
	}
	if g.applied < g.leaderFirst {
		return fmt.Errorf("%w: group %d: the leader elected in term %d has applied %d of the %d entries it held when elected",
			ErrConfChangeInProgress, g.id, term, g.applied, g.leaderFirst)
	}
	return nil
}

// caughtUp reports whether node's log, as the leader tracks it, has
// reached the leader's commit index.
func (g *group) caughtUp(node uint64) bool {
	commit := g.rn.BasicStatus().GetCommit()
	ok := false
	g.rn.WithProgress(func(id uint64, _ etcdraft.ProgressType, pr tracker.Progress) {
		if id == node {
			ok = pr.Match >= commit
		}
	})
	return ok
}
