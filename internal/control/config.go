package control

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/raft"
	"github.com/malachi-log/malachi/internal/raft/logstore"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Config configures a Node. Zero values take the defaults in brackets.
type Config struct {
	NodeID uint64 // this node's id, also its raft replica id (required)
	// Addr is this node's peer address, as other nodes reach it
	// (recorded in the registry). Required.
	Addr  string
	Attrs map[string]string // rack, zone: recorded in the registry
	// Incarnation names this node's data directory (the broker draws it
	// once, when the directory is first used). The registry refuses a
	// node id that comes back with another one (see NodeRecord).
	Incarnation string

	// FS and Dir hold the node's raft log (internal/raft/logstore). When
	// LogStore is set instead, it is used as is (tests pass a
	// raft.MemLogStore) and the Node does not close it.
	FS       vfs.FS
	Dir      string
	LogStore raft.LogStore
	// LogOptions bound the durable log; zero takes logstore's defaults.
	LogOptions logstore.Options

	// Transport carries raft frames (peer.ChannelRaft) and forwarded
	// requests (peer.ChannelForward). Open registers both handlers and
	// does not start it: the caller starts it once every package has
	// registered its own. Required. The Node does not close it.
	Transport peer.Transport

	// Bootstrap makes a node whose log is empty create the cluster: the
	// root and every vnode group with itself as the only voter, and the
	// cluster id and secret. Ignored when the log holds groups.
	Bootstrap bool
	// Vnodes is the ring size a bootstrapping node creates
	// [placement.DefaultVnodes]; a joining node learns it from the root.
	Vnodes int
	// Factor is the voters per vnode a bootstrapping node records
	// [placement.DefaultFactor]; clamped to the node count.
	Factor int
	// ClusterID and ClusterSecret go into init_cluster at bootstrap.
	// A bootstrapping node needs a secret of metadata.MinSecretLen bytes.
	ClusterID     string
	ClusterSecret []byte

	// Seeds are nodes Join may ask to be let in, by id and peer address.
	Seeds map[uint64]string

	Clock        clock.Clock   // [clock.Real()] drives raft ticks and the reconciler
	TickInterval time.Duration // [100ms] one raft tick
	// ElectionTicks is raft's election timeout in ticks [10].
	ElectionTicks int
	// ReconcileTicks is how often, in ticks, a group leader moves its
	// group's replicas towards the registry's placement [5].
	ReconcileTicks int
	// SnapshotEvery is raft's snapshot interval in entries [1024].
	SnapshotEvery uint64
	// AutoRebalance makes the root group's leader commit the rebalance
	// plan by itself (see Rebalance) once the registered nodes, and
	// which of them are live, have not changed for RebalanceStable
	// [5 minutes]. Off, voters move for balance only when an operator
	// applies a plan.
	AutoRebalance   bool
	RebalanceStable time.Duration

	// OnApplied is called after every metadata command applied on this
	// node, in log order per group, from the raft cycle: it must not
	// block and must not call Apply, Barrier, Join, Remove or Status of
	// this Node (the View methods are fine). Nil: no calls.
	OnApplied func(group uint64, cmd metadata.Command, res metadata.Result)
	// OnRestored is called, like OnApplied, when a group's state is
	// replaced by a snapshot (a lagging replica caught up, or a replica
	// just added): whatever the caller derived from the group must be
	// read again.
	OnRestored func(group uint64)

	Logger *slog.Logger // [slog.Default()]
}

// self is this node's registry record.
func (c *Config) self() NodeRecord {
	return NodeRecord{ID: c.NodeID, Addr: c.Addr, Attrs: c.Attrs, Incarnation: c.Incarnation}
}

func (c *Config) setDefaults() error {
	switch {
	case c.NodeID == 0:
		return errors.New("control: Config.NodeID is required")
	case c.Addr == "":
		return errors.New("control: Config.Addr is required")
	case c.Transport == nil:
		return errors.New("control: Config.Transport is required")
	case c.LogStore == nil && (c.FS == nil || c.Dir == ""):
		return errors.New("control: Config needs FS and Dir, or LogStore")
	case c.Transport.ID() != c.NodeID:
		return fmt.Errorf("control: transport is node %d, config node %d", c.Transport.ID(), c.NodeID)
	}
	if c.Vnodes == 0 {
		c.Vnodes = placement.DefaultVnodes
	}
	if c.Vnodes < 1 || c.Vnodes > MaxVnodes {
		return fmt.Errorf("control: %d vnodes: want 1..%d", c.Vnodes, MaxVnodes)
	}
	if c.Factor == 0 {
		c.Factor = placement.DefaultFactor
	}
	if c.Factor < 1 {
		return fmt.Errorf("control: factor %d: want at least 1", c.Factor)
	}
	if !validNode(c.self()) {
		return errBadNode
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.ReconcileTicks <= 0 {
		c.ReconcileTicks = 5
	}
	if c.RebalanceStable <= 0 {
		c.RebalanceStable = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
