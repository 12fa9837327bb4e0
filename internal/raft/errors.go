package raft

import (
	"errors"
	"fmt"
)

// NotLeaderError says this node does not lead the group, so the request was
// not proposed. Leader is the node believed to lead it, or 0 when unknown;
// the caller may retry there.
type NotLeaderError struct {
	Group  uint64
	Leader uint64
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("raft: group %d: not the leader, leader unknown", e.Group)
	}
	return fmt.Sprintf("raft: group %d: not the leader, try node %d", e.Group, e.Leader)
}

var (
	// ErrUnknownGroup: the group is not hosted on this node.
	ErrUnknownGroup = errors.New("raft: group not hosted on this node")
	// ErrGroupExists: CreateGroup or AddGroup for a group already hosted.
	ErrGroupExists = errors.New("raft: group already hosted on this node")
	// ErrTooManyGroups: the host already runs Options.MaxGroups groups.
	ErrTooManyGroups = errors.New("raft: too many groups on this node")
	// ErrTooManyProposals: the group has Options.MaxInflight requests
	// waiting; retry after some complete.
	ErrTooManyProposals = errors.New("raft: too many requests in flight for the group")
	// ErrProposalDropped: raft refused the proposal (no leader, leadership
	// transfer, uncommitted-size limit). It was not appended; retry.
	ErrProposalDropped = errors.New("raft: proposal dropped, not appended")
	// ErrLeadershipLost: this node stopped leading the group (or its term
	// moved) while the request waited. A proposal's outcome is unknown:
	// it may still commit under the new leader.
	ErrLeadershipLost = errors.New("raft: leadership lost while waiting; outcome unknown")
	// ErrRequestTimeout: the request waited Options.RequestTimeoutTicks
	// without completing. A proposal's outcome is unknown.
	ErrRequestTimeout = errors.New("raft: request timed out in the host; outcome unknown")
	// ErrConfChangeInProgress: the group already has a replica change in
	// flight, or a leader newly elected has not yet applied the entries
	// of earlier terms (one of them may be a replica change); raft
	// applies one change at a time. Retry shortly.
	ErrConfChangeInProgress = errors.New("raft: a replica change is already in flight for the group")
	// ErrLearnerBehind: a learner is promoted only once its log has
	// reached the leader's commit index, so the group's quorum never
	// waits on a replica that is still catching up.
	ErrLearnerBehind = errors.New("raft: learner has not caught up; promote it later")
	// ErrGroupRemoved: the group was removed from this node while the
	// request waited.
	ErrGroupRemoved = errors.New("raft: group removed from this node")
	// ErrGroupFailed: the group stopped on this node after a fault that
	// would otherwise have crashed the node or let the replicas diverge
	// (raft's own consistency checks, typically a replica whose log was
	// lost and that rejoined under the same node id, or a committed entry
	// this build cannot read). The node's other groups keep running;
	// Status reports the reason. Remove the group (RemoveGroup) and add
	// the replica back under a new node id, or upgrade the node.
	ErrGroupFailed = errors.New("raft: group stopped on this node after a fault")
	// ErrStopped: the host stopped (Run returned, or a Save failed).
	ErrStopped = errors.New("raft: host stopped")
	// ErrInboxFull: Options.MaxPendingFrames frames already wait to be
	// processed; the frame was not taken.
	ErrInboxFull = errors.New("raft: inbound frame queue full")
	// ErrFrameTooLarge: a received frame exceeds Options.MaxFrameBytes.
	ErrFrameTooLarge = errors.New("raft: frame too large")
	// ErrProposalTooLarge: one proposal exceeds Options.MaxProposalBytes.
	ErrProposalTooLarge = errors.New("raft: proposal too large")
)

// Retriable reports whether err is a refusal or an unknown outcome that a
// caller may retry (possibly at another node). Retrying a proposal whose
// outcome is unknown may apply it twice; commands must tolerate that.
func Retriable(err error) bool {
	var nl *NotLeaderError
	return errors.As(err, &nl) || errors.Is(err, ErrTooManyProposals) || errors.Is(err, ErrProposalDropped) ||
		errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrRequestTimeout) ||
		errors.Is(err, ErrConfChangeInProgress) || errors.Is(err, ErrInboxFull) || errors.Is(err, ErrLearnerBehind)
}
