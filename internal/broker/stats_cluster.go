package broker

import (
	"cmp"
	"slices"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// Figures for metrics that walk the metadata. They sum over the groups
// this node leads only, so each topic and segment is counted by one node
// and sums across nodes hold; and the walk under each group's read lock
// only adds integers: descriptions, lists and store lookups are left to
// the admin calls that need them.

// LedTopics summarises the topics whose metadata group this node leads
// (every topic on a single node), sorted by name. An active segment's
// records and bytes are the store's live figures when this node holds
// it, as ListTopics shows them.
func (b *Broker) LedTopics() []TopicSummary {
	led := b.ledViews()
	var (
		out    []TopicSummary
		active []activeSeg
	)
	_ = b.plane.ViewEach(func(g uint64, st *metadata.State) {
		if !led[g] {
			return
		}
		for _, t := range st.Topics() {
			s := TopicSummary{Name: t.Name, Bits: t.Bits}
			for _, rid := range t.Ranges {
				r, ok := st.Range(rid)
				if !ok {
					continue
				}
				s.Ranges++
				if r.Active {
					s.ActiveRanges++
				}
				for _, seg := range st.RangeSegments(rid) {
					s.Segments++
					if seg.Active && b.holds(seg) {
						active = append(active, activeSeg{topic: len(out), id: seg.ID, replicated: len(seg.Replicas) > 1,
							records: seg.Records, bytes: uint64(seg.Bytes)})
					}
					s.Records += seg.Records
					s.Bytes += uint64(seg.Bytes)
				}
			}
			out = append(out, s)
		}
	})
	for _, a := range active {
		if rec, size, ok := b.liveFigures(a); ok {
			out[a.topic].Records += rec - a.records
			out[a.topic].Bytes += size - a.bytes
		}
	}
	slices.SortFunc(out, func(x, y TopicSummary) int { return cmp.Compare(x.Name, y.Name) })
	return out
}

type activeSeg struct {
	topic      int // index in LedTopics' list
	id         uint64
	replicated bool
	// records and bytes are the metadata's figures, which the store's
	// replace.
	records, bytes uint64
}

// liveFigures are the store's figures of an active segment held here,
// which the metadata records as zero; a replicated copy that does not
// know its commit watermark reports none (fillLive does the same).
func (b *Broker) liveFigures(a activeSeg) (records, bytes uint64, ok bool) {
	if a.replicated {
		host := b.replicas()
		if host == nil {
			return 0, 0, false
		}
		if _, known := host.Watermark(a.id); !known {
			return 0, 0, false
		}
	}
	info, err := b.store.Info(storage.SegmentID(a.id))
	if err != nil {
		return 0, 0, false
	}
	return info.Records, uint64(info.Bytes), true
}

// ClusterStats is the cluster as metrics show it: counts, not lists.
type ClusterStats struct {
	Node uint64 // this node's id; 0 on a single node
	// Members counts the nodes by liveness in this node's view.
	Members map[string]int
	// Groups are the control plane groups hosted here.
	Groups []ClusterGroup
	// UnderReplicated counts the segments of the topics this node leads
	// with fewer live replicas than their factor; Damaged the damaged
	// copies of their sealed segments.
	UnderReplicated, Damaged int
	// Healing is the copies this node fills as a heal target, Problems
	// the segments its last heal plan could not heal (all of them, not
	// only the maxHealListed a status lists).
	Healing, Problems int
	ScrubCopies       int
	ScrubBehind       bool
}

// ClusterStats reads the cluster's figures in one walk of the led
// groups; ok is false on a single node.
func (b *Broker) ClusterStats() (ClusterStats, bool) {
	if b.cluster == nil {
		return ClusterStats{}, false
	}
	c := b.cluster
	st := c.ctl.Status()
	out := ClusterStats{Node: st.Node, Groups: st.Groups, Members: map[string]int{}}
	seen := map[uint64]bool{}
	for _, m := range c.gossip.Members() {
		seen[m.ID] = true
		out.Members[m.State.String()]++
	}
	for _, r := range st.Nodes {
		if !seen[r.ID] {
			out.Members["unknown"]++
		}
	}
	out.UnderReplicated, out.Damaged = b.ledSegmentHealth()
	h := &c.heal
	h.mu.Lock()
	out.Healing, out.Problems = len(h.filling), max(h.reportsTotal, len(h.reports))
	out.ScrubCopies, out.ScrubBehind = h.scrub.Copies, h.scrub.Behind
	h.mu.Unlock()
	return out, true
}

// ledSegmentHealth counts, over the topics this node leads, the
// segments short of live replicas and the damaged copies of sealed ones,
// as underReplicated and damagedCopies judge them.
func (b *Broker) ledSegmentHealth() (under, damaged int) {
	c := b.cluster
	live := b.liveSet()
	registered := 1
	if reg, err := c.ctl.Registry(); err == nil {
		registered = max(len(reg.NodeIDs()), 1)
	}
	local := c.heal.localDamaged()
	self := clusterNodeName(c.cfg.NodeID)
	led := b.ledViews()
	_ = b.plane.ViewEach(func(g uint64, st *metadata.State) {
		if !led[g] {
			return
		}
		for _, t := range st.Topics() {
			factor := min(cmp.Or(t.Replicas, c.cfg.SegmentReplicas, 1), registered)
			for _, rid := range t.Ranges {
				for _, seg := range st.RangeSegments(rid) {
					n := 0
					for _, name := range seg.Replicas {
						if live[nodeOfName(name)] {
							n++
						}
					}
					if len(seg.Replicas) > 0 && n < factor {
						under++
					}
					if seg.Active {
						continue
					}
					damaged += len(seg.Damaged)
					if local[seg.ID] && !slices.Contains(seg.Damaged, self) && slices.Contains(seg.Replicas, self) {
						damaged++
					}
				}
			}
		}
	})
	return under, damaged
}
