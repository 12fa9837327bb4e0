package broker

import (
	"context"
	"maps"
	"slices"

	"github.com/malachi-log/malachi/internal/control"
)

// RebalancePlan is a rebalance as the root group's leader staged it
// (control.Plan): the voters each metadata group needs to reach
// placement over the live nodes, the leader that spreads leadership, and
// the moves from the groups' present configuration.
type RebalancePlan = control.Plan

// Rebalance shows, and with apply commits, the cluster's rebalance plan
// (see control.Node.Rebalance): committed, the metadata groups' leaders
// carry it out (add before remove, a live quorum kept at every step) and
// hand leadership to the chosen voters. It waits up to two
// MetadataTimeouts; past them, or without a quorum in the root group, it
// answers metadata_unavailable (an apply may then have been committed:
// plan again to see). A single node answers ErrNotEnabled.
func (b *Broker) Rebalance(ctx context.Context, apply bool) (RebalancePlan, error) {
	if b.cluster == nil {
		return RebalancePlan{}, ErrNotEnabled
	}
	ctx, cancel := context.WithTimeout(ctx, 2*b.cluster.cfg.MetadataTimeout)
	defer cancel()
	p, err := b.cluster.ctl.Rebalance(ctx, apply)
	return p, metaError(err)
}

// ClusterPeer is the traffic between this node and one other node on the
// peer transport since this node started: raft frames, forwarded
// requests and the data path. A frame is one message (a one-way frame, a
// request or a response); Writes are the batched writes that carried the
// frames sent, so FramesSent/Writes is the batching factor.
type ClusterPeer struct {
	Node           uint64 `json:"node"`
	Connected      bool   `json:"connected"` // an outbound connection is up
	Writes         uint64 `json:"writes"`
	FramesSent     uint64 `json:"frames_sent"`
	BytesSent      uint64 `json:"bytes_sent"`
	FramesReceived uint64 `json:"frames_received"`
	BytesReceived  uint64 `json:"bytes_received"`
}

// peerStats reads the transport's counters, by node id.
func (c *clusterNode) peerStats() []ClusterPeer {
	if c.tr == nil {
		return nil
	}
	st := c.tr.Stats()
	out := make([]ClusterPeer, 0, len(st.Nodes))
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		ns := st.Nodes[id]
		out = append(out, ClusterPeer{
			Node: id, Connected: ns.Connected, Writes: ns.Writes, FramesSent: ns.FramesSent, BytesSent: ns.BytesSent,
			FramesReceived: ns.FramesReceived, BytesReceived: ns.BytesReceived,
		})
	}
	return out
}
