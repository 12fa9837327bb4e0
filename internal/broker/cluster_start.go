package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/membership"
	"github.com/malachi-log/malachi/internal/vfs"
)

// The cluster id. Every node's peer transport sends it in its handshake
// and refuses a peer that sends another (peer.Config.ClusterID), so that
// a node that bootstrapped a new cluster on an old member's address and
// id (its data directory lost) is never taken for that member: the old
// members' raft traffic to the id is refused at the handshake.
//
// The id is drawn by the node that bootstraps, and stored in
// <data-dir>/cluster-id before its raft log is created; a joining node
// must know it before it can talk to any member, so it learns it from
// gossip (every node publishes it as the attribute clusterIDAttr, which
// rides in its membership record) and stores it before its raft log is
// created. A restarted node reads the file. A joining node whose Join
// addresses reach nodes of two clusters is refused.
const (
	clusterIDName = "cluster-id"
	clusterIDAttr = "malachi.cluster"
)

// loadClusterID reads the stored cluster id, "" when none is stored.
func loadClusterID(fs vfs.FS, dir string) (string, error) {
	name := filepath.Join(dir, clusterIDName)
	b, err := vfs.ReadFile(fs, name)
	if vfs.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("broker: read %s: %w", name, err)
	}
	id := strings.TrimSpace(string(b))
	if err := validClusterID(id); err != nil {
		return "", fmt.Errorf("broker: %s: %w", name, err)
	}
	return id, nil
}

func storeClusterID(fs vfs.FS, dir, id string) error {
	name := filepath.Join(dir, clusterIDName)
	if err := writeDurable(fs, name, []byte(id+"\n")); err != nil {
		return fmt.Errorf("broker: write %s: %w", name, err)
	}
	return nil
}

func newClusterID() (string, error) {
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("broker: cluster id: %w", err)
	}
	return hex.EncodeToString(raw[:]), nil
}

// validClusterID keeps an id publishable in gossip.
func validClusterID(id string) error {
	if id == "" {
		return errors.New("empty cluster id")
	}
	return membership.ValidateAttributes(map[string]string{clusterIDAttr: id})
}

// gossipAttrs are the attributes this node publishes: its placement
// attributes and, once known, the cluster id.
func (c *clusterNode) gossipAttrs() map[string]string {
	attrs := maps.Clone(c.cfg.Attrs)
	if c.clusterID != "" {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[clusterIDAttr] = c.clusterID
	}
	return attrs
}

// prepareClusterID settles the id before the raft log exists or is
// opened: the stored one, or for a node that starts without Join (a
// bootstrap, or a bootstrap cut short before it was recorded) a new one,
// stored at once. A joining node with none learns it later (learnClusterID).
func (c *clusterNode) prepareClusterID(fs vfs.FS, dir string, joining bool) error {
	id, err := loadClusterID(fs, dir)
	if err != nil {
		return err
	}
	if id == "" && !joining {
		if id, err = newClusterID(); err != nil {
			return err
		}
		if err := storeClusterID(fs, dir, id); err != nil {
			return err
		}
	}
	c.clusterID = id
	return nil
}

// learnClusterID takes the id the live members publish in gossip, gives
// it to the peer transport (which has not talked to anyone yet), stores it
// and publishes it in turn. It waits while no member publishes one, until
// ctx ends, and refuses members of two clusters.
func (c *clusterNode) learnClusterID(ctx context.Context, b *Broker) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ids := map[string][]uint64{}
		for _, m := range c.gossip.Members() {
			if id := m.Attributes[clusterIDAttr]; m.ID != c.cfg.NodeID && m.State.Live() && id != "" {
				ids[id] = append(ids[id], m.ID)
			}
		}
		switch {
		case len(ids) > 1:
			return fmt.Errorf("broker: the Join addresses %v reach nodes of more than one cluster (cluster id by node: %v): join through one cluster's nodes", c.cfg.Join, ids)
		case len(ids) == 1:
			id := slices.Collect(maps.Keys(ids))[0]
			if err := validClusterID(id); err != nil {
				return fmt.Errorf("broker: cluster id published by nodes %v: %w", ids[id], err)
			}
			return c.adoptClusterID(ctx, b, id)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("broker: join the cluster: no live member at %v published the cluster id in time: %w", c.cfg.Join, ctx.Err())
		}
	}
}

func (c *clusterNode) adoptClusterID(ctx context.Context, b *Broker, id string) error {
	if err := c.tr.SetClusterID(id); err != nil {
		return fmt.Errorf("broker: peer transport: %w", err)
	}
	if err := storeClusterID(b.cfg.FS, b.cfg.DataDir, id); err != nil {
		return err
	}
	c.clusterID = id
	if err := c.gossip.SetAttributes(ctx, c.gossipAttrs()); err != nil {
		// The record reaches members with the next sync.
		b.log.Warn("cluster: publishing the cluster id in gossip", "err", err)
	}
	return nil
}

// registeredHere reports whether this node's own root replica records it
// with this data directory's incarnation: a restarted member, whose log
// holds the cluster.
func (c *clusterNode) registeredHere() bool {
	reg, err := c.ctl.Registry()
	if err != nil {
		return false
	}
	rec, ok := reg.Node(c.cfg.NodeID)
	return ok && rec.Incarnation == c.incarnation
}

// joinOrCarryOn joins the cluster. A restarted member whose peers do not
// answer within MetadataTimeout starts all the same from its log: it
// serves reads from its replicas, its writes answer metadata_unavailable
// until a quorum is back, and the cluster loop retries the join
// (retryJoin). Anyone else must be registered to start.
func (c *clusterNode) joinOrCarryOn(ctx context.Context, b *Broker) error {
	if !c.registeredHere() {
		return c.join(ctx, b)
	}
	jctx, cancel := context.WithTimeout(ctx, c.cfg.MetadataTimeout)
	defer cancel()
	err := c.join(jctx, b)
	if errors.Is(err, control.ErrUnavailable) {
		b.log.Warn("cluster: no member answered; starting from the local metadata and retrying the join", "join", c.cfg.Join, "err", err)
		c.mu.Lock()
		c.joinPending = true
		c.mu.Unlock()
		return nil
	}
	return err
}

// retryJoin joins again a member that started without reaching the
// cluster; it runs on the cluster loop, bounded by MetadataTimeout. A
// refusal (the node was removed meanwhile) is logged and ends the
// retries: the operator acts on it, and meanwhile the node, whose views
// are of a cluster that forgot it, heals nothing (removedHere).
func (b *Broker) retryJoin(ctx context.Context) {
	c := b.cluster
	c.mu.Lock()
	pending := c.joinPending
	c.mu.Unlock()
	if !pending {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.MetadataTimeout)
	defer cancel()
	err := c.ctl.Join(ctx)
	if errors.Is(err, control.ErrUnavailable) || errors.Is(err, control.ErrClosed) || ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	c.joinPending = false
	c.refused = err != nil
	c.mu.Unlock()
	if err != nil {
		b.log.Error("cluster: the cluster refused this node", "node", c.cfg.NodeID, "err", err)
		return
	}
	b.log.Info("cluster: joined", "node", c.cfg.NodeID, "through", c.cfg.Join)
}
