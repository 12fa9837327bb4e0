package broker

import (
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/storage"
)

// Snapshots for metrics. The broker keeps plain counters and answers
// what internal/metrics asks at scrape time; it knows nothing of the
// exposition format.

type brokerStats struct {
	// ttlFiltered counts records reads passed over because their TTL had
	// expired (kept apart from skips: those were deleted by retention).
	ttlFiltered atomic.Uint64
	// segmentsExpired counts segments retention deleted on this node's
	// proposal.
	segmentsExpired atomic.Uint64
	// lockouts counts account lockouts that began.
	lockouts atomic.Uint64
	// scrubs counts the copies the scrubber verified, by outcome.
	scrubs [heal.Unreadable + 1]atomic.Uint64
}

func (s *brokerStats) scrubbed(o heal.Outcome) {
	if int(o) < len(s.scrubs) {
		s.scrubs[o].Add(1)
	}
}

// Counters are the broker's totals since it opened.
type Counters struct {
	TTLFiltered     uint64
	SegmentsExpired uint64
	Lockouts        uint64
	// Scrubs counts copies verified by the scrubber, by outcome (whole,
	// damaged, short, unreadable).
	Scrubs map[string]uint64
}

// Counters reads the broker's counters.
func (b *Broker) Counters() Counters {
	c := Counters{
		TTLFiltered:     b.stats.ttlFiltered.Load(),
		SegmentsExpired: b.stats.segmentsExpired.Load(),
		Lockouts:        b.stats.lockouts.Load(),
		Scrubs:          map[string]uint64{},
	}
	for o := range b.stats.scrubs {
		c.Scrubs[heal.Outcome(o).String()] = b.stats.scrubs[o].Load()
	}
	return c
}

// DiskState is the segment disk's state: ok, full or failing.
func (b *Broker) DiskState() string { return b.store.DiskState().String() }

// StoreStats reads the segment store's counters and distributions.
func (b *Broker) StoreStats() (storage.Stats, storage.Histograms) {
	return b.store.Stats(), b.store.Histograms()
}

// ledViews lists the metadata groups whose figures this node reports:
// every one on a single node, those it leads in a cluster, so that each
// topic and group is reported by one node and sums across nodes hold.
func (b *Broker) ledViews() map[uint64]bool {
	var groups []uint64
	_ = b.plane.ViewEach(func(g uint64, _ *metadata.State) { groups = append(groups, g) })
	led := make(map[uint64]bool, len(groups))
	for _, g := range groups {
		led[g] = b.leadsGroup(b.groupOf(g))
	}
	return led
}

// RaftStats reads the raft host's counters; ok is false on a single node.
func (b *Broker) RaftStats() (st control.RaftStats, ok bool) {
	if b.cluster == nil {
		return st, false
	}
	return b.cluster.ctl.RaftStats(), true
}

// ReplicationLag reads the replication lag of the segments this node
// replicates; ok is false on a single node.
func (b *Broker) ReplicationLag() (l replica.Lag, ok bool) {
	h := b.replicas()
	if h == nil {
		return l, false
	}
	return h.Lag(), true
}

// Started is when the broker opened.
func (b *Broker) Started() time.Time { return b.started }
