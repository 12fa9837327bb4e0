package broker

import (
	"cmp"
	"maps"
	"slices"

	"github.com/malachi-log/malachi/internal/metadata"
)

// MaxUnderReplicatedListed bounds the segments ClusterStatus lists as
// under-replicated; the per-topic counts cover them all.
const MaxUnderReplicatedListed = 100

// UnderReplicatedTopic counts a topic's segments, active or sealed, that
// have fewer live replicas than their factor.
type UnderReplicatedTopic struct {
	Topic    string `json:"topic"`
	Segments int    `json:"segments"`
}

// UnderReplicatedSegment is one segment with fewer live replicas than its
// factor: Live of its Replicas are live in the answering node's view
// (this node, and the nodes gossip sees alive, suspect or leaving).
type UnderReplicatedSegment struct {
	Topic    string   `json:"topic"`
	Range    uint64   `json:"range"`
	Segment  uint64   `json:"segment"`
	Active   bool     `json:"active"`
	Replicas []string `json:"replicas"`
	Live     int      `json:"live"`
	Factor   int      `json:"factor"`
}

// underReplicated reports, per topic, the segments whose live replicas
// are fewer than their topic's factor clamped to the registered nodes
// (what a segment opened now would get), and the first
// MaxUnderReplicatedListed of them by topic and segment id. A segment
// placed with fewer replicas than that (too few nodes were live when it
// opened) counts as well: it has fewer copies than it should.
func (b *Broker) underReplicated() ([]UnderReplicatedTopic, []UnderReplicatedSegment) {
	live := b.liveSet()
	registered := 1
	if reg, err := b.cluster.ctl.Registry(); err == nil {
		registered = max(len(reg.NodeIDs()), 1)
	}
	counts := map[string]int{}
	var listed []UnderReplicatedSegment
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			factor := min(cmp.Or(t.Replicas, b.cluster.cfg.SegmentReplicas, 1), registered)
			for _, rid := range t.Ranges {
				for _, seg := range st.RangeSegments(rid) {
					n := 0
					for _, id := range replicaIDs(seg) {
						if live[id] {
							n++
						}
					}
					if len(seg.Replicas) == 0 || n >= factor {
						continue
					}
					counts[t.Name]++
					listed = append(listed, UnderReplicatedSegment{Topic: t.Name, Range: rid, Segment: seg.ID,
						Active: seg.Active, Replicas: slices.Clone(seg.Replicas), Live: n, Factor: factor})
					if len(listed) >= 2*MaxUnderReplicatedListed {
						listed = firstListed(listed)
					}
				}
			}
		}
	})
	listed = firstListed(listed)
	topics := make([]UnderReplicatedTopic, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		topics = append(topics, UnderReplicatedTopic{Topic: name, Segments: counts[name]})
	}
	return topics, listed
}

// firstListed sorts l by topic and segment and keeps the first
// MaxUnderReplicatedListed: the list stays bounded however many
// segments a lost node leaves short.
func firstListed(l []UnderReplicatedSegment) []UnderReplicatedSegment {
	slices.SortFunc(l, func(x, y UnderReplicatedSegment) int {
		return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Segment, y.Segment))
	})
	return l[:min(len(l), MaxUnderReplicatedListed)]
}

// liveSet is the nodes live in this node's view: itself, and those gossip
// sees alive, suspect or leaving.
func (b *Broker) liveSet() map[uint64]bool {
	live := map[uint64]bool{b.cluster.cfg.NodeID: true}
	for _, m := range b.cluster.gossip.Members() {
		if m.State.Live() {
			live[m.ID] = true
		}
	}
	return live
}
