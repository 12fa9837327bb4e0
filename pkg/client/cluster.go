package client

import (
	"context"
	"strconv"

	"github.com/malachi-log/malachi/internal/wire"
)

// ClusterStatus is the cluster as the node the client talks to sees it.
// A single node answers itself alone with no groups. The JSON field names
// are stable, for `malachi cluster status -o json`.
type ClusterStatus struct {
	Node   uint64         `json:"node"`   // the answering node's id; 0 on a single node
	Vnodes int            `json:"vnodes"` // ring size; 0 on a single node
	Nodes  []ClusterNode  `json:"nodes"`
	Groups []ClusterGroup `json:"groups"`
	Peers  []ClusterPeer  `json:"peers,omitempty"` // traffic with each other node
	// Repair is repair as the answering node sees it; nil from a node
	// older than version 2 of cluster_status.
	Repair *ClusterRepair `json:"repair,omitempty"`
}

// ClusterRepair is the answering node's view of repair: the segments
// short of copies, the copies it fills, the damaged copies and what its
// heal planner could not fix. Each list holds at most 100 entries (by
// topic and segment id); each total counts them all.
type ClusterRepair struct {
	// UnderReplicated counts, per topic, the segments (active or sealed)
	// with fewer live replicas than their factor: the first 100 topics.
	UnderReplicated []UnderReplicatedTopic `json:"under_replicated,omitempty"`
	// UnderReplicatedSegments are the first of those segments.
	UnderReplicatedSegments []UnderReplicatedSegment `json:"under_replicated_segments,omitempty"`
	// UnderReplicatedTotal counts the under-replicated segments of every
	// topic, listed or not.
	UnderReplicatedTotal int `json:"under_replicated_total"`
	// Healing are the copies the answering node is filling.
	Healing      []HealingCopy `json:"healing,omitempty"`
	HealingTotal int           `json:"healing_total"`
	// Damaged are the copies found damaged or missing: never served,
	// replaced from a healthy copy (kept while none exists).
	Damaged      []DamagedCopy `json:"damaged,omitempty"`
	DamagedTotal int           `json:"damaged_total"`
	// Problems are the segments the last heal plan could not heal.
	Problems      []HealProblem `json:"problems,omitempty"`
	ProblemsTotal int           `json:"problems_total"`
	// ScrubCopies are the sealed copies the answering node re-verifies
	// each scrub interval; ScrubBehind says its scrub rate is too low to
	// verify them all in one.
	ScrubCopies int  `json:"scrub_copies"`
	ScrubBehind bool `json:"scrub_behind,omitempty"`
}

// HealingCopy is a copy of Segment that Target fills from Source; Bytes
// it holds so far.
type HealingCopy struct {
	Segment uint64 `json:"segment"`
	Source  uint64 `json:"source"`
	Target  uint64 `json:"target"`
	Bytes   uint64 `json:"bytes"`
}

// DamagedCopy is Node's damaged (or missing) copy of Segment.
type DamagedCopy struct {
	Segment uint64 `json:"segment"`
	Node    uint64 `json:"node"`
}

// HealProblem is a segment the heal planner could not heal, and why
// (Problem: waiting, no healthy source, lost, no target...).
type HealProblem struct {
	Segment uint64 `json:"segment"`
	Problem string `json:"problem"`
	Detail  string `json:"detail,omitempty"`
}

// ClusterNode is one node: registered by the control plane, known to
// gossip, or both.
type ClusterNode struct {
	ID         uint64            `json:"id"`
	Registered bool              `json:"registered"`
	Liveness   string            `json:"liveness"` // alive, suspect, leaving, left, dead, unknown
	PeerAddr   string            `json:"peer_addr,omitempty"`
	GossipAddr string            `json:"gossip_addr,omitempty"`
	ClientAddr string            `json:"client_addr,omitempty"`
	HTTPAddr   string            `json:"http_addr,omitempty"`
	Attrs      map[string]string `json:"attrs,omitempty"`
	// Disk is the node's segment disk: ok, full (it takes no new
	// replicas) or failing; "" when unknown, or from a node older than
	// version 2 of cluster_status (which names a disk that is not ok in
	// Attrs, under malachi.disk).
	Disk string `json:"disk,omitempty"`
}

// ClusterGroup is one raft group of the control plane (the root, or a
// vnode) as the answering node's replica sees it.
type ClusterGroup struct {
	Group    uint64   `json:"group"`
	Name     string   `json:"name"`  // "root", "vnode-3"
	State    string   `json:"state"` // the replica's raft role
	Leader   uint64   `json:"leader"`
	Term     uint64   `json:"term"`
	Commit   uint64   `json:"commit"`
	Applied  uint64   `json:"applied"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
	// Placed is the committed voter set (growth, removals and applied
	// rebalances move it); Voters converge to it.
	Placed []uint64 `json:"placed,omitempty"`
}

// ClusterPeer is the answering node's traffic with one other node on the
// peer transport since it started (raft, forwarded requests, the data
// path). A frame is one message; Writes are the batched writes that
// carried the frames sent, so FramesSent/Writes is the batching factor.
// Two readings some seconds apart give the rates.
type ClusterPeer struct {
	Node           uint64 `json:"node"`
	Connected      bool   `json:"connected"`
	Writes         uint64 `json:"writes"`
	FramesSent     uint64 `json:"frames_sent"`
	BytesSent      uint64 `json:"bytes_sent"`
	FramesReceived uint64 `json:"frames_received"`
	BytesReceived  uint64 `json:"bytes_received"`
}

// ClusterStatus reports the cluster's nodes with their liveness and the
// control plane's groups with their leaders. It needs the admin
// permission.
func (c *Client) ClusterStatus(ctx context.Context) (ClusterStatus, error) {
	var resp wire.ClusterStatusResponse
	_, err := c.doPick(ctx, func(cn *conn) (request, error) {
		var req wire.ClusterStatusRequest
		if cn.wire.statusRepair {
			req.Flags = wire.FlagRepair
		}
		return request{req: req, resp: &resp, resend: true}, nil
	})
	if err != nil {
		return ClusterStatus{}, err
	}
	out := ClusterStatus{Node: resp.Node, Vnodes: int(resp.Vnodes), Repair: toRepair(resp.Repair)}
	for _, n := range resp.Nodes {
		cn := ClusterNode{
			ID: n.ID, Registered: n.Registered, Liveness: n.Liveness, PeerAddr: n.PeerAddr,
			GossipAddr: n.GossipAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr, Disk: n.Disk,
		}
		if len(n.Attrs) > 0 {
			cn.Attrs = make(map[string]string, len(n.Attrs))
			for _, a := range n.Attrs {
				cn.Attrs[a.Key] = a.Value
			}
		}
		out.Nodes = append(out.Nodes, cn)
	}
	for _, g := range resp.Groups {
		out.Groups = append(out.Groups, ClusterGroup{
			Group: g.Group, Name: g.Name, State: g.State, Leader: g.Leader, Term: g.Term, Commit: g.Commit,
			Applied: g.Applied, Voters: g.Voters, Learners: g.Learners, Placed: g.Placed,
		})
	}
	for _, p := range resp.Peers {
		out.Peers = append(out.Peers, ClusterPeer{
			Node: p.Node, Connected: p.Connected, Writes: p.Writes, FramesSent: p.FramesSent, BytesSent: p.BytesSent,
			FramesReceived: p.FramesReceived, BytesReceived: p.BytesReceived,
		})
	}
	return out, nil
}

func toRepair(w *wire.ClusterRepair) *ClusterRepair {
	if w == nil {
		return nil
	}
	r := &ClusterRepair{
		UnderReplicatedTotal: int(w.UnderReplicatedTotal), HealingTotal: int(w.HealingTotal),
		DamagedTotal: int(w.DamagedTotal), ProblemsTotal: int(w.ProblemsTotal),
		ScrubCopies: int(w.ScrubCopies), ScrubBehind: w.ScrubBehind,
	}
	for _, t := range w.UnderReplicated {
		r.UnderReplicated = append(r.UnderReplicated, UnderReplicatedTopic{Topic: t.Topic, Segments: int(t.Segments)})
	}
	for _, s := range w.UnderReplicatedSegments {
		r.UnderReplicatedSegments = append(r.UnderReplicatedSegments, UnderReplicatedSegment{
			Topic: s.Topic, Range: s.Range, Segment: s.Segment, Active: s.Active, Replicas: s.Replicas,
			Live: int(s.Live), Factor: int(s.Factor),
		})
	}
	for _, h := range w.Healing {
		r.Healing = append(r.Healing, HealingCopy(h))
	}
	for _, d := range w.Damaged {
		r.Damaged = append(r.Damaged, DamagedCopy(d))
	}
	for _, p := range w.Problems {
		r.Problems = append(r.Problems, HealProblem(p))
	}
	return r
}

// RemoveNode takes node out of the cluster for good: the control plane
// moves its metadata replicas to the other nodes and forgets it. Ask
// another node than the one removed (a node cannot remove itself:
// ErrInvalidCommand). A single node answers ErrNotEnabled. It needs the
// admin permission. A removal that did not finish in the node's time
// answers ErrMetadataUnavailable and carries on; asking again is safe.
func (c *Client) RemoveNode(ctx context.Context, node uint64) error {
	return c.do(ctx, request{req: wire.ClusterRemoveRequest{Node: node}, resend: true})
}

// RebalancePlan is a rebalance of the metadata groups as the root
// group's leader staged it: for every group, the voters placement picks
// over the live nodes and a leader chosen so that each live node leads
// about as many groups, with the moves from the present configuration.
// The JSON field names are stable, for `malachi cluster rebalance -o json`.
type RebalancePlan struct {
	Applied bool             `json:"applied"` // the plan was committed
	Nodes   []RebalanceNode  `json:"nodes"`
	Groups  []RebalanceGroup `json:"groups"`
}

// RebalanceNode is one registered node in a plan: whether the root's
// leader hears from it, and the groups it votes in and leads, now and
// once the plan is carried out.
type RebalanceNode struct {
	ID         uint64 `json:"id"`
	Live       bool   `json:"live"`
	Voter      int    `json:"voter"`
	VoterAfter int    `json:"voter_after"`
	Leads      int    `json:"leads"`
	LeadsAfter int    `json:"leads_after"`
}

// RebalanceGroup is one metadata group in a plan. Add and Remove are the
// voters it gains and loses (added first, removed after); NewLeader is
// the leader the plan picks (0: no live voter). Held, when set, says why
// the group's voters stay: a move would leave them without a live quorum.
type RebalanceGroup struct {
	Group     uint64   `json:"group"`
	Name      string   `json:"name"`
	Voters    []uint64 `json:"voters"`
	Target    []uint64 `json:"target"`
	Add       []uint64 `json:"add,omitempty"`
	Remove    []uint64 `json:"remove,omitempty"`
	Leader    uint64   `json:"leader"`
	NewLeader uint64   `json:"new_leader"`
	Held      string   `json:"held,omitempty"`
}

// Moves counts the voter changes and leadership changes the plan makes.
func (p *RebalancePlan) Moves() int {
	n := 0
	for _, g := range p.Groups {
		n += len(g.Add) + len(g.Remove)
		if g.NewLeader != 0 && g.NewLeader != g.Leader {
			n++
		}
	}
	return n
}

// Rebalance returns the cluster's rebalance plan and, with apply,
// commits it: the metadata groups' leaders then move the voters (adding
// before removing, never leaving a group without a live quorum) and hand
// leadership to the chosen voters. It returns once the plan is committed;
// ClusterStatus shows the progress. A single node answers ErrNotEnabled;
// a root group without a quorum ErrMetadataUnavailable (an apply may then
// have been committed: ask for the plan again). It needs the admin
// permission.
func (c *Client) Rebalance(ctx context.Context, apply bool) (RebalancePlan, error) {
	var resp wire.ClusterRebalanceResponse
	if err := c.do(ctx, request{req: wire.ClusterRebalanceRequest{Apply: apply}, resp: &resp, resend: true}); err != nil {
		return RebalancePlan{}, err
	}
	out := RebalancePlan{Applied: resp.Applied}
	for _, n := range resp.Nodes {
		out.Nodes = append(out.Nodes, RebalanceNode{
			ID: n.ID, Live: n.Live, Voter: int(n.Voter), VoterAfter: int(n.VoterAfter), Leads: int(n.Leads), LeadsAfter: int(n.LeadsAfter),
		})
	}
	for _, g := range resp.Groups {
		out.Groups = append(out.Groups, RebalanceGroup{
			Group: g.Group, Name: g.Name, Voters: g.Voters, Target: g.Target, Add: g.Add, Remove: g.Remove,
			Leader: g.Leader, NewLeader: g.NewLeader, Held: g.Held,
		})
	}
	return out, nil
}

// UnderReplicatedTopic counts a topic's segments with fewer live replicas
// than their replica set holds.
type UnderReplicatedTopic struct {
	Topic    string `json:"topic"`
	Segments int    `json:"segments"`
}

// UnderReplicatedSegment is one segment, active or sealed, some of whose
// replicas are not live in a ClusterStatus.
type UnderReplicatedSegment struct {
	Topic    string   `json:"topic"`
	Range    uint64   `json:"range"`
	Segment  uint64   `json:"segment"`
	Active   bool     `json:"active"`
	Replicas []string `json:"replicas"`
	Live     int      `json:"live"`
	// Factor is the copies the segment should have, as the answering
	// node counts them (ClusterRepair); 0 when UnderReplicated computed
	// the segment here.
	Factor int `json:"factor,omitempty"`
}

// UnderReplicated finds, in topics, the segments (active or sealed) with
// fewer live replicas than their replica set, a node being live when st
// says it is alive, suspect or leaving. It counts them per topic, in the
// order of topics, and lists the first limit of them. The answer is
// computed here from what the wire carries: a segment placed with fewer
// replicas than its topic's factor (too few nodes were live when it
// opened) is not seen; the node's own view counts it too
// (broker.ClusterStatus).
func UnderReplicated(st ClusterStatus, topics []TopicDescription, limit int) ([]UnderReplicatedTopic, []UnderReplicatedSegment) {
	live := map[string]bool{}
	for _, n := range st.Nodes {
		switch n.Liveness {
		case "alive", "suspect", "leaving":
			live["node-"+strconv.FormatUint(n.ID, 10)] = true
		}
	}
	var (
		counts []UnderReplicatedTopic
		listed []UnderReplicatedSegment
	)
	for i := range topics {
		d := &topics[i]
		n := 0
		for _, r := range d.Ranges {
			for _, s := range r.Segments {
				up := 0
				for _, name := range s.Replicas {
					if live[name] {
						up++
					}
				}
				if up >= len(s.Replicas) {
					continue
				}
				n++
				if len(listed) < limit {
					listed = append(listed, UnderReplicatedSegment{Topic: d.Name, Range: r.ID, Segment: s.ID,
						Active: s.Active, Replicas: s.Replicas, Live: up})
				}
			}
		}
		if n > 0 {
			counts = append(counts, UnderReplicatedTopic{Topic: d.Name, Segments: n})
		}
	}
	return counts, listed
}
