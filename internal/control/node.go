package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/raft"
	"github.com/malachi-log/malachi/internal/raft/logstore"
)

// Errors of the control plane. ErrUnavailable is the one a client sees as
// the retriable reason metadata_unavailable.
var (
	// ErrUnavailable: the group had no reachable leader with a quorum
	// before the caller's context ended. The outcome of a write is
	// unknown (it may still commit). Within one Apply, retries are safe:
	// they resend the same entry, which applies once. A new Apply after
	// this error is a new request (a new request id): if the first did
	// commit, a create answers already_exists, a delete not found, and
	// the caller must read to tell what happened.
	ErrUnavailable = errors.New("control: metadata_unavailable: no leader with a quorum answered in time")
	// ErrNotJoined: this node has no cluster yet (it neither bootstrapped
	// nor joined), or its root replica has not been filled.
	ErrNotJoined = errors.New("control: node has not joined a cluster")
	// ErrUnknownGroup: the group is not one of the cluster's.
	ErrUnknownGroup = errors.New("control: no such group")
	// ErrClosed: the Node was closed.
	ErrClosed = errors.New("control: node closed")
)

// Node is one node's control plane: a replica of the root group and of
// every vnode group, hosted on one multi-raft host, with the routing that
// sends each write to its group's leader and serves reads from the local
// replicas. All methods are safe for concurrent use.
type Node struct {
	cfg    Config
	host   *raft.Host
	tr     peer.Transport
	store  raft.LogStore
	closer func() error // closes the log store Open opened, or nil
	notify *notifier
	live   *liveness // raft frames heard, by node

	mu      sync.Mutex
	sms     map[uint64]*groupSM // every hosted group
	vnodes  int                 // ring size; 0 until bootstrapped, joined or recovered
	addrs   map[uint64]string   // addresses given to the transport
	leaving map[uint64]bool     // in addrs but no longer registered: to drop once in no group
	waiting map[uint64]string   // why a group this node leads holds a replica change back (Status)
	failure error               // the host stopped on this error

	auto autoState // the automatic rebalancer's; reconciler goroutine only

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed chan struct{}
}

// Open starts a node's control plane over its raft log. A log that holds
// groups is recovered (a restarted node catches up from the other
// replicas); an empty one is bootstrapped into a new cluster when
// cfg.Bootstrap is set, and otherwise waits for Join. Open registers the
// Transport's raft and forward handlers; the caller starts the Transport.
// The Node runs two goroutines, the raft host's loop and the replica
// reconciler, until Close.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, tr: cfg.Transport, sms: make(map[uint64]*groupSM),
		addrs: make(map[uint64]string), leaving: make(map[uint64]bool), waiting: make(map[uint64]string),
		closed: make(chan struct{}),
		live:   newLiveness(cfg.Clock),
	}
	n.notify = &notifier{applied: cfg.OnApplied, restored: cfg.OnRestored, registry: n.onRegistry}
	if err := n.openStore(); err != nil {
		return nil, err
	}
	host, err := raft.NewHost(raft.Options{
		NodeID: cfg.NodeID, LogStore: n.store, Sender: raftSender{tr: cfg.Transport},
		NewStateMachine: n.newSM, Clock: cfg.Clock, TickInterval: cfg.TickInterval,
		ElectionTicks: cfg.ElectionTicks, SnapshotEvery: cfg.SnapshotEvery,
	})
	if err != nil {
		return nil, errors.Join(err, n.closeStore())
	}
	n.host = host
	if err := n.start(); err != nil {
		return nil, errors.Join(err, n.closeStore())
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(2)
	go n.runHost(runCtx)
	go n.runReconciler(runCtx)
	return n, nil
}

func (n *Node) openStore() error {
	if n.cfg.LogStore != nil {
		n.store = n.cfg.LogStore
		return nil
	}
	s, err := logstore.Open(n.cfg.FS, n.cfg.Dir, n.cfg.LogOptions)
	if err != nil {
		return fmt.Errorf("control: open raft log: %w", err)
	}
	n.store, n.closer = durableLog{s: s}, s.Close
	return nil
}

func (n *Node) closeStore() error {
	if n.closer == nil {
		return nil
	}
	return n.closer()
}

// start registers the transport handlers and brings the groups up:
// recovered, bootstrapped, or left for Join.
func (n *Node) start() error {
	h := n.host
	if err := n.tr.Handle(peer.ChannelRaft, func(from uint64, frame []byte) {
		n.live.note(from)
		_ = h.Receive(from, frame) // a full inbox drops the frame; raft resends
	}); err != nil {
		return err
	}
	if err := n.tr.HandleCall(peer.ChannelForward, n.serveForward); err != nil {
		return err
	}
	root := n.sm(RootGroup)
	switch {
	case root != nil && root.registry() != nil:
		return n.adoptRing(root.registry())
	case len(n.host.Groups()) == 0 && n.cfg.Bootstrap:
		return n.bootstrap()
	case n.cfg.Bootstrap:
		n.cfg.Logger.Warn("control: log holds groups but no root: not bootstrapping; waiting for Join", "node", n.cfg.NodeID)
	}
	return nil // Join fills the groups
}

// bootstrap creates a cluster of one. The root group comes first, its
// initial state already holding the registry and init_cluster (applied
// before its index-1 snapshot, so the cluster never exists without its
// secret and no election is needed for it); the vnode groups follow. A
// crash in between leaves a root whose registry names this node alone,
// and the next Open creates the missing vnodes (adoptRing).
func (n *Node) bootstrap() error {
	root := n.addSM(RootGroup)
	root.reg = newRegistry(n.cfg.Vnodes, n.cfg.Factor, n.cfg.self())
	init := metadata.Command{V: metadata.Version, Kind: metadata.KindInitCluster, Now: n.cfg.Clock.Now().UnixMilli(),
		ClusterID: n.cfg.ClusterID, ClusterSecret: n.cfg.ClusterSecret}
	if res := root.st.Apply(init); res.Err != nil {
		return fmt.Errorf("control: bootstrap: init_cluster: %w", res.Err)
	}
	if err := n.host.CreateGroup(RootGroup, []uint64{n.cfg.NodeID}, root); err != nil {
		return fmt.Errorf("control: bootstrap root: %w", err)
	}
	return n.adoptRing(root.registry())
}

// adoptRing records the ring size and hosts every group not hosted yet.
// On a joining or restarted node the groups' leaders fill them. When the
// registry names this node alone, nobody else can: such a group was never
// created (a bootstrap cut short), and it is created here with this node
// as its voter.
func (n *Node) adoptRing(reg *Registry) error {
	if reg.Vnodes < 1 || reg.Vnodes > MaxVnodes {
		return fmt.Errorf("control: ring of %d vnodes", reg.Vnodes)
	}
	n.mu.Lock()
	if n.vnodes != 0 && n.vnodes != reg.Vnodes {
		n.mu.Unlock()
		return fmt.Errorf("control: ring of %d vnodes, this node has %d", reg.Vnodes, n.vnodes)
	}
	n.vnodes = reg.Vnodes
	n.mu.Unlock()
	alone := len(reg.Nodes) == 1 && reg.Nodes[0].ID == n.cfg.NodeID
	for _, g := range append([]uint64{RootGroup}, vnodeGroups(reg.Vnodes)...) {
		if n.sm(g) != nil {
			continue
		}
		var err error
		if alone {
			err = n.host.CreateGroup(g, []uint64{n.cfg.NodeID}, n.addSM(g))
		} else {
			err = n.host.AddGroup(g, n.addSM(g))
		}
		if err != nil && !errors.Is(err, raft.ErrGroupExists) {
			n.dropSM(g)
			return fmt.Errorf("control: host %s: %w", groupName(g), err)
		}
	}
	return nil
}

func vnodeGroups(vnodes int) []uint64 {
	out := make([]uint64, vnodes)
	for v := range out {
		out[v] = VnodeGroup(uint32(v))
	}
	return out
}

// newSM makes and records a group's state machine (also the host's
// NewStateMachine, called while NewHost recovers the stored groups).
func (n *Node) newSM(group uint64) raft.StateMachine { return n.addSM(group) }

func (n *Node) addSM(group uint64) *groupSM {
	sm := newGroupSM(group, n.notify)
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.sms[group]; old != nil {
		return old
	}
	n.sms[group] = sm
	return sm
}

func (n *Node) dropSM(group uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.sms, group)
}

func (n *Node) sm(group uint64) *groupSM {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sms[group]
}

// onRegistry gives the transport every registered node's address and
// marks the nodes that left the registry for the reconciler to drop
// (forgetRemoved). It runs on the raft cycle, in apply order; SetAddr does
// not block.
func (n *Node) onRegistry(reg *Registry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id := range n.addrs {
		if !reg.Has(id) {
			n.leaving[id] = true
		}
	}
	for _, rec := range reg.Nodes {
		if rec.ID == n.cfg.NodeID {
			continue
		}
		delete(n.leaving, rec.ID)
		if n.addrs[rec.ID] != rec.Addr {
			n.addrs[rec.ID] = rec.Addr
			n.tr.SetAddr(rec.ID, rec.Addr)
		}
	}
}

func (n *Node) runHost(ctx context.Context) {
	defer n.wg.Done()
	if err := n.host.Run(ctx); err != nil {
		n.mu.Lock()
		n.failure = err
		n.mu.Unlock()
		n.cfg.Logger.Error("control: raft host stopped", "node", n.cfg.NodeID, "err", err)
	}
}

// Err returns why the node's raft host stopped (a failed log write), or
// nil while it runs.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failure
}

// Close stops the node's goroutines (failing requests in flight) and
// closes the log store Open opened. It does not close the Transport.
func (n *Node) Close() error {
	select {
	case <-n.closed:
		return nil
	default:
	}
	close(n.closed)
	n.cancel()
	n.wg.Wait()
	return n.closeStore()
}

// ID is this node's id.
func (n *Node) ID() uint64 { return n.cfg.NodeID }

// Vnodes returns the ring size, 0 before the node has a cluster.
func (n *Node) Vnodes() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.vnodes
}

func (n *Node) ring() (placement.Ring, error) {
	v := n.Vnodes()
	if v == 0 {
		return placement.Ring{}, ErrNotJoined
	}
	return placement.Ring{Vnodes: v}, nil
}

// raftSender sends the host's frames on the raft channel.
type raftSender struct{ tr peer.Transport }

func (s raftSender) Send(to uint64, payload []byte) error {
	return s.tr.Send(to, peer.ChannelRaft, payload)
}

// groups returns the hosted groups, ascending.
func (n *Node) groups() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]uint64, 0, len(n.sms))
	for g := range n.sms {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}
