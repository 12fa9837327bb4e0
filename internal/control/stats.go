package control

import "github.com/malachi-log/malachi/internal/raft"

// RaftStats are the raft host's counters (every group this node hosts).
type RaftStats = raft.Stats

// RaftStats reads the raft host's counters, for metrics.
func (n *Node) RaftStats() RaftStats { return n.host.Stats() }
