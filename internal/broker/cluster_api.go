package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/membership"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// Reasons of a cluster node. Their text is the wire reason.
var (
	// ErrNotOwner: a split or merge asked of a node that does not write
	// the range (produces and fetches are served through any node: see
	// cluster_data.go). Retriable: the client may ask the owner, whose
	// address the error names (NotOwnerError). Inside the broker it also
	// tells a write head that another node writes its range.
	ErrNotOwner = errors.New("not_owner")
	// ErrMetadataUnavailable: the metadata group the request needs had no
	// leader with a quorum within the node's MetadataTimeout. Retriable;
	// a write may or may not have taken effect.
	ErrMetadataUnavailable = errors.New("metadata_unavailable")
)

// NotOwnerError says which node holds the segment a request needs.
// errors.Is(err, ErrNotOwner) holds.
type NotOwnerError struct {
	Segment    uint64
	Node       string // "node-<id>"
	ClientAddr string // the owner's client address, "" when gossip does not know it
}

func (e *NotOwnerError) Error() string {
	hint := "its client address is unknown here"
	if e.ClientAddr != "" {
		hint = "connect to " + e.ClientAddr
	}
	return fmt.Sprintf("not_owner: segment %d is on %s (%s)", e.Segment, e.Node, hint)
}

func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// holds reports whether this node keeps seg's data. A single node keeps
// everything; a cluster node the segments whose replicas name it (a
// segment with no replica list was opened by a single node).
func (b *Broker) holds(seg metadata.Segment) bool {
	return b.cluster == nil || len(seg.Replicas) == 0 || slices.Contains(seg.Replicas, b.cfg.NodeID)
}

// local returns a NotOwnerError when seg's data is on another node.
func (b *Broker) local(seg metadata.Segment) error {
	if b.holds(seg) {
		return nil
	}
	e := &NotOwnerError{Segment: seg.ID, Node: seg.Replicas[0]}
	if id := nodeOfName(e.Node); id != 0 {
		for _, m := range b.cluster.gossip.Members() {
			if m.ID == id {
				e.ClientAddr = m.ClientAddr
			}
		}
	}
	return e
}

// metaError maps a control plane failure to the broker's reasons: no
// quorum in time (or no cluster yet) is metadata_unavailable.
func metaError(err error) error {
	if errors.Is(err, control.ErrUnavailable) || errors.Is(err, control.ErrNotJoined) {
		return fmt.Errorf("%w: %w", ErrMetadataUnavailable, err)
	}
	return err
}

// ClusterStatus is the cluster as this node sees it: what `malachi
// cluster status` shows.
type ClusterStatus struct {
	Node   uint64         `json:"node"`   // this node's id; 0 on a single node
	Vnodes int            `json:"vnodes"` // ring size; 0 on a single node
	Nodes  []ClusterNode  `json:"nodes"`
	Groups []ClusterGroup `json:"groups"`
	Peers  []ClusterPeer  `json:"peers,omitempty"` // traffic with each other node
	// UnderReplicated counts, per topic, the segments (active or sealed)
	// with fewer live replicas than their factor, in this node's view;
	// UnderReplicatedSegments lists the first MaxUnderReplicatedListed.
	UnderReplicated         []UnderReplicatedTopic   `json:"under_replicated,omitempty"`
	UnderReplicatedSegments []UnderReplicatedSegment `json:"under_replicated_segments,omitempty"`
	// Heal is repair in this node's view: the copies it is filling, the
	// damaged copies nodes report, and the segments its last plan could
	// not heal (cluster_scrub.go).
	Heal *HealStatus `json:"heal,omitempty"`
	// HealingBytes is how many bytes of each copy in Heal.Healing this
	// node's store holds so far, by segment (absent: none written yet).
	HealingBytes map[uint64]uint64 `json:"healing_bytes,omitempty"`
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
	// Disk is the node's segment disk: ok, full or failing (this node's
	// from its store, another's from gossip; empty when gossip does not
	// know the node). A state other than ok is also in Attrs, under
	// malachi.disk, which the wire already carries.
	Disk string `json:"disk,omitempty"`
}

// ClusterGroup is one raft group of the control plane on this node, as
// the control plane reports it.
type ClusterGroup = control.GroupStatus

// ClusterStatus reports the registered and gossiped nodes with their
// liveness, and every control plane group. A single node answers itself
// alone, alive, with no groups.
func (b *Broker) ClusterStatus() ClusterStatus {
	if b.cluster == nil {
		return ClusterStatus{Nodes: []ClusterNode{{ID: singleNodeID(b.cfg.NodeID), Registered: true,
			Liveness: membership.StateAlive.String(), Disk: b.store.DiskState().String()}}}
	}
	c := b.cluster
	st := c.ctl.Status()
	out := ClusterStatus{Node: st.Node, Vnodes: st.Vnodes}
	byID := map[uint64]*ClusterNode{}
	for _, r := range st.Nodes {
		n := &ClusterNode{ID: r.ID, Registered: true, Liveness: "unknown", PeerAddr: r.Addr, Attrs: maps.Clone(r.Attrs)}
		byID[r.ID] = n
	}
	for _, m := range c.gossip.Members() {
		n := byID[m.ID]
		if n == nil {
			n = &ClusterNode{ID: m.ID, PeerAddr: m.PeerAddr, Attrs: maps.Clone(m.Attributes)}
			byID[m.ID] = n
		}
		n.Liveness, n.GossipAddr, n.ClientAddr, n.HTTPAddr = m.State.String(), m.GossipAddr, m.ClientAddr, m.HTTPAddr
		n.Disk = diskStateOf(m.Attributes).String()
	}
	if n := byID[c.cfg.NodeID]; n != nil {
		n.Disk = b.store.DiskState().String()
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		n := byID[id]
		if n.Disk != "" && n.Disk != storage.DiskOK.String() {
			if n.Attrs == nil {
				n.Attrs = map[string]string{}
			}
			n.Attrs[diskAttr] = n.Disk
		}
		out.Nodes = append(out.Nodes, *n)
	}
	out.Peers = c.peerStats()
	out.Groups = st.Groups
	out.UnderReplicated, out.UnderReplicatedSegments = b.underReplicated()
	hs := b.healStatus()
	out.Heal = &hs
	out.HealingBytes = b.healingBytes(hs.Healing)
	return out
}

// healingBytes is how much of each copy it fills this node holds.
func (b *Broker) healingBytes(healing []HealingSegment) map[uint64]uint64 {
	out := make(map[uint64]uint64, len(healing))
	for _, h := range healing {
		if info, err := b.store.Info(storage.SegmentID(h.Segment)); err == nil {
			out[h.Segment] = uint64(info.Bytes)
		}
	}
	return out
}

// RemoveNode takes a node out of the cluster for good (a node that left,
// or lost its data directory): the control plane moves its replicas to
// the other nodes and forgets it. It must be asked of another node than
// the one removed. It returns once this node's replicas no longer list
// the node, or metadata_unavailable when that takes longer than four
// MetadataTimeouts (the removal then carries on). The registry records
// the node removed, so the heal counts its segment copies dead at once
// and copies them back to their factor from the other replicas.
func (b *Broker) RemoveNode(ctx context.Context, id uint64) error {
	if b.cluster == nil {
		return ErrNotEnabled
	}
	if id == 0 || id == b.cluster.cfg.NodeID {
		return fmt.Errorf("%w: a node cannot remove itself (or node 0); ask another node", metadata.ErrInvalidCommand)
	}
	ctx, cancel := context.WithTimeout(ctx, 4*b.cluster.cfg.MetadataTimeout)
	defer cancel()
	err := b.cluster.ctl.Remove(ctx, id)
	if err != nil && !errors.Is(err, control.ErrUnavailable) && !errors.Is(err, control.ErrClosed) && strings.Contains(err.Error(), "control: remove node") {
		return fmt.Errorf("%w: %w", metadata.ErrInvalidCommand, err)
	}
	return metaError(err)
}
