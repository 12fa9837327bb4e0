package control

// Status is what `malachi cluster status` shows of the control plane, as
// this node sees it.
type Status struct {
	Node   uint64        `json:"node"`
	Vnodes int           `json:"vnodes"`
	Nodes  []NodeRecord  `json:"nodes"` // the registry's
	Groups []GroupStatus `json:"groups"`
}

// GroupStatus is one group's raft state on this node.
type GroupStatus struct {
	Group    uint64   `json:"group"`
	Name     string   `json:"name"`  // "root", "vnode-3"
	State    string   `json:"state"` // this replica's raft role
	Leader   uint64   `json:"leader"`
	Term     uint64   `json:"term"`
	Commit   uint64   `json:"commit"`
	Applied  uint64   `json:"applied"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
	// Placed is the committed voter set (growth, removals and applied
	// rebalances move it); Voters converge to it.
	Placed []uint64 `json:"placed,omitempty"`
	// Waiting, on the group's leader, says why the next replica change
	// towards Placed is held back: it would leave the voters without a
	// live quorum (a voter is down). Bring the node back, or remove it.
	Waiting string `json:"waiting,omitempty"`
}

// Status reports the registry and every hosted group.
func (n *Node) Status() Status {
	s := Status{Node: n.cfg.NodeID, Vnodes: n.Vnodes()}
	reg, _ := n.Registry()
	if reg != nil {
		s.Nodes = reg.Nodes
	}
	for _, g := range n.groups() {
		st, err := n.host.Status(g)
		if err != nil {
			continue
		}
		gs := GroupStatus{
			Group: g, Name: groupName(g), State: st.State, Leader: st.Leader, Term: st.Term,
			Commit: st.Commit, Applied: st.Applied, Voters: sortedIDs(st.Voters), Learners: sortedIDs(st.Learners),
		}
		if reg != nil {
			gs.Placed = reg.Voters[g]
		}
		n.mu.Lock()
		gs.Waiting = n.waiting[g]
		n.mu.Unlock()
		s.Groups = append(s.Groups, gs)
	}
	return s
}

// LeaderOf returns the leader of group as this node knows it (0 when it
// knows none) and this node's term of the group. On the leader itself the
// term is the one it leads in: raft never elects two leaders in one term,
// so (group, term) names one leadership, which ends with the term.
// ErrUnknownGroup when the node does not host the group.
//
// It never waits on the raft host: the answer is the leadership the host
// published at the end of its last cycle (raft.Host.Leadership), so a
// cycle stalled in a slow fsync does not hold the requests routed by it.
// Successive calls never see a group's term go back.
func (n *Node) LeaderOf(group uint64) (leader, term uint64, err error) {
	l, err := n.host.Leadership(group)
	if err != nil {
		return 0, 0, ErrUnknownGroup
	}
	return l.Leader, l.Term, nil
}
