package wire

// Cluster administration, keys 87–88 (admin only). cluster_status reports
// the node's view of the cluster: the nodes the control plane registered
// (and those gossip knows of but are not registered yet) with their
// liveness, and the raft groups of the control plane; cluster_remove takes
// a node out of the cluster for good. Layouts in docs/wire.md.

// newClusterRequest returns a zero request of key's type, or nil.
func newClusterRequest(key uint16) requestDecoder {
	switch key {
	case KeyClusterStatus:
		return new(ClusterStatusRequest)
	case KeyClusterRemove:
		return new(ClusterRemoveRequest)
	}
	return nil
}

// ClusterStatusRequest (key 87) has an empty payload;
// ClusterStatusResponse answers.
type ClusterStatusRequest struct{}

func (ClusterStatusRequest) APIKey() uint16                  { return KeyClusterStatus }
func (ClusterStatusRequest) AppendPayload(dst []byte) []byte { return dst }
func (*ClusterStatusRequest) Decode(payload []byte) error {
	return decodeEmpty(payload, "cluster_status")
}

// ClusterRemoveRequest (key 88): node:u64, the id of the node to remove.
// The answer is empty.
type ClusterRemoveRequest struct{ Node uint64 }

func (ClusterRemoveRequest) APIKey() uint16 { return KeyClusterRemove }

func (r ClusterRemoveRequest) AppendPayload(dst []byte) []byte { return appendU64(dst, r.Node) }

func (r *ClusterRemoveRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ClusterRemoveRequest{Node: d.u64()}
	return d.finish("cluster_remove")
}

// ClusterStatusResponse answers cluster_status (87): node:u64 vnodes:u32
// list(ClusterNode) list(ClusterGroup). Node is the answering node's id
// (0 on a single node), Vnodes the ring size (0 on a single node).
type ClusterStatusResponse struct {
	Node   uint64
	Vnodes uint32
	Nodes  []ClusterNode
	Groups []ClusterGroup
}

// ClusterNode is one node: id:u64 bool(registered) str(liveness)
// str(peer_addr) str(gossip_addr) str(client_addr) str(http_addr)
// list(str key, str value). Registered says the control plane counts it
// as a member; Liveness is what gossip says ("alive", "suspect",
// "leaving", "left", "dead", or "unknown" when gossip has not heard of
// it). Attributes are sorted by key.
type ClusterNode struct {
	ID                                         uint64
	Registered                                 bool
	Liveness                                   string
	PeerAddr, GossipAddr, ClientAddr, HTTPAddr string
	Attrs                                      []ClusterAttr
}

// ClusterAttr is one placement attribute of a node.
type ClusterAttr struct{ Key, Value string }

// ClusterGroup is one raft group of the control plane as the answering
// node's replica sees it: group:u64 str(name) str(state) leader:u64
// term:u64 commit:u64 applied:u64 list(u64 voters) list(u64 learners)
// list(u64 placed). Placed is the voter set placement picks, which the
// voters converge to.
type ClusterGroup struct {
	Group                         uint64
	Name, State                   string
	Leader, Term, Commit, Applied uint64
	Voters, Learners, Placed      []uint64
}

const (
	minClusterNodeLen  = 8 + 1 + 5*minPresent + 4
	minClusterGroupLen = 8 + 2*minPresent + 4*8 + 3*4
	minClusterAttrLen  = 2 * minPresent
)

func (r ClusterStatusResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(appendU64(dst, r.Node), r.Vnodes)
	dst = appendU32(dst, uint32(len(r.Nodes)))
	for _, n := range r.Nodes {
		dst = appendBool(appendU64(dst, n.ID), n.Registered)
		for _, s := range []string{n.Liveness, n.PeerAddr, n.GossipAddr, n.ClientAddr, n.HTTPAddr} {
			dst = appendString(dst, s)
		}
		dst = appendU32(dst, uint32(len(n.Attrs)))
		for _, a := range n.Attrs {
			dst = appendString(appendString(dst, a.Key), a.Value)
		}
	}
	dst = appendU32(dst, uint32(len(r.Groups)))
	for _, g := range r.Groups {
		dst = appendString(appendString(appendU64(dst, g.Group), g.Name), g.State)
		dst = appendU64(appendU64(appendU64(appendU64(dst, g.Leader), g.Term), g.Commit), g.Applied)
		dst = appendU64s(appendU64s(appendU64s(dst, g.Voters), g.Learners), g.Placed)
	}
	return dst
}

func (r *ClusterStatusResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ClusterStatusResponse{Node: d.u64(), Vnodes: d.u32()}
	r.Nodes = list(&d, minClusterNodeLen, func() ClusterNode {
		n := ClusterNode{ID: d.u64(), Registered: d.boolean()}
		n.Liveness, n.PeerAddr, n.GossipAddr, n.ClientAddr, n.HTTPAddr = d.str(), d.str(), d.str(), d.str(), d.str()
		n.Attrs = list(&d, minClusterAttrLen, func() ClusterAttr { return ClusterAttr{Key: d.str(), Value: d.str()} })
		return n
	})
	r.Groups = list(&d, minClusterGroupLen, func() ClusterGroup {
		g := ClusterGroup{Group: d.u64(), Name: d.str(), State: d.str()}
		g.Leader, g.Term, g.Commit, g.Applied = d.u64(), d.u64(), d.u64(), d.u64()
		g.Voters, g.Learners, g.Placed = d.u64s(), d.u64s(), d.u64s()
		return g
	})
	return d.finish("cluster_status response")
}
