package broker

import (
	"crypto/tls"
	"time"
)

// ClusterConfig makes the node one member of a cluster: its metadata goes
// through the control plane (internal/control: Raft groups sharded into
// vnodes) instead of the local metadata store, it talks to other nodes on
// the peer port and learns who is alive by gossip. Nil in Config keeps the
// single-node mode on the local metadata store.
type ClusterConfig struct {
	// NodeID is this node's id in the cluster (> 0, unique, never reused
	// for a node that lost its data directory).
	NodeID uint64
	// PeerListen is the node-to-node address to listen on; PeerAdvertise
	// is the one other nodes dial (default PeerListen).
	PeerListen, PeerAdvertise string
	// GossipListen is the membership (SWIM) address, UDP and TCP on one
	// port; GossipAdvertise is the one other nodes gossip to (default
	// GossipListen).
	GossipListen, GossipAdvertise string
	// ClientAdvertise and HTTPAdvertise are published in the node's
	// membership record so that clients and operators can be pointed at
	// it.
	ClientAdvertise, HTTPAdvertise string
	// Join lists gossip addresses of nodes already in the cluster. Empty
	// with an empty data directory: bootstrap a cluster of one.
	Join []string
	// Attrs are the node's placement attributes (rack, zone).
	Attrs map[string]string
	// Vnodes is the ring size a bootstrapping node creates (default 8);
	// Factor the voters per vnode (default 3, clamped to the node count).
	Vnodes, Factor int
	// PeerTLS, when set, is used for every peer connection in both
	// directions: each side requires and verifies the other's
	// certificate.
	PeerTLS *tls.Config
	// TickInterval is one Raft tick (default 100 ms).
	TickInterval time.Duration
	// MetadataTimeout bounds each metadata write a request makes (and
	// the broker's own, such as a roll): without a quorum it fails with
	// the retriable metadata_unavailable after this long instead of
	// waiting. Default 5 s.
	MetadataTimeout time.Duration
	// JoinTimeout bounds how long Open tries to gossip in, be registered
	// by the cluster and receive its metadata. Default 2 min.
	JoinTimeout time.Duration
	// Data bounds the data path between nodes: forwarded produces,
	// remote reads, and the interest that wakes readers across nodes.
	Data DataLimits
	// SegmentReplicas is the replication factor of a new segment when its
	// topic sets none (default 3). A segment is placed on that many live
	// nodes, fewer when fewer are registered; with fewer live nodes than
	// a majority of it, no segment opens (the produce answers a retriable
	// reason). 1 keeps each segment on the node that opened it.
	SegmentReplicas int
	// AutoRebalance lets the cluster apply a rebalance by itself once its
	// nodes, and which of them are live, have not changed for
	// RebalanceStable (default 5 min); off, only an operator's
	// `malachi cluster rebalance --apply` moves voters for balance.
	AutoRebalance   bool
	RebalanceStable time.Duration
	// Heal paces self-healing and scrubbing (cluster_heal.go,
	// cluster_scrub.go).
	Heal HealConfig
}

// HealConfig shapes the repair of sealed segments. Zero fields take the
// defaults below.
type HealConfig struct {
	// DeadAfter is how long a node must have been down (gossip declared
	// it dead, or it left) before its copies stop counting and are
	// copied elsewhere. Shorter heals sooner but copies whole segments
	// for a node that was only restarting. Default 2 min.
	DeadAfter time.Duration
	// Interval is how often a node plans heals and collects copies the
	// metadata no longer lists. Default 10 s.
	Interval time.Duration
	// Rate bounds the bytes/s a node serves to heals copying from it.
	// Default 32 MiB/s.
	Rate int64
	// ScrubInterval is how often each sealed copy is verified again;
	// ScrubRate bounds the bytes/s the scrubber reads. Defaults 24 h and
	// 8 MiB/s.
	ScrubInterval time.Duration
	ScrubRate     int64
	// MaxTasksPerNode bounds the heals a node takes part in at once.
	// Default heal.DefaultMaxTasksPerNode.
	MaxTasksPerNode int
}
