package raft

import (
	"errors"
	"fmt"
	"slices"
)

// ErrTransfereeBehind: leadership is handed only to a voter whose log has
// reached the leader's commit index. raft would otherwise hold the group's
// proposals (it drops them while a transfer is under way) for as long as
// the transferee takes to catch up, up to an election timeout.
var ErrTransfereeBehind = errors.New("raft: transferee has not caught up; transfer leadership later")

// TransferLeadership asks this node, the group's leader, to hand the
// group's leadership to node, a voter whose log is current. It returns
// once raft has taken the request; the transfer itself completes a round
// trip later, when node wins the election it is told to start at once
// (raft's MsgTimeoutNow, which skips the pre-vote). A transfer that has
// not completed within an election timeout is abandoned by raft and
// leadership stays here; the caller watches Status to know. While it is
// under way the leader drops new proposals (ErrProposalDropped, which is
// retriable). Asking for this node itself, or for the transfer already
// under way, changes nothing.
func (h *Host) TransferLeadership(group, node uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.lookup(group)
	if err != nil {
		return err
	}
	if _, err := g.leading(); err != nil {
		return err
	}
	if node == h.opts.NodeID {
		return nil
	}
	if !slices.Contains(g.confState.GetVoters(), node) {
		return fmt.Errorf("%w: transfer leadership to node %d: not a voter of group %d", errBadChange, node, group)
	}
	if g.confPending != 0 {
		// The change would fail with the leadership it was proposed under.
		return fmt.Errorf("%w: group %d: transfer leadership after it", ErrConfChangeInProgress, group)
	}
	if !g.caughtUp(node) {
		return ErrTransfereeBehind
	}
	g.rn.TransferLeader(node)
	h.signal()
	return nil
}
