package server

import (
	"maps"
	"slices"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Audit events of cluster administration: cluster_remove's target is the
// removed node's id; an applied cluster_rebalance's is "cluster", with
// the count of moves the plan makes.
const (
	auditNodeRemoved = "node_removed"
	auditRebalanced  = "cluster_rebalanced"
)

// clusterStatus encodes the broker's cluster status for cluster_status
// (87), attributes sorted by key.
func clusterStatus(s broker.ClusterStatus) *wire.ClusterStatusResponse {
	resp := &wire.ClusterStatusResponse{Node: s.Node, Vnodes: uint32(s.Vnodes)}
	for _, n := range s.Nodes {
		wn := wire.ClusterNode{
			ID: n.ID, Registered: n.Registered, Liveness: n.Liveness, PeerAddr: n.PeerAddr,
			GossipAddr: n.GossipAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr,
		}
		for _, k := range slices.Sorted(maps.Keys(n.Attrs)) {
			wn.Attrs = append(wn.Attrs, wire.ClusterAttr{Key: k, Value: n.Attrs[k]})
		}
		resp.Nodes = append(resp.Nodes, wn)
	}
	for _, g := range s.Groups {
		resp.Groups = append(resp.Groups, wire.ClusterGroup{
			Group: g.Group, Name: g.Name, State: g.State, Leader: g.Leader, Term: g.Term, Commit: g.Commit,
			Applied: g.Applied, Voters: g.Voters, Learners: g.Learners, Placed: g.Placed,
		})
	}
	for _, p := range s.Peers {
		resp.Peers = append(resp.Peers, wire.ClusterPeer{
			Node: p.Node, Connected: p.Connected, Writes: p.Writes, FramesSent: p.FramesSent, BytesSent: p.BytesSent,
			FramesReceived: p.FramesReceived, BytesReceived: p.BytesReceived,
		})
	}
	return resp
}

// rebalancePlan encodes a rebalance plan for cluster_rebalance (89).
func rebalancePlan(p broker.RebalancePlan) *wire.ClusterRebalanceResponse {
	resp := &wire.ClusterRebalanceResponse{Applied: p.Applied}
	for _, n := range p.Nodes {
		resp.Nodes = append(resp.Nodes, wire.RebalanceNode{
			ID: n.ID, Live: n.Live, Voter: uint32(n.Voter), VoterAfter: uint32(n.VoterAfter),
			Leads: uint32(n.Leads), LeadsAfter: uint32(n.LeadsAfter),
		})
	}
	for _, g := range p.Groups {
		resp.Groups = append(resp.Groups, wire.RebalanceGroup{
			Group: g.Group, Name: g.Name, Voters: g.Voters, Target: g.Target, Add: g.Add, Remove: g.Remove,
			Leader: g.Leader, NewLeader: g.NewLeader, Held: g.Held,
		})
	}
	return resp
}
