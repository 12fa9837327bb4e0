package server

import (
	"maps"
	"slices"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// auditNodeRemoved is the audit event of cluster_remove; its target is
// the removed node's id.
const auditNodeRemoved = "node_removed"

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
	return resp
}
