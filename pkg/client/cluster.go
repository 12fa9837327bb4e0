package client

import (
	"context"

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
	// Placed is the voter set placement picks; Voters converge to it.
	Placed []uint64 `json:"placed,omitempty"`
}

// ClusterStatus reports the cluster's nodes with their liveness and the
// control plane's groups with their leaders. It needs the admin
// permission.
func (c *Client) ClusterStatus(ctx context.Context) (ClusterStatus, error) {
	var resp wire.ClusterStatusResponse
	if err := c.do(ctx, request{req: wire.ClusterStatusRequest{}, resp: &resp, resend: true}); err != nil {
		return ClusterStatus{}, err
	}
	out := ClusterStatus{Node: resp.Node, Vnodes: int(resp.Vnodes)}
	for _, n := range resp.Nodes {
		cn := ClusterNode{
			ID: n.ID, Registered: n.Registered, Liveness: n.Liveness, PeerAddr: n.PeerAddr,
			GossipAddr: n.GossipAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr,
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
	return out, nil
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
