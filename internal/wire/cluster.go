package wire

// Cluster administration, keys 87–89 (admin only). cluster_status reports
// the node's view of the cluster: the nodes the control plane registered
// (and those gossip knows of but are not registered yet) with their
// liveness, the raft groups of the control plane, and the traffic with
// each other node; cluster_remove takes a node out of the cluster for
// good; cluster_rebalance shows, or commits, the plan that moves the
// metadata groups' voters and leaders into balance. Layouts in
// docs/wire.md.

// newClusterRequest returns a zero request of key's type, or nil.
func newClusterRequest(key uint16) requestDecoder {
	switch key {
	case KeyClusterStatus:
		return new(ClusterStatusRequest)
	case KeyClusterRemove:
		return new(ClusterRemoveRequest)
	case KeyClusterRebalance:
		return new(ClusterRebalanceRequest)
	}
	return nil
}

// ClusterStatusRequest (key 87): [flags:u8]; ClusterStatusResponse
// answers. Flags (version 2 of the key) is sent only when not zero, so a
// request without it is the original empty payload; FlagRepair asks the
// answer to end with the repair section.
type ClusterStatusRequest struct{ Flags uint8 }

func (ClusterStatusRequest) APIKey() uint16 { return KeyClusterStatus }

func (r ClusterStatusRequest) AppendPayload(dst []byte) []byte { return appendFlags(dst, r.Flags) }

func (r *ClusterStatusRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ClusterStatusRequest{Flags: d.flags(KeyClusterStatus)}
	return d.finish("cluster_status")
}

// WantsRepair reports whether the request set FlagRepair.
func (r ClusterStatusRequest) WantsRepair() bool { return r.Flags&FlagRepair != 0 }

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
// list(ClusterNode) list(ClusterGroup) list(ClusterPeer) [repair]. Node
// is the answering node's id (0 on a single node), Vnodes the ring size
// (0 on a single node). Repair is the trailing section a request with
// FlagRepair gets (ClusterRepair); nil, the answer is the older layout
// byte for byte, and the nodes' Disk is not carried.
type ClusterStatusResponse struct {
	Node   uint64
	Vnodes uint32
	Nodes  []ClusterNode
	Groups []ClusterGroup
	Peers  []ClusterPeer
	Repair *ClusterRepair
}

// ClusterPeer is the answering node's traffic with one other node on the
// peer transport since it started: node:u64 bool(connected) writes:u64
// frames_sent:u64 bytes_sent:u64 frames_received:u64 bytes_received:u64.
// A frame is one message; writes are the batched writes that carried the
// frames sent.
type ClusterPeer struct {
	Node                          uint64
	Connected                     bool
	Writes, FramesSent, BytesSent uint64
	FramesReceived, BytesReceived uint64
}

// ClusterNode is one node: id:u64 bool(registered) str(liveness)
// str(peer_addr) str(gossip_addr) str(client_addr) str(http_addr)
// list(str key, str value). Registered says the control plane counts it
// as a member; Liveness is what gossip says ("alive", "suspect",
// "leaving", "left", "dead", or "unknown" when gossip has not heard of
// it). Attributes are sorted by key. Disk (ok, full, failing; empty when
// unknown) travels in the repair section, so only with it.
type ClusterNode struct {
	ID                                         uint64
	Registered                                 bool
	Liveness                                   string
	PeerAddr, GossipAddr, ClientAddr, HTTPAddr string
	Attrs                                      []ClusterAttr
	Disk                                       string
}

// ClusterAttr is one placement attribute of a node.
type ClusterAttr struct{ Key, Value string }

// ClusterGroup is one raft group of the control plane as the answering
// node's replica sees it: group:u64 str(name) str(state) leader:u64
// term:u64 commit:u64 applied:u64 list(u64 voters) list(u64 learners)
// list(u64 placed). Placed is the committed voter set (growth, removals
// and applied rebalances move it), which the voters converge to.
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
	minClusterPeerLen  = 8 + 1 + 5*8
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
	dst = appendU32(dst, uint32(len(r.Peers)))
	for _, p := range r.Peers {
		dst = appendBool(appendU64(dst, p.Node), p.Connected)
		for _, v := range []uint64{p.Writes, p.FramesSent, p.BytesSent, p.FramesReceived, p.BytesReceived} {
			dst = appendU64(dst, v)
		}
	}
	if r.Repair != nil {
		dst = r.Repair.appendTo(dst, r.Nodes)
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
	r.Peers = list(&d, minClusterPeerLen, func() ClusterPeer {
		p := ClusterPeer{Node: d.u64(), Connected: d.boolean()}
		p.Writes, p.FramesSent, p.BytesSent, p.FramesReceived, p.BytesReceived = d.u64(), d.u64(), d.u64(), d.u64(), d.u64()
		return p
	})
	if len(d.b) > 0 {
		r.Repair = new(ClusterRepair)
		r.Repair.decode(&d, r.Nodes)
	}
	return d.finish("cluster_status response")
}

// ClusterRebalanceRequest (key 89): bool(apply). Without apply the node
// answers the plan the root group's leader stages; with apply the plan is
// also committed, and the metadata groups' leaders carry it out.
// ClusterRebalanceResponse answers.
type ClusterRebalanceRequest struct{ Apply bool }

func (ClusterRebalanceRequest) APIKey() uint16 { return KeyClusterRebalance }

func (r ClusterRebalanceRequest) AppendPayload(dst []byte) []byte { return appendBool(dst, r.Apply) }

func (r *ClusterRebalanceRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ClusterRebalanceRequest{Apply: d.boolean()}
	return d.finish("cluster_rebalance")
}

// ClusterRebalanceResponse answers cluster_rebalance (89): bool(applied)
// list(RebalanceNode) list(RebalanceGroup). Applied says the plan was
// committed.
type ClusterRebalanceResponse struct {
	Applied bool
	Nodes   []RebalanceNode
	Groups  []RebalanceGroup
}

// RebalanceNode is one registered node in a plan: id:u64 bool(live)
// voter:u32 voter_after:u32 leads:u32 leads_after:u32, the groups it
// votes in and leads now and once the plan is carried out.
type RebalanceNode struct {
	ID                                   uint64
	Live                                 bool
	Voter, VoterAfter, Leads, LeadsAfter uint32
}

// RebalanceGroup is one metadata group in a plan: group:u64 str(name)
// list(u64 voters) list(u64 target) list(u64 add) list(u64 remove)
// leader:u64 new_leader:u64 str(held). Held, when not empty, says why
// the group's voters stay as they are.
type RebalanceGroup struct {
	Group                       uint64
	Name                        string
	Voters, Target, Add, Remove []uint64
	Leader, NewLeader           uint64
	Held                        string
}

const (
	minRebalanceNodeLen  = 8 + 1 + 4*4
	minRebalanceGroupLen = 8 + minPresent + 4*4 + 2*8 + minPresent
)

func (r ClusterRebalanceResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(appendBool(dst, r.Applied), uint32(len(r.Nodes)))
	for _, n := range r.Nodes {
		dst = appendBool(appendU64(dst, n.ID), n.Live)
		for _, v := range []uint32{n.Voter, n.VoterAfter, n.Leads, n.LeadsAfter} {
			dst = appendU32(dst, v)
		}
	}
	dst = appendU32(dst, uint32(len(r.Groups)))
	for _, g := range r.Groups {
		dst = appendString(appendU64(dst, g.Group), g.Name)
		dst = appendU64s(appendU64s(appendU64s(appendU64s(dst, g.Voters), g.Target), g.Add), g.Remove)
		dst = appendString(appendU64(appendU64(dst, g.Leader), g.NewLeader), g.Held)
	}
	return dst
}

func (r *ClusterRebalanceResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ClusterRebalanceResponse{Applied: d.boolean()}
	r.Nodes = list(&d, minRebalanceNodeLen, func() RebalanceNode {
		n := RebalanceNode{ID: d.u64(), Live: d.boolean()}
		n.Voter, n.VoterAfter, n.Leads, n.LeadsAfter = d.u32(), d.u32(), d.u32(), d.u32()
		return n
	})
	r.Groups = list(&d, minRebalanceGroupLen, func() RebalanceGroup {
		g := RebalanceGroup{Group: d.u64(), Name: d.str()}
		g.Voters, g.Target, g.Add, g.Remove = d.u64s(), d.u64s(), d.u64s(), d.u64s()
		g.Leader, g.NewLeader, g.Held = d.u64(), d.u64(), d.str()
		return g
	})
	return d.finish("cluster_rebalance response")
}
