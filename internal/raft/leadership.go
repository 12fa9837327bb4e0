package raft

// Leadership is a group's leader (0 when none is known) and this node's
// term of it.
type Leadership struct {
	Leader, Term uint64
}

// Leadership returns the group's leader and term as of the end of the
// host's last processing cycle, without taking the host's lock. A cycle
// holds that lock across the log's fsync, so a caller that only routes
// by leadership (who leads, in which term) must not wait on it: a slow
// or stalled disk would hold every such caller with it. The answer is
// at most one cycle old, as Status's is once returned. ErrUnknownGroup
// when the group is not hosted.
func (h *Host) Leadership(group uint64) (Leadership, error) {
	if m := h.leaders.Load(); m != nil {
		if l, ok := (*m)[group]; ok {
			return l, nil
		}
	}
	return Leadership{}, ErrUnknownGroup
}

// publishLeadership publishes the leadership of the groups in changed
// (those a cycle processed) when one of them differs from what was last
// published. The map is replaced whole, never changed in place, so
// readers need no lock; it is rebuilt only when a leader or a term
// changes, which elections make rare.
//
// REQUIRES: h.mu held.
func (h *Host) publishLeadership(changed []groupReady) {
	old := h.leaders.Load()
	for _, r := range changed {
		if old == nil || (*old)[r.g.id] != (Leadership{Leader: r.g.lead, Term: r.g.term}) {
			h.republishLeadership()
			return
		}
	}
}

// republishLeadership publishes every hosted group's leadership, as raft
// reports it now.
//
// REQUIRES: h.mu held.
func (h *Host) republishLeadership() {
	old := h.leaders.Load()
	m := make(map[uint64]Leadership, len(h.groups))
	for id, g := range h.groups {
		st := g.rn.BasicStatus()
		m[id] = Leadership{Leader: st.Lead, Term: st.GetTerm()}
		if st.Lead != 0 && (old == nil || (*old)[id].Leader != st.Lead) {
			h.stats.LeaderChanges++
		}
	}
	h.leaders.Store(&m)
}
