package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Gossip is the Membership of a real node: SWIM over UDP and TCP through
// hashicorp/memberlist.
type Gossip struct {
	cfg   Config
	log   *slog.Logger
	name  string
	table *table
	// lifecycle serialises Start, Leave and Close. memberlist callbacks
	// never take it, so it may be held across memberlist calls.
	lifecycle sync.Mutex
	mu        struct {
		sync.Mutex
		info      NodeInfo
		meta      []byte // encodeMeta(info, leaving), at most MaxMetaSize
		leaving   bool
		list      *memberlist.Memberlist
		closed    bool
		conflicts uint64 // conflicts on the local node's id seen so far
		claimant  string // gossip address of the latest other claimant
	}
}

var _ Membership = (*Gossip)(nil)

// New checks cfg and returns a Gossip that has not started.
func New(cfg Config) (*Gossip, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Node = cfg.Node.Clone()
	meta, err := encodeMeta(cfg.Node, false)
	if err != nil {
		return nil, err
	}
	g := &Gossip{
		cfg:   cfg,
		log:   cfg.Logger.With("node", cfg.Node.ID),
		name:  nodeName(cfg.Node.ID),
		table: newTable(cfg.Node.ID, cfg.MaxMembers, cfg.EventBuffer),
	}
	g.mu.info, g.mu.meta = cfg.Node, meta
	return g, nil
}

// nodeName is the memberlist name of node id. Deriving it from the id
// makes memberlist itself refuse a second live node with the same id (it
// keeps the first address it saw for a name).
func nodeName(id uint64) string { return "node-" + strconv.FormatUint(id, 10) }

func idOfName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "node-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

// Start binds the gossip port and announces the local node.
func (g *Gossip) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.lifecycle.Lock()
	defer g.lifecycle.Unlock()
	g.mu.Lock()
	closed, started := g.mu.closed, g.mu.list != nil
	g.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case started:
		return errors.New("membership: already started")
	}
	list, err := memberlist.Create(g.memberlistConfig())
	if err != nil {
		return fmt.Errorf("membership: start gossip on %s: %w", g.cfg.BindAddr, err)
	}
	g.mu.Lock()
	g.mu.list = list
	g.mu.Unlock()
	g.log.Info("gossip started", "addr", list.LocalNode().Address(), "encrypted", len(g.cfg.SecretKey) > 0)
	return nil
}

func (g *Gossip) memberlistConfig() *memberlist.Config {
	c := g.cfg
	mc := memberlist.DefaultLANConfig()
	mc.Name = g.name
	host, port, _ := splitHostPort(c.BindAddr) // checked by validate
	mc.BindAddr, mc.BindPort, mc.AdvertisePort = host, port, port
	if c.AdvertiseAddr != "" {
		mc.AdvertiseAddr, mc.AdvertisePort, _ = splitHostPort(c.AdvertiseAddr)
	}
	mc.Label = c.ClusterName
	mc.SecretKey = c.SecretKey
	mc.ProbeInterval, mc.ProbeTimeout = c.ProbeInterval, c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.GossipInterval, mc.PushPullInterval = c.GossipInterval, c.PushPullInterval
	mc.TCPTimeout = c.StreamTimeout
	mc.GossipToTheDeadTime = c.DeadRetention
	// A node id whose holder is dead (or left) may come back from another
	// address at once: a restarted node need not keep its address. A live
	// or suspect holder still keeps the id.
	mc.DeadNodeReclaimTime = time.Nanosecond
	d := &delegate{g}
	mc.Delegate, mc.Events, mc.Conflict, mc.Alive = d, d, d, d
	mc.Logger = memberlistLogger(g.log)
	return mc
}

// Addr is the gossip address other nodes reach this one at, or "" before
// Start.
func (g *Gossip) Addr() string {
	g.mu.Lock()
	list := g.mu.list
	g.mu.Unlock()
	if list == nil {
		return ""
	}
	return list.LocalNode().Address()
}

func (g *Gossip) started() (*memberlist.Memberlist, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.mu.closed:
		return nil, ErrClosed
	case g.mu.list == nil:
		return nil, ErrNotStarted
	}
	return g.mu.list, nil
}

// Join contacts addrs, or Config.Join when addrs is empty, one at a time;
// each attempt is bounded by StreamTimeout. Joining nothing leaves the
// node a cluster of one. A node that finds its id held by another live
// node while it knows no one else is the newcomer: it shuts its gossip
// down without a leave (a leave would be taken as the other node's) and
// returns ErrDuplicateNodeID.
func (g *Gossip) Join(ctx context.Context, addrs []string) (int, error) {
	list, err := g.started()
	if err != nil {
		return 0, err
	}
	if len(addrs) == 0 {
		addrs = g.cfg.Join
	}
	newcomer := list.NumMembers() <= 1
	var errs []error
	joined := 0
	for _, addr := range addrs {
		if err := ctx.Err(); err != nil {
			return joined, err
		}
		before := g.conflicts()
		n, err := list.Join([]string{addr})
		joined += n
		if err != nil {
			errs = append(errs, err)
		}
		if newcomer && g.conflicts() != before {
			return joined, g.refuseDuplicate()
		}
	}
	if joined == 0 && len(addrs) > 0 {
		return 0, fmt.Errorf("membership: join: no seed answered: %w", errors.Join(errs...))
	}
	return joined, nil
}

func (g *Gossip) conflicts() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.conflicts
}

func (g *Gossip) refuseDuplicate() error {
	g.mu.Lock()
	claimant := g.mu.claimant
	g.mu.Unlock()
	err := fmt.Errorf("%w: node id %d is held by a live node at %s; give this node another --node-id", ErrDuplicateNodeID, g.cfg.Node.ID, claimant)
	g.log.Error("refusing to join", "err", err)
	_ = g.Close()
	return err
}

// budget is how long an announcement may wait: BroadcastTimeout, or less
// if ctx ends sooner.
func (g *Gossip) budget(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d := g.cfg.BroadcastTimeout
	if deadline, ok := ctx.Deadline(); ok {
		if left := time.Until(deadline); left < d {
			d = left
		}
	}
	if d <= 0 {
		return 0, context.DeadlineExceeded
	}
	return d, nil
}

// SetAttributes replaces the local attributes. Before Start they are only
// stored; after, they are announced and this waits (within ctx and
// BroadcastTimeout) for the announcement to go out. On a timeout the new
// attributes stay in force and reach members with the next sync.
func (g *Gossip) SetAttributes(ctx context.Context, attrs map[string]string) error {
	if err := ValidateAttributes(attrs); err != nil {
		return err
	}
	g.mu.Lock()
	info := g.mu.info.Clone()
	info.Attributes = cloneAttrs(attrs)
	meta, err := encodeMeta(info, g.mu.leaving)
	if err == nil {
		g.mu.info, g.mu.meta = info, meta
	}
	list, closed := g.mu.list, g.mu.closed
	g.mu.Unlock()
	switch {
	case err != nil:
		return err
	case closed:
		return ErrClosed
	case list == nil:
		return nil
	}
	return g.announce(ctx, list)
}

func cloneAttrs(attrs map[string]string) map[string]string {
	if len(attrs) == 0 {
		return nil
	}
	return NodeInfo{Attributes: attrs}.Clone().Attributes
}

func (g *Gossip) announce(ctx context.Context, list *memberlist.Memberlist) error {
	wait, err := g.budget(ctx)
	if err != nil {
		return err
	}
	if err := list.UpdateNode(wait); err != nil {
		return fmt.Errorf("membership: announce node metadata: %w", err)
	}
	return nil
}

// Leave marks the local node as leaving in its metadata, announces that,
// then broadcasts memberlist's leave. Members that saw the mark report
// EventLeave; one that missed it would report EventDead.
//
// If the mark cannot be announced (ctx ends, the broadcast times out),
// the node has not left: the mark is withdrawn and that is announced, so
// that a crash afterwards is reported as a death, not a leave. Once
// memberlist's leave has been broadcast the node has left, even if Leave
// returns its timeout.
func (g *Gossip) Leave(ctx context.Context) error {
	g.lifecycle.Lock()
	defer g.lifecycle.Unlock()
	list, err := g.started()
	if err != nil {
		return err
	}
	if err := g.setLeaving(true); err != nil {
		return err
	}
	err = g.announce(ctx, list)
	var wait time.Duration
	if err == nil {
		wait, err = g.budget(ctx)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("membership: leave: %w", err), g.withdrawLeave(ctx, list))
	}
	if err := list.Leave(wait); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	g.log.Info("left the cluster")
	return nil
}

// setLeaving sets the leaving mark in the local metadata.
func (g *Gossip) setLeaving(leaving bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	meta, err := encodeMeta(g.mu.info, leaving)
	if err != nil {
		return err
	}
	g.mu.leaving, g.mu.meta = leaving, meta
	return nil
}

// withdrawLeave clears the leaving mark after a Leave that did not go
// through and announces it, within BroadcastTimeout even when ctx has
// ended: the mark may already have reached some members. Members that
// miss this announcement get the cleared mark with the next sync.
func (g *Gossip) withdrawLeave(ctx context.Context, list *memberlist.Memberlist) error {
	if err := g.setLeaving(false); err != nil {
		return err
	}
	if err := g.announce(context.WithoutCancel(ctx), list); err != nil {
		g.log.Warn("leave withdrawn locally; members learn it with the next sync", "err", err)
		return err
	}
	g.log.Info("leave withdrawn")
	return nil
}

// Members returns the member snapshot.
func (g *Gossip) Members() []Member { return g.table.members() }

// Events returns the event channel.
func (g *Gossip) Events() <-chan Event { return g.table.events }

// Coalesced counts the events replaced by EventResync so far.
func (g *Gossip) Coalesced() uint64 { return g.table.coalesced() }

// Close shuts gossip down without a leave and closes Events.
func (g *Gossip) Close() error {
	g.lifecycle.Lock()
	defer g.lifecycle.Unlock()
	g.mu.Lock()
	list, closed := g.mu.list, g.mu.closed
	g.mu.closed = true
	g.mu.Unlock()
	if closed {
		return nil
	}
	var err error
	if list != nil {
		err = list.Shutdown()
	}
	g.table.close()
	return err
}
