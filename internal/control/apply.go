package control

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/raft"
)

// Apply runs a metadata command in the cluster and returns its result
// once its group's leader has applied it and so has this node's replica
// of the group, so that a View on this node that follows sees the
// command (read-your-writes on every node, not only the leader). It
// picks the group from the command (route), proposes it here when this
// node leads the group and otherwise forwards it over
// peer.ChannelForward to the leader, following leadership changes until
// ctx ends. The leader answers with the index its replica has applied;
// this node then waits, within ctx, for its own replica to reach it.
// When ctx ends first the result is returned all the same (the outcome
// is known), and a View may not show it yet. A command the metadata refuses comes
// back as a Result with Err set and a nil error; the error is for the
// outcome being unknown: ErrUnavailable when no leader with a quorum
// answered within ctx, ErrNotJoined, ErrClosed, or the host's failure.
//
// A retry after an ambiguous failure (a lost connection, a leader change,
// a timeout) sends the same entry again, with the request id drawn here
// once, and the group's state machine answers a second copy with the
// first copy's result: a command applies once per Apply call even when it
// is proposed twice (within the last maxDedup entries of its group).
func (n *Node) Apply(ctx context.Context, cmd metadata.Command) (metadata.Result, error) {
	ring, err := n.ring()
	if err != nil {
		return metadata.Result{}, err
	}
	rt := route(&cmd, ring)
	if rt.refused != nil {
		return metadata.Result{Err: rt.refused}, nil
	}
	if err := n.spreadQuota(rt.group, &cmd); err != nil {
		return metadata.Result{Err: err}, nil
	}
	out, err := n.proposeEntry(ctx, rt.group, entry{Meta: &cmd})
	if err != nil {
		return metadata.Result{}, err
	}
	return out.result(), nil
}

// proposeEntry stamps e with this node and a fresh request id, proposes
// it in group and decodes the state machine's answer.
func (n *Node) proposeEntry(ctx context.Context, group uint64, e entry) (outcome, error) {
	data, err := n.stamp(e)
	if err != nil {
		return outcome{}, err
	}
	res, err := n.propose(ctx, group, data)
	if err != nil {
		return outcome{}, err
	}
	return decodeOutcome(res)
}

// stamp encodes e with this node and a fresh request id.
func (n *Node) stamp(e entry) ([]byte, error) {
	e.Origin, e.Req = n.cfg.NodeID, rand.Uint64()|1
	return encodeEntry(e)
}

// propose gets data applied by group's leader, here or at the leader it
// is forwarded to, retrying while ctx lasts; then it waits for this
// node's replica to apply it too (see Apply).
func (n *Node) propose(ctx context.Context, group uint64, data []byte) ([]byte, error) {
	forwarded, index := false, uint64(0)
	res, err := n.atLeader(ctx, group, func(ctx context.Context, target uint64) ([]byte, error) {
		if target == n.cfg.NodeID {
			forwarded = false
			return n.host.Propose(ctx, group, data) // applied here when it returns
		}
		forwarded = true
		b, at, err := n.forwardPropose(ctx, target, group, data)
		index = at
		return b, err
	})
	if err != nil || !forwarded {
		return res, err
	}
	if index == 0 {
		// A leader that does not say its index: a barrier reaches at
		// least as far.
		err = n.Barrier(ctx, group)
	} else {
		err = n.waitApplied(ctx, group, index)
	}
	if err != nil {
		n.cfg.Logger.Debug("control: answered before the local replica applied the write", "group", groupName(group), "err", err)
	}
	return res, nil
}

// waitApplied returns once this node's replica of group has applied
// index, or fails when ctx ends or the node closes. The state machine
// wakes it at each command it applies; a raft tick is the fallback for
// entries that reach no state machine (a leader's empty entry, a replica
// change).
func (n *Node) waitApplied(ctx context.Context, group, index uint64) error {
	sm := n.sm(group)
	if sm == nil {
		return ErrUnknownGroup
	}
	for {
		moved := sm.changed()
		st, err := n.host.Status(group)
		switch {
		case err != nil:
			return err
		case st.Applied >= index:
			return nil
		case st.Failed != nil:
			return st.Failed
		}
		t := n.cfg.Clock.NewTimer(n.cfg.TickInterval)
		select {
		case <-moved:
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return unavailable(ctx, fmt.Errorf("replica of %s at %d, waiting for %d", groupName(group), st.Applied, index))
		case <-n.closed:
			t.Stop()
			return ErrClosed
		}
		t.Stop()
	}
}

// atLeader runs attempt at group's leader: here, or at the node it is
// forwarded to, retrying while ctx lasts and the failure is retriable.
// Each failed attempt names the next node to try (the leader a refusal
// names, or the one this node's replica knows) and, when it names none,
// waits a tick for an election.
func (n *Node) atLeader(ctx context.Context, group uint64, attempt func(ctx context.Context, target uint64) ([]byte, error)) ([]byte, error) {
	target := n.cfg.NodeID
	var last error
	hops := 0
	for {
		if err := n.usable(); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, unavailable(ctx, last)
		}
		res, err := attempt(ctx, target)
		if err == nil {
			return res, nil
		}
		if !retriable(err) {
			return nil, err
		}
		last = err
		next := n.nextTarget(group, err)
		hops++
		// A refusal naming a leader is followed at once; anything else
		// (no leader known, an unknown outcome, an unreachable node, or
		// replicas pointing at each other during an election) waits a
		// tick first.
		if next == 0 || hops > 2 || !isNotLeader(err) {
			if ctx.Err() != nil || !n.waitTick(ctx) {
				return nil, unavailable(ctx, last)
			}
			hops = 0
		}
		if next == 0 {
			next = n.cfg.NodeID
		}
		target = next
	}
}

// nextTarget is the node to try after err: the leader a NotLeaderError
// names, else the leader this node's replica knows, else 0.
func (n *Node) nextTarget(group uint64, err error) uint64 {
	var nl *raft.NotLeaderError
	if errors.As(err, &nl) && nl.Leader != 0 {
		return nl.Leader
	}
	if l, lerr := n.host.Leader(group); lerr == nil {
		return l
	}
	return 0
}

func isNotLeader(err error) bool {
	var nl *raft.NotLeaderError
	return errors.As(err, &nl) && nl.Leader != 0
}

// retriable reports whether another attempt, here or elsewhere, may
// succeed: raft's refusals and unknown outcomes, and a peer that could
// not be reached or lost the connection.
func retriable(err error) bool {
	return raft.Retriable(err) || errors.Is(err, peer.ErrUnreachable) || errors.Is(err, peer.ErrConnectionLost) ||
		errors.Is(err, peer.ErrBusy) || errors.Is(err, peer.ErrTooManyCalls) || errors.Is(err, peer.ErrBackpressure) ||
		errors.Is(err, peer.ErrUnknownNode) || errors.Is(err, errRemoteUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// unavailable is the error of a request whose ctx ended before a leader
// answered: ErrUnavailable, with the last failure for the logs.
func unavailable(ctx context.Context, last error) error {
	return fmt.Errorf("%w (%v; last attempt: %v)", ErrUnavailable, ctx.Err(), last)
}

// waitTick waits one raft tick, or until ctx ends or the node closes.
func (n *Node) waitTick(ctx context.Context) bool {
	t := n.cfg.Clock.NewTimer(n.cfg.TickInterval)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	case <-n.closed:
		return false
	}
}

func (n *Node) usable() error {
	select {
	case <-n.closed:
		return ErrClosed
	default:
	}
	return n.Err()
}

// Barrier returns once this node's replica of group has applied
// everything committed in the group before the call (raft ReadIndex,
// confirmed by a quorum), so a View that follows is linearizable (C2).
// Without a quorum it returns ErrUnavailable when ctx ends.
func (n *Node) Barrier(ctx context.Context, group uint64) error {
	if n.sm(group) == nil {
		return ErrUnknownGroup
	}
	var last error
	for {
		if err := n.usable(); err != nil {
			return err
		}
		err := n.host.ReadBarrier(ctx, group)
		if err == nil {
			return nil
		}
		if !retriable(err) {
			return err
		}
		last = err
		if ctx.Err() != nil || !n.waitTick(ctx) {
			return unavailable(ctx, last)
		}
	}
}

// spreadQuota turns a command's cluster-wide limits into limits for its
// vnode. Apply checks a Quota exactly against one State, and a vnode's
// State holds only its own topics, so this node subtracts what the other
// vnodes hold in its local view: a create that fits the rest of the
// cluster is checked exactly against its vnode. The local view of the
// other vnodes may be behind, so concurrent creates through different
// vnodes may overshoot a limit by what those vnodes applied and this
// replica has not seen yet (bounded by the replication lag).
func (n *Node) spreadQuota(group uint64, cmd *metadata.Command) error {
	q := cmd.Quota
	if q == nil || group == RootGroup || q.Topics == 0 && q.Ranges == 0 && q.OwnerTopics == 0 && q.OwnerRanges == 0 {
		return nil
	}
	var topics, ranges, ownTopics, ownRanges int
	_ = n.ViewEach(func(g uint64, st *metadata.State) {
		if g == group {
			return
		}
		topics += st.TopicCount()
		ranges += st.RangeCount()
		if cmd.Owner != "" {
			t, r := st.OwnerUsage(cmd.Owner)
			ownTopics += t
			ownRanges += r
		}
	})
	local := *q
	for _, f := range []struct {
		limit *int
		used  int
	}{{&local.Topics, topics}, {&local.Ranges, ranges}, {&local.OwnerTopics, ownTopics}, {&local.OwnerRanges, ownRanges}} {
		if *f.limit == 0 {
			continue
		}
		if *f.limit <= f.used {
			return metadata.ErrQuotaExceeded
		}
		*f.limit -= f.used
	}
	cmd.Quota = &local
	return nil
}
