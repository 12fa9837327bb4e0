package broker

import (
	"maps"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
)

// DefaultRetentionInterval is how often the retention sweep runs when
// Config.RetentionInterval is 0.
const DefaultRetentionInterval = time.Minute

// retentionDefaults is the node's value of every policy field, used
// where a topic's policy leaves one unset: Config.Retention as given,
// then the segment roll bounds, replication factor and placement the
// node runs with, and everything else off.
func (c Config) retentionDefaults() retention.Defaults {
	d := retention.Defaults{
		retention.FieldSegmentMaxBytes: {Int: c.SegmentMaxBytes},
		retention.FieldSegmentMaxAge:   {Int: c.SegmentMaxAge.Milliseconds()},
		retention.FieldPlacement:       {Str: "soft", IsStr: true},
		retention.FieldMinDomains:      {Int: 1},
	}
	if c.Cluster != nil && c.Cluster.SegmentReplicas > 0 {
		d[retention.FieldReplicas] = metadata.PolicyValue{Int: int64(c.Cluster.SegmentReplicas)}
	}
	maps.Copy(d, c.Retention)
	return d
}

// effectivePolicy is a topic's resolved settings: the policy it is bound
// to over the node's defaults. A topic bound to a name no policy defines
// (deleted with force, or a bind racing a delete) resolves "unresolved",
// which expires nothing. An unknown topic gets the defaults.
func (b *Broker) effectivePolicy(topicID uint64) retention.Effective {
	var bound string
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		if t, ok := st.TopicHeaderByID(topicID); ok {
			bound = t.Policy
		}
	})
	return b.resolvePolicy(bound)
}

// resolvePolicy resolves a binding by name against the policies the root
// holds.
func (b *Broker) resolvePolicy(bound string) retention.Effective {
	var p *metadata.Policy
	if bound != "" {
		_ = b.plane.ViewRoot(func(st *metadata.State) {
			if pol, ok := st.Policy(bound); ok {
				p = &pol
			}
		})
	}
	return retention.Resolve(b.cfg.retentionDefaults(), bound, p)
}
