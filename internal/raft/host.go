package raft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/malachi-log/malachi/internal/clock"
)

// StateMachine is one group's replicated state. The host calls it only
// from its processing cycle, one call at a time; it must not call back into
// the Host.
type StateMachine interface {
	// Apply applies a committed command and returns its result, which the
	// proposer's Propose returns. It must be deterministic: every replica
	// applies the same commands in the same order.
	Apply(index uint64, data []byte) []byte
	// Snapshot returns the state as of the last Apply.
	Snapshot() ([]byte, error)
	// Restore replaces the state with a Snapshot's.
	Restore(data []byte) error
}

// Sender sends one frame to a node. It must not block: a frame it cannot
// queue is refused with an error (the host then reports the destination
// unreachable to raft, which retries).
type Sender interface {
	Send(to uint64, payload []byte) error
}

// Options configures a Host. Zero values take the defaults in brackets.
type Options struct {
	NodeID   uint64   // this node's id; also its replica id in every group (required)
	LogStore LogStore // the node's shared durable log (required)
	Sender   Sender   // outbound frames (required)
	// NewStateMachine builds an empty state machine for a group found in
	// the LogStore when the host opens; nil skips recovery (CreateGroup
	// and AddGroup then recover a stored group one at a time).
	NewStateMachine func(group uint64) StateMachine

	Clock          clock.Clock   // [clock.Real()] drives Run's ticks
	TickInterval   time.Duration // [100ms]
	HeartbeatTicks int           // [1]
	ElectionTicks  int           // [10]
	// RequestTimeoutTicks fails a proposal, read or replica change that
	// has not completed after this many ticks [4 × ElectionTicks].
	RequestTimeoutTicks int

	SnapshotEvery uint64 // take a snapshot after this many applied entries [1024]
	// CompactMargin entries are kept behind a snapshot so a follower that
	// lags a little catches up from the log rather than a snapshot [64].
	CompactMargin uint64

	MaxGroups        int    // groups hosted [4096]
	MaxInflight      int    // proposals, reads and changes waiting per group [256]
	MaxPendingFrames int    // received frames waiting for Process [1024]
	MaxPendingBytes  int    // their bytes [64 MiB]
	MaxFrameBytes    int    // one frame, sent or received [16 MiB]
	MaxProposalBytes int    // one proposal [1 MiB]
	MaxSizePerMsg    uint64 // entry bytes in one append message [256 KiB]
	MaxInflightMsgs  int    // append messages in flight per follower [64]
	// MaxMessageEntries bounds the entries in one received message [the
	// larger of 1024 and MaxSizePerMsg/8]; a frame holding a message with
	// more is refused. raft fills an append message up to MaxSizePerMsg
	// bytes and an entry carrying a proposal encodes to at least 16, so a
	// sender with the same MaxSizePerMsg stays below the bound unless a
	// message holds mostly leaders' empty entries (4 bytes, one per term);
	// that follower then catches up from a snapshot once the leader
	// compacts its log. Received messages are kept as bytes and
	// unmarshalled one at a time when stepped, and a message has at least
	// 6 bytes (type, receiver, sender), so decoding a frame allocates at
	// most 4 bytes per byte received, and stepping one message at most
	// MaxMessageEntries entries (B1).
	MaxMessageEntries int
	// MaxUncommittedBytes bounds a leader's uncommitted log [64 MiB].
	MaxUncommittedBytes uint64

	// Incarnation tells this Host's proposals apart from those of earlier
	// runs of the node [random].
	Incarnation uint64
	Logger      etcdraft.Logger // [discard]
}

func (o *Options) setDefaults() error {
	if o.NodeID == 0 || o.LogStore == nil || o.Sender == nil {
		return errors.New("raft: Options need NodeID, LogStore and Sender")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.HeartbeatTicks, 1)
	def(&o.ElectionTicks, 10)
	def(&o.RequestTimeoutTicks, 4*o.ElectionTicks)
	def(&o.MaxGroups, 4096)
	def(&o.MaxInflight, 256)
	def(&o.MaxPendingFrames, 1024)
	def(&o.MaxFrameBytes, 16<<20)
	def(&o.MaxPendingBytes, 64<<20)
	def(&o.MaxProposalBytes, 1<<20)
	def(&o.MaxInflightMsgs, 64)
	if o.MaxSizePerMsg == 0 {
		o.MaxSizePerMsg = min(256<<10, uint64(o.MaxFrameBytes/4))
	}
	def(&o.MaxMessageEntries, max(1024, int(o.MaxSizePerMsg/8)))
	if o.ElectionTicks <= o.HeartbeatTicks {
		return fmt.Errorf("raft: ElectionTicks (%d) must exceed HeartbeatTicks (%d)", o.ElectionTicks, o.HeartbeatTicks)
	}
	// One entry must always fit in a frame with room to spare, or a group
	// holding it could never replicate it.
	if o.MaxProposalBytes > o.MaxFrameBytes/2 || o.MaxSizePerMsg > uint64(o.MaxFrameBytes/2) {
		return fmt.Errorf("raft: MaxProposalBytes (%d) and MaxSizePerMsg (%d) must be at most half of MaxFrameBytes (%d)",
			o.MaxProposalBytes, o.MaxSizePerMsg, o.MaxFrameBytes)
	}
	if o.MaxMessageEntries < int(o.MaxSizePerMsg/16)+1 {
		return fmt.Errorf("raft: MaxMessageEntries (%d) must be above MaxSizePerMsg/16 (%d), or a full append message would be refused",
			o.MaxMessageEntries, o.MaxSizePerMsg/16)
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.TickInterval <= 0 {
		o.TickInterval = 100 * time.Millisecond
	}
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = 1024
	}
	if o.CompactMargin == 0 {
		o.CompactMargin = 64
	}
	if o.MaxUncommittedBytes == 0 {
		o.MaxUncommittedBytes = 64 << 20
	}
	if o.Incarnation == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		o.Incarnation = binary.BigEndian.Uint64(b[:]) | 1
	}
	if o.Logger == nil {
		o.Logger = &etcdraft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}
	}
	return nil
}

// Host runs every Raft group this node replicates. Its processing core
// (Tick, Receive, Process) has no goroutine and no clock of its own; Run
// drives it in production and tests drive it by hand. All methods are safe
// for concurrent use.
type Host struct {
	opts Options

	mu      sync.Mutex // guards everything below and every group
	groups  map[uint64]*group
	order   []uint64 // group ids, sorted, for a deterministic cycle
	seq     uint64
	ticks   uint64
	stopped error
	running bool
	stats   Stats

	inbox struct {
		sync.Mutex // never held while calling out, so hosts can Send to each other
		frames     []inboundFrame
		bytes      int
	}
	work chan struct{} // capacity 1: "Process has something to do"

	// leaders is every hosted group's leadership as of the last cycle,
	// read without mu (see Leadership).
	leaders atomic.Pointer[map[uint64]Leadership]
}

type inboundFrame struct {
	from  uint64
	bytes []byte
}

// Stats counts a host's traffic and persistence since it opened.
type Stats struct {
	FramesSent, BytesSent, FramesReceived, BadFrames uint64
	MessagesSent, HeartbeatsCoalesced                uint64
	Saves, SendErrors, DroppedOversize               uint64
	Snapshots, SnapshotsRestored, SnapshotFailures   uint64
	// DroppedMessages counts received messages not stepped: types a peer
	// never sends (MsgProp, local messages), a sender or receiver that
	// does not match the frame, votes asked of a replica with no state.
	DroppedMessages uint64
	// GroupFailures counts groups stopped after a fault (ErrGroupFailed).
	GroupFailures uint64
	// Proposals counts entries proposed at this node (as leader);
	// SnapshotsSent, snapshots queued to followers; LeaderChanges, the
	// times a hosted group was seen with a new leader (its first included).
	Proposals, SnapshotsSent, LeaderChanges uint64
}

// NewHost opens a host over opts.LogStore, recovering every stored group
// when opts.NewStateMachine is set.
func NewHost(opts Options) (*Host, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	h := &Host{opts: opts, groups: make(map[uint64]*group), work: make(chan struct{}, 1)}
	if opts.NewStateMachine == nil {
		return h, nil
	}
	for _, id := range opts.LogStore.Groups() {
		if err := h.openGroup(id, opts.NewStateMachine(id)); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// CreateGroup bootstraps a group whose initial voters are voters, this node
// among them. Every initial voter calls it with the same voters. The initial
// state is an index-1 snapshot of sm, so replicas added later are filled
// from a snapshot. A group already in the LogStore is recovered instead,
// which makes CreateGroup safe to repeat after a restart.
func (h *Host) CreateGroup(group uint64, voters []uint64, sm StateMachine) error {
	if !slices.Contains(voters, h.opts.NodeID) {
		return fmt.Errorf("raft: group %d: node %d is not among the voters %v", group, h.opts.NodeID, voters)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.canHost(group); err != nil {
		return err
	}
	stored, err := h.hasState(group)
	if err != nil || stored {
		return errors.Join(err, h.openGroup(group, sm))
	}
	data, err := sm.Snapshot()
	if err != nil {
		return fmt.Errorf("raft: group %d: initial snapshot: %w", group, err)
	}
	vs := slices.Clone(voters)
	slices.Sort(vs)
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &pb.ConfState{Voters: slices.Compact(vs)},
	}}
	hs := &pb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}
	if err := h.opts.LogStore.Save([]Update{{Group: group, HardState: hs, Snapshot: snap}}); err != nil {
		return fmt.Errorf("raft: group %d: bootstrap: %w", group, err)
	}
	return h.openGroup(group, sm)
}

// AddGroup hosts a replica of an existing group. The replica starts empty
// (or from the LogStore's state after a restart) and is filled by the
// group's leader once a replica change names this node.
//
// A node id must never be reused for a replica that lost its state (a
// replaced disk, an emptied data directory): the group's other replicas
// still count that replica's earlier acknowledgements and votes. Remove
// the replica from the group (RemoveVoter) and add it back under a new
// node id. The host contains what it can detect of such reuse: a replica
// with no stored state casts no vote until a leader's snapshot has filled
// it, and a replica whose empty log contradicts the leader's record of it
// stops (Status reports ErrGroupFailed) instead of crashing the node.
func (h *Host) AddGroup(group uint64, sm StateMachine) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.canHost(group); err != nil {
		return err
	}
	return h.openGroup(group, sm)
}

// RemoveGroup stops hosting the group and deletes its log. Requests
// waiting on it fail with ErrGroupRemoved.
func (h *Host) RemoveGroup(group uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.groups[group]
	if !ok {
		return ErrUnknownGroup
	}
	g.failAll(ErrGroupRemoved)
	delete(h.groups, group)
	h.order = slices.DeleteFunc(h.order, func(id uint64) bool { return id == group })
	h.republishLeadership()
	return h.opts.LogStore.RemoveGroup(group)
}

func (h *Host) canHost(group uint64) error {
	switch {
	case h.stopped != nil:
		return h.stopped
	case h.groups[group] != nil:
		return ErrGroupExists
	case len(h.groups) >= h.opts.MaxGroups:
		return ErrTooManyGroups
	}
	return nil
}

func (h *Host) hasState(group uint64) (bool, error) {
	st := h.opts.LogStore.Storage(group)
	hs, _, err := st.InitialState()
	if err != nil {
		return false, err
	}
	snap, err := st.Snapshot()
	if err != nil {
		return false, err
	}
	return !etcdraft.IsEmptyHardState(hs) || !etcdraft.IsEmptySnap(snap), nil
}

// openGroup starts a group over whatever the LogStore holds for it: the
// state machine is restored from the stored snapshot, and raft hands back
// the committed entries after it to be applied again.
func (h *Host) openGroup(id uint64, sm StateMachine) error {
	st := h.opts.LogStore.Storage(id)
	hs, cs, err := st.InitialState()
	if err != nil {
		return fmt.Errorf("raft: group %d: initial state: %w", id, err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		return fmt.Errorf("raft: group %d: snapshot: %w", id, err)
	}
	stateless := etcdraft.IsEmptyHardState(hs) && etcdraft.IsEmptySnap(snap)
	applied := snap.GetMetadata().GetIndex()
	if applied > 0 {
		if err := sm.Restore(snap.GetData()); err != nil {
			return fmt.Errorf("raft: group %d: restore snapshot at %d: %w", id, applied, err)
		}
	}
	rn, err := etcdraft.NewRawNode(h.raftConfig(st, applied))
	if err != nil {
		return fmt.Errorf("raft: group %d: %w", id, err)
	}
	g := newGroup(id, rn, sm, st, proto.Clone(cs).(*pb.ConfState), applied)
	g.stateless = stateless
	h.groups[id] = g
	h.order = append(h.order, id)
	slices.Sort(h.order)
	h.republishLeadership()
	return nil
}

func (h *Host) raftConfig(st etcdraft.Storage, applied uint64) *etcdraft.Config {
	o := &h.opts
	return &etcdraft.Config{
		ID:                        o.NodeID,
		ElectionTick:              o.ElectionTicks,
		HeartbeatTick:             o.HeartbeatTicks,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             o.MaxSizePerMsg,
		MaxInflightMsgs:           o.MaxInflightMsgs,
		MaxUncommittedEntriesSize: o.MaxUncommittedBytes,
		// CheckQuorum makes a partitioned leader step down, which fails its
		// waiting proposals instead of leaving them to their timeout;
		// PreVote keeps a rejoining node from deposing a healthy leader.
		CheckQuorum:    true,
		PreVote:        true,
		ReadOnlyOption: etcdraft.ReadOnlySafe,
		// Proposals are made only at the leader (a follower answers
		// NotLeaderError), so a proposal is never lost in forwarding.
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    o.Logger,
	}
}

// signal tells the driver there is work for Process.
func (h *Host) signal() {
	select {
	case h.work <- struct{}{}:
	default:
	}
}

// Stats returns the host's counters.
func (h *Host) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// Groups lists the hosted groups.
func (h *Host) Groups() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.order)
}

// Status describes one hosted group.
type Status struct {
	Group, Node, Leader, Term, Commit, Applied uint64
	State                                      string // StateLeader, StateFollower, ...
	Voters, Learners                           []uint64
	// Failed is non-nil once the group has stopped on this node
	// (ErrGroupFailed, with the reason); the other fields are as of then.
	// Only RemoveGroup clears it.
	Failed error
}

// Status returns the group's status.
func (h *Host) Status(group uint64) (Status, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.groups[group]
	if !ok {
		return Status{}, ErrUnknownGroup
	}
	st := g.rn.BasicStatus()
	return Status{
		Group: group, Node: h.opts.NodeID, Leader: st.Lead, Term: st.GetTerm(), Commit: st.GetCommit(),
		Applied: g.applied, State: st.RaftState.String(),
		Voters: slices.Clone(g.confState.GetVoters()), Learners: slices.Clone(g.confState.GetLearners()),
		Failed: g.failed,
	}, nil
}

// Leader returns the group's leader as this node knows it, 0 if none.
func (h *Host) Leader(group uint64) (uint64, error) {
	st, err := h.Status(group)
	return st.Leader, err
}

// Propose replicates data in the group and returns the state machine's
// result once the entry is applied on this node. Only the leader proposes;
// elsewhere it returns a *NotLeaderError naming the leader it knows. A ctx
// that ends first returns its error and leaves the outcome unknown.
func (h *Host) Propose(ctx context.Context, group uint64, data []byte) ([]byte, error) {
	f, err := h.ProposeAsync(group, data)
	if err != nil {
		return nil, err
	}
	return f.Wait(ctx)
}

// ReadBarrier returns once this node has applied everything committed in
// the group before the call (ReadIndex, confirmed by a quorum of
// heartbeats), so a read of the local state machine that follows is
// linearizable. It works on followers too.
func (h *Host) ReadBarrier(ctx context.Context, group uint64) error {
	f, err := h.ReadIndexAsync(group)
	if err != nil {
		return err
	}
	_, err = f.Wait(ctx)
	return err
}

// ChangeReplicas proposes one replica change to the group through raft's
// ConfChangeV2 and returns once it is applied on this node (the leader).
// Grow a group by AddLearner, wait for it to catch up, then PromoteLearner;
// shrink it by RemoveVoter after the replacement is promoted.
func (h *Host) ChangeReplicas(ctx context.Context, group uint64, c ReplicaChange) error {
	f, err := h.ChangeReplicasAsync(group, c)
	if err != nil {
		return err
	}
	_, err = f.Wait(ctx)
	return err
}
