package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/storage"
)

// Full or failing disks (docs/operations.md, "Full disks"). Every
// diskCheckInterval a node asks its segment store for its disk state
// (storage.Store.CheckSpace: free space against the reserve, or a probe
// write once a write found the disk full) and publishes any state but ok
// in gossip, under diskAttr. While its disk is not ok:
//
//   - no new segment is placed on it (placeSegment drops it from the
//     live nodes), and it opens none as primary: a produce it gets for a
//     range with no active segment is forwarded to a node whose disk is
//     ok, which opens the segment there;
//   - the active segments it writes are rolled (sealed at what was
//     acknowledged), so the next produce opens their successors
//     elsewhere;
//   - its sealed copies are still read; the store serves durable data in
//     every state.
//
// Once the store says ok again the attribute goes and the node takes
// replicas and opens segments again. ENOSPC anywhere (a journal round, a
// segment file write, a create, a seal) only makes the store full: a
// commit round whose segment files could not be written waits, durable in
// the journal, until CheckSpace finds room. A store failed for good (a
// failed fsync, or another write error) stays failing until the node
// restarts.

// diskAttr is the gossip attribute carrying a node's disk state while it
// is not ok ("full" or "failing"); a node without it is ok.
const diskAttr = "malachi.disk"

// diskCheckInterval is how often a node checks its disk and rolls away
// from it while it is not ok.
const diskCheckInterval = time.Second

// startDiskWatch starts the disk loop on the broker's life; it ends with
// it, and waitHeal waits for it.
func (b *Broker) startDiskWatch() {
	b.cluster.heal.wg.Add(1)
	go b.diskLoop(b.life)
}

func (b *Broker) diskLoop(ctx context.Context) {
	defer b.cluster.heal.wg.Done()
	t := time.NewTicker(diskCheckInterval)
	defer t.Stop()
	published := storage.DiskOK
	// The roll runs beside the checks: a seal waits behind a commit round
	// that waits for space, and only CheckSpace, here, lets that round go
	// on. At most one roll is in flight; it ends with ctx (a seal honours
	// it), and the loop waits for it before returning.
	var rolling chan struct{}
	defer func() {
		if rolling != nil {
			<-rolling
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := b.store.CheckSpace()
		if st != published || !b.diskPublished(st) {
			if err := b.publishDisk(ctx, st); err != nil {
				b.log.Warn("cannot publish the disk state in gossip", "disk", st.String(), "err", err)
			} else {
				if st != published {
					b.log.Warn("segment disk state changed", "from", published.String(), "to", st.String())
				}
				published = st
			}
		}
		if st != storage.DiskOK && !rollInFlight(rolling) {
			rolling = make(chan struct{})
			go func(done chan struct{}) {
				defer close(done)
				b.rollAwayFromDisk()
			}(rolling)
		}
	}
}

// rollInFlight reports whether the roll whose done channel is done has not
// returned yet.
func rollInFlight(done chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// publishDisk replaces the node's gossip attributes with its own and the
// disk state.
func (b *Broker) publishDisk(ctx context.Context, st storage.DiskState) error {
	c := b.cluster
	attrs := c.gossipAttrs()
	if st != storage.DiskOK {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[diskAttr] = st.String()
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.MetadataTimeout)
	defer cancel()
	return c.gossip.SetAttributes(ctx, attrs)
}

// diskPublished reports whether gossip carries st as this node's state
// (another writer of the attributes may have dropped it).
func (b *Broker) diskPublished(st storage.DiskState) bool {
	c := b.cluster
	for _, m := range c.gossip.Members() {
		if m.ID == c.cfg.NodeID {
			return diskStateOf(m.Attributes) == st
		}
	}
	return true // not in its own table yet: nothing to compare
}

// diskStateOf reads a node's disk state from its gossip attributes.
func diskStateOf(attrs map[string]string) storage.DiskState {
	switch attrs[diskAttr] {
	case storage.DiskFull.String():
		return storage.DiskFull
	case storage.DiskFailing.String():
		return storage.DiskFailing
	}
	return storage.DiskOK
}

// nodeDisk tells whether node n's disk is full or failing: this node's
// from its store, another's from gossip. It is what heal.Node.Full and
// heal.Node.Failing are filled from.
func (b *Broker) nodeDisk(n placement.Node) (full, failing bool) {
	st := diskStateOf(n.Attributes)
	if b.cluster != nil && n.ID == b.cluster.cfg.NodeID {
		st = b.store.DiskState()
	}
	return st == storage.DiskFull, st == storage.DiskFailing
}

// diskOKNodes keeps the nodes whose disk is ok, without the disk
// attribute (it is no placement attribute).
func (b *Broker) diskOKNodes(nodes []placement.Node) []placement.Node {
	out := nodes[:0]
	for _, n := range nodes {
		if full, failing := b.nodeDisk(n); full || failing {
			continue
		}
		if _, ok := n.Attributes[diskAttr]; ok {
			n.Attributes = maps.Clone(n.Attributes)
			delete(n.Attributes, diskAttr)
		}
		out = append(out, n)
	}
	return out
}

// errDiskNotOK is why a node whose disk is not ok opens no segment and
// has no other node to send the produce to.
var errDiskNotOK = errors.New("this node's segment disk is not ok")

// openElsewhere is placeSegment on a node whose disk is not ok: the
// produce goes to a live node whose disk is ok (one per range, spread by
// range id), which opens the segment itself; with none, a retriable
// refusal.
func (b *Broker) openElsewhere(h *head, st storage.DiskState) error {
	live, _, err := b.liveNodes()
	if err == nil {
		live = b.diskOKNodes(live)
	}
	ids := make([]uint64, 0, len(live))
	for _, n := range live {
		if n.ID != b.cluster.cfg.NodeID {
			ids = append(ids, n.ID)
		}
	}
	if len(ids) == 0 || b.data == nil {
		return fmt.Errorf("%w: range %d: %w (%s) and no other node can take it", ErrRetry, h.rangeID, errDiskNotOK, st)
	}
	slices.Sort(ids)
	return &NotOwnerError{Node: clusterNodeName(ids[h.rangeID%uint64(len(ids))])}
}

// rollAwayFromDisk rolls every active segment this node writes, so that
// their successors open on nodes whose disk is ok.
func (b *Broker) rollAwayFromDisk() {
	b.rollHeads("roll away from a full or failing disk failed", func(*head) bool { return true })
}
