package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/membership"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/vfs"
)

// Cluster mode. The broker owns three things besides its stores, opened
// in this order and closed in the reverse: the peer transport (raft
// messages and forwarded metadata requests), gossip membership (who is
// alive, and where their listeners are), and the control plane
// (internal/control) with its raft log under <data-dir>/raft. The
// metadata plane is then the control plane; segments stay in the local
// segment store, on the node that opened them.

// Names of the cluster's files in the data directory.
const (
	raftDirName     = "raft"
	metaDirName     = "meta"
	incarnationName = "incarnation"
)

// appliedQueue bounds the metadata changes waiting for the broker to
// update what it derived from them; past it the broker re-reads
// everything instead (resync).
const appliedQueue = 1024

// clusterNodeName is how a cluster node names itself in segment replica
// lists and status: "node-<id>", as gossip does.
func clusterNodeName(id uint64) string { return "node-" + strconv.FormatUint(id, 10) }

// nodeOfName is the id in a "node-<id>" name, or 0.
func nodeOfName(name string) uint64 {
	id, err := strconv.ParseUint(strings.TrimPrefix(name, "node-"), 10, 64)
	if err != nil || !strings.HasPrefix(name, "node-") {
		return 0
	}
	return id
}

// singleNodeID is how a single node names itself in its cluster status:
// the id of a "node-<id>" name, else 1, since a single node may be named
// freely and 0 means no node.
func singleNodeID(name string) uint64 {
	if id := nodeOfName(name); id != 0 {
		return id
	}
	return 1
}

func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.MetadataTimeout <= 0 {
		c.MetadataTimeout = 5 * time.Second
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 2 * time.Minute
	}
	if c.SegmentReplicas <= 0 {
		c.SegmentReplicas = 3
	}
	c.Heal = c.Heal.withDefaults()
	return c
}

func (c ClusterConfig) validate() error {
	switch {
	case c.NodeID == 0:
		return errors.New("broker: Cluster.NodeID is required (a positive id, unique in the cluster)")
	case c.PeerListen == "":
		return errors.New("broker: Cluster.PeerListen is required")
	case c.GossipListen == "":
		return errors.New("broker: Cluster.GossipListen is required")
	case c.Vnodes < 0 || c.Factor < 0:
		return errors.New("broker: Cluster.Vnodes and Cluster.Factor cannot be negative")
	case c.SegmentReplicas > metadata.MaxReplicas:
		return fmt.Errorf("broker: Cluster.SegmentReplicas %d is above %d", c.SegmentReplicas, metadata.MaxReplicas)
	}
	if err := c.Heal.validate(); err != nil {
		return err
	}
	if _, ok := c.Attrs[clusterIDAttr]; ok || len(c.Attrs) >= membership.MaxAttributes {
		return fmt.Errorf("broker: at most %d attributes, and %s is reserved (gossip carries the cluster id in it)", membership.MaxAttributes-1, clusterIDAttr)
	}
	return nil
}

// clusterNode is what a broker in cluster mode runs besides its stores.
type clusterNode struct {
	cfg         ClusterConfig
	tr          *peer.TCPTransport
	gossip      *membership.Gossip
	ctl         *control.Node
	peerAddr    string // as advertised
	incarnation string
	clusterID   string // "" until a joining node learns it (cluster_start.go)

	// applied carries metadata changes from the raft apply path (which
	// must not block) to the broker's cluster loop; wake says resync or a
	// full queue needs a look.
	applied chan appliedCmd
	wake    chan struct{}
	// sweep asks the loop to sweep for dead primaries and lost followers
	// again: a run ended, and ranges past the runs' bound may be waiting
	// (cluster_replica_sweep.go).
	sweep       chan struct{}
	mu          sync.Mutex
	resync      bool // the queue overflowed or a group was restored
	joinPending bool // started from its log without reaching the cluster: retryJoin
	// refused: a retried join was refused (the node was removed while it
	// was away): it takes no part in healing, as removedHere says.
	refused bool

	coords coordTable // consumer-group coordinators of the vnodes it leads

	// repl runs the replicas of this node's segments (cluster_replica.go);
	// nil until the segment store is open.
	repl atomic.Pointer[replica.Host]
	// failovers are the ranges the dead-primary sweep is failing over
	// (cluster_replica_sweep.go).
	failovers failoverRuns
	rollDefer rollDeferrals // rolls off a lost follower that found no successor placement
	// heal is the state of healing and scrubbing (cluster_heal.go).
	heal healState
}

type appliedCmd struct {
	group uint64
	cmd   metadata.Command
	res   metadata.Result
}

// refuseClusterDir keeps a single node off a cluster node's data
// directory: its metadata is in the raft log, which the local store
// cannot read, and starting on an empty local store would serve nothing.
func refuseClusterDir(fs vfs.FS, dir string) error {
	if exists(fs, filepath.Join(dir, raftDirName)) {
		return fmt.Errorf("broker: data directory %s belongs to a cluster node (it holds %s/): start it with its cluster settings", dir, raftDirName)
	}
	return nil
}

func exists(fs vfs.FS, name string) bool {
	_, err := fs.Stat(name)
	return err == nil
}

// openCluster opens the transport, gossip and the control plane, joins or
// bootstraps the cluster, and waits until the metadata holds the cluster
// secret. Whatever it opened is closed again when it fails.
func (b *Broker) openCluster(ctx context.Context) (err error) {
	cc, dir := *b.cfg.Cluster, b.cfg.DataDir
	if exists(b.cfg.FS, filepath.Join(dir, metaDirName)) {
		return fmt.Errorf("broker: data directory %s holds a single node's metadata (%s/); it cannot become a cluster member: start the cluster node on a new data directory", dir, metaDirName)
	}
	raftDir := filepath.Join(dir, raftDirName)
	fresh := !exists(b.cfg.FS, raftDir)
	joining := len(cc.Join) > 0
	c := &clusterNode{cfg: cc, applied: make(chan appliedCmd, appliedQueue), wake: make(chan struct{}, 1), sweep: make(chan struct{}, 1)}
	if err := c.heal.init(cc.Heal, b.nowMs()); err != nil {
		return fmt.Errorf("broker: heal: %w", err)
	}
	if c.incarnation, err = loadIncarnation(b.cfg.FS, dir, fresh); err != nil {
		return err
	}
	if err := c.prepareClusterID(b.cfg.FS, dir, joining); err != nil {
		return err
	}
	b.cluster = c
	defer func() {
		if err != nil {
			c.close(b.log)
			b.cluster = nil
		}
	}()
	if err := c.openTransport(b); err != nil {
		return err
	}
	if err := c.openGossip(ctx, b); err != nil {
		return err
	}
	joinCtx, cancel := context.WithTimeout(b.life, cc.JoinTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	var seeds map[uint64]string
	if joining {
		seeds = c.gossipIn(joinCtx, b, fresh)
		if c.clusterID == "" {
			if err := c.learnClusterID(joinCtx, b); err != nil {
				return err
			}
		}
	}
	// Without Join, control bootstraps a log that holds no group yet (a
	// first start, or one cut short before the bootstrap was recorded)
	// and recovers any other.
	if err := c.openControl(joinCtx, b, raftDir, !joining, seeds); err != nil {
		return err
	}
	b.plane = c.ctl
	if err := b.registerData(c.tr); err != nil {
		return err
	}
	if err := c.registerReplication(); err != nil {
		return err
	}
	if err := c.registerHeal(b); err != nil {
		return err
	}
	if err := c.tr.Start(); err != nil {
		return fmt.Errorf("broker: peer transport: %w", err)
	}
	if joining {
		if err := c.joinOrCarryOn(joinCtx, b); err != nil {
			return err
		}
	}
	if err := c.checkIncarnation(); err != nil {
		return err
	}
	if b.secret, err = c.waitSecret(joinCtx, b); err != nil {
		return err
	}
	c.catchUp(ctx, b)
	return nil
}

// loadIncarnation reads the data directory's incarnation id, drawing and
// storing a new one for a directory that has no cluster state yet. A
// directory with a raft log but no incarnation was written before the
// file existed and gets one now.
func loadIncarnation(fs vfs.FS, dir string, fresh bool) (string, error) {
	name := filepath.Join(dir, incarnationName)
	b, err := vfs.ReadFile(fs, name)
	if err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	} else if !vfs.IsNotExist(err) {
		return "", fmt.Errorf("broker: read %s: %w", name, err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("broker: incarnation id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	if err := writeDurable(fs, name, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("broker: write %s: %w", name, err)
	}
	return id, nil
}

// writeDurable writes a small file whole (vfs.WriteFileAtomic) and syncs
// its directory, so the new name survives a power loss.
func writeDurable(fs vfs.FS, name string, data []byte) error {
	if err := vfs.WriteFileAtomic(fs, name, data); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(name))
}

// openTransport binds the peer listener first, so that a node on port 0
// knows the address it advertises before the control plane records it.
func (c *clusterNode) openTransport(b *Broker) error {
	tr, err := peer.NewTCP(peer.Config{NodeID: c.cfg.NodeID, ClusterID: c.clusterID, ListenAddr: c.cfg.PeerListen, TLS: c.cfg.PeerTLS, Logger: b.log,
		TraceContext: b.cfg.Tracer.On()})
	if err != nil {
		return fmt.Errorf("broker: peer transport: %w", err)
	}
	c.tr = tr
	if err := tr.Listen(); err != nil {
		return fmt.Errorf("broker: peer transport: %w", err)
	}
	c.peerAddr = advertised(c.cfg.PeerAdvertise, tr.Addr())
	return nil
}

// advertised is the address to publish: the configured one, or the bound
// one; a configured one with port 0 takes the bound port.
func advertised(configured, bound string) string {
	if configured == "" {
		return bound
	}
	host, port, err := splitHostPortLoose(configured)
	_, bport, berr := splitHostPortLoose(bound)
	if err == nil && berr == nil && port == "0" {
		return host + ":" + bport
	}
	return configured
}

func splitHostPortLoose(addr string) (string, string, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("no port in %q", addr)
	}
	return addr[:i], addr[i+1:], nil
}

// openGossip starts membership with this node's addresses. It does not
// contact anyone yet.
func (c *clusterNode) openGossip(ctx context.Context, b *Broker) error {
	g, err := membership.New(membership.Config{
		Node: membership.NodeInfo{
			ID: c.cfg.NodeID, ClientAddr: c.cfg.ClientAdvertise, PeerAddr: c.peerAddr,
			HTTPAddr: c.cfg.HTTPAdvertise, Attributes: c.gossipAttrs(), Version: Version,
		},
		BindAddr: c.cfg.GossipListen, AdvertiseAddr: c.cfg.GossipAdvertise, Join: c.cfg.Join, Logger: b.log,
	})
	if err != nil {
		return fmt.Errorf("broker: gossip: %w", err)
	}
	if err := g.Start(ctx); err != nil {
		return fmt.Errorf("broker: gossip: %w", err)
	}
	c.gossip = g
	return nil
}

// gossipIn contacts the Join addresses and returns the peer addresses of
// the live members it learns, by id: the seeds control.Join asks. A
// node with no cluster state yet retries with backoff until a member
// answers or ctx ends; a restarted node tries once (it has the cluster's
// addresses in its log, and the cluster loop keeps trying to gossip in).
func (c *clusterNode) gossipIn(ctx context.Context, b *Broker, fresh bool) map[uint64]string {
	wait := 100 * time.Millisecond
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := c.gossip.Join(attempt, c.cfg.Join)
		cancel()
		if seeds := c.seeds(); n > 0 && len(seeds) > 0 {
			return seeds
		}
		if errors.Is(err, membership.ErrDuplicateNodeID) || errors.Is(err, membership.ErrClosed) {
			b.log.Error("cluster: gossip refused this node", "node", c.cfg.NodeID, "err", err)
			return nil
		}
		if !fresh {
			b.log.Warn("cluster: could not gossip in at start; retrying in the background", "join", c.cfg.Join, "err", err)
			return c.seeds()
		}
		b.log.Info("cluster: waiting for a member to answer gossip", "join", c.cfg.Join, "err", err)
		if !sleepCtx(ctx, wait) {
			return c.seeds()
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// seeds are the live members other than this node, with peer addresses.
func (c *clusterNode) seeds() map[uint64]string {
	out := map[uint64]string{}
	for _, m := range c.gossip.Members() {
		if m.ID != c.cfg.NodeID && m.State.Live() && m.PeerAddr != "" {
			out[m.ID] = m.PeerAddr
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *clusterNode) openControl(ctx context.Context, b *Broker, raftDir string, bootstrap bool, seeds map[uint64]string) error {
	var secret []byte
	if bootstrap {
		// Used only when the log holds no group yet.
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return fmt.Errorf("broker: cluster secret: %w", err)
		}
	}
	ctl, err := control.Open(ctx, control.Config{
		NodeID: c.cfg.NodeID, Addr: c.peerAddr, Attrs: c.cfg.Attrs, Incarnation: c.incarnation,
		FS: b.cfg.FS, Dir: raftDir, Transport: c.tr,
		Bootstrap: bootstrap, Vnodes: c.cfg.Vnodes, Factor: c.cfg.Factor,
		ClusterID: c.clusterID, ClusterSecret: secret, Seeds: seeds,
		TickInterval: c.cfg.TickInterval, Logger: b.log,
		AutoRebalance: c.cfg.AutoRebalance, RebalanceStable: c.cfg.RebalanceStable,
		OnApplied: c.onApplied, OnRestored: c.onRestored,
	})
	if err != nil {
		return fmt.Errorf("broker: control plane: %w", err)
	}
	c.ctl = ctl
	return nil
}

// join asks the cluster to register this node. control.Join retries
// while no member answers (the seeds may still be starting) until ctx
// ends; a refusal (another incarnation of this id, a bad record) ends it
// at once.
func (c *clusterNode) join(ctx context.Context, b *Broker) error {
	err := c.ctl.Join(ctx)
	switch {
	case err == nil:
		b.log.Info("cluster: joined", "node", c.cfg.NodeID, "through", c.cfg.Join)
		return nil
	case errors.Is(err, control.ErrUnavailable):
		return fmt.Errorf("broker: join the cluster through %v: no member registered this node in time: %w", c.cfg.Join, err)
	case len(c.seeds()) == 0:
		return fmt.Errorf("broker: join the cluster: no member answered gossip at %v: %w", c.cfg.Join, err)
	}
	return fmt.Errorf("broker: join the cluster: %w", err)
}

// checkIncarnation refuses to run on a data directory whose incarnation
// is not the one the cluster registered this node id with.
func (c *clusterNode) checkIncarnation() error {
	reg, err := c.ctl.Registry()
	if err != nil {
		return nil // not joined yet: Join registered or refused us
	}
	rec, ok := reg.Node(c.cfg.NodeID)
	if ok && rec.Incarnation != "" && rec.Incarnation != c.incarnation {
		return fmt.Errorf("broker: node %d is registered with another data directory (incarnation %s, this one %s): remove it with `malachi cluster remove %d` and start this node under a new id",
			c.cfg.NodeID, rec.Incarnation, c.incarnation, c.cfg.NodeID)
	}
	return nil
}

// waitSecret returns the cluster secret once this node's root replica
// holds it (at once after a bootstrap or a restart; after the root's
// leader has sent its state to a joining node).
func (c *clusterNode) waitSecret(ctx context.Context, b *Broker) ([]byte, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var secret []byte
		_ = c.ctl.ViewRoot(func(st *metadata.State) { secret = st.ClusterSecret() })
		if len(secret) > 0 {
			return secret, nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("broker: the cluster's metadata did not reach this node in time: %w", ctx.Err())
		}
	}
}

// catchUp lets every local replica apply what its group committed before
// the node reconciles its segments against it. Without a quorum it gives
// up after MetadataTimeout and the node starts from what its log holds (a
// replica may be behind, never ahead; reconciling a range again later
// corrects what it saw).
func (c *clusterNode) catchUp(ctx context.Context, b *Broker) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.MetadataTimeout)
	defer cancel()
	groups := []uint64{control.RootGroup}
	for v := range c.ctl.Vnodes() {
		groups = append(groups, control.VnodeGroup(uint32(v)))
	}
	for _, g := range groups {
		if err := c.ctl.Barrier(ctx, g); err != nil {
			b.log.Warn("cluster: starting from the local metadata, which may be behind", "group", g, "err", err)
			return
		}
	}
}

// close stops what openCluster opened, in reverse order.
func (c *clusterNode) close(log interface{ Warn(string, ...any) }) error {
	var errs []error
	// The heal and scrub loops run on the broker's life, which ended
	// before this; they only need to notice.
	c.heal.wg.Wait()
	if h := c.repl.Load(); h != nil {
		h.Close()
	}
	if c.ctl != nil {
		errs = append(errs, c.ctl.Close())
	}
	if c.tr != nil {
		errs = append(errs, c.tr.Close())
	}
	if c.gossip != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := c.gossip.Leave(ctx); err != nil {
			log.Warn("cluster: gossip leave", "err", err)
		}
		cancel()
		errs = append(errs, c.gossip.Close())
	}
	return errors.Join(errs...)
}

func (b *Broker) closeCluster() error {
	return b.cluster.close(b.log)
}

// onApplied runs on the raft apply path: it only queues the change for
// the cluster loop, and asks for a full resync when the queue is full.
func (c *clusterNode) onApplied(group uint64, cmd metadata.Command, res metadata.Result) {
	select {
	case c.applied <- appliedCmd{group: group, cmd: cmd, res: res}:
	default:
		c.markResync()
	}
}

// onRestored: a group's state was replaced by a snapshot; everything
// derived from it is read again.
func (c *clusterNode) onRestored(uint64) { c.markResync() }

func (c *clusterNode) markResync() {
	c.mu.Lock()
	c.resync = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *clusterNode) takeResync() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.resync
	c.resync = false
	return r
}
