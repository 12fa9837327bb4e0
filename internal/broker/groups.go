package broker

import (
	"context"
	"errors"
	"slices"
	"sort"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
)

// pollMember joins or heartbeats a group member and returns its ranges.
func (b *Broker) pollMember(topicID uint64, group, member, owner string, ranges []uint64) ([]uint64, error) {
	a, err := b.memberAssignment(topicID, group, member, owner, ranges)
	return a.Ranges, err
}

// Commit merges a cursor into a group's stored position for a topic,
// durably. The merge never moves a range back: the members of a group
// commit independently, and a cursor a member took before another
// member's commit still carries that member's ranges at their old place.
// The wire's commit names no member and no generation, so a member's late
// commit for a range that has since moved to another member cannot be told
// apart; it is accepted, and changes only what it advances, which are
// records it was given.
func (b *Broker) Commit(ctx context.Context, topic, group, cur string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	c, err := cursor.Decode(b.secret, topicID, cur)
	if err != nil {
		return ErrInvalidCursor
	}
	return b.commitEntries(ctx, topic, topicID, group, c.Entries)
}

// commitEntries proposes the entries that advance the group's stored
// position; the state machine merges them. Leaving out what the stored
// position already implies keeps each command to what this commit adds,
// rather than every member's ranges again: a group's whole position can be
// thousands of entries. The stored position only ever grows, so what it
// implies now it implies when the command applies.
func (b *Broker) commitEntries(ctx context.Context, topic string, topicID uint64, group string, entries []cursor.Entry) error {
	var (
		stored []cursor.Entry
		known  bool
		lin    lineage
	)
	b.meta.View(func(st *metadata.State) {
		stored = toCursorEntries(st.GroupEntries(group, topicID))
		known = containsString(st.Groups(topicID), group)
		lin = topicLineage(st, topicID)
	})
	add := cursor.NotImplied(entries, stored, lin.isAncestor)
	if len(add) == 0 && known {
		return nil // nothing to add, and the group is already recorded
	}
	_, err := b.apply(ctx, metadata.Command{
		Kind:    "commit_offsets",
		Topic:   topic,
		Group:   group,
		Entries: toGroupEntries(add),
		Quota:   &metadata.Quota{GroupsPerTopic: b.cfg.Limits.MaxGroupsPerTopic},
	})
	if errors.Is(err, ErrQuotaExceeded) {
		return quotaError("the topic has %d consumer groups with a committed position", b.cfg.Limits.MaxGroupsPerTopic)
	}
	return err
}

// topicLineage returns the ancestors of every range of a topic.
func topicLineage(st *metadata.State, topicID uint64) lineage {
	lin := lineage{}
	t, ok := st.TopicByID(topicID)
	if !ok {
		return lin
	}
	for _, rid := range t.Ranges {
		if r, ok := st.Range(rid); ok && len(r.Lineage) > 0 {
			set := make(map[uint64]bool, len(r.Lineage))
			for _, a := range r.Lineage {
				set[a] = true
			}
			lin[rid] = set
		}
	}
	return lin
}

// memberEntries keeps of entries what a member may commit: for each of its
// ranges, the entries of the range and of its ancestors, narrowed to the
// range's slice. The other members' ranges are theirs to commit; a
// member's cursor carries them only as it found them.
func (b *Broker) memberEntries(topicID uint64, ranges []uint64, entries []cursor.Entry) []cursor.Entry {
	var out []cursor.Entry
	b.meta.View(func(st *metadata.State) {
		for _, rid := range ranges {
			r, ok := st.Range(rid)
			if !ok || r.Topic != topicID {
				continue
			}
			span := keyspace.Span{Start: r.Start, End: r.End}
			own := func(src uint64) bool { return src == rid || slices.Contains(r.Lineage, src) }
			out = append(out, cursor.Clip(entries, r.Start, span.Log2Size(), own)...)
		}
	})
	return cursor.Merge(nil, out)
}

func (b *Broker) topicID(topic string) (uint64, error) {
	var (
		id uint64
		ok bool
	)
	b.meta.View(func(st *metadata.State) {
		var t metadata.Topic
		t, ok = st.Topic(topic)
		id = t.ID
	})
	if !ok {
		return 0, metadata.ErrNoSuchTopic
	}
	return id, nil
}

// GroupStatus is a group's committed position and how far behind it is.
type GroupStatus struct {
	Group  string
	Cursor *string
	// Lag is the number of records after the committed position, summed
	// over the active ranges (Ranges has the per-range figures).
	Lag    uint64
	Ranges []RangeLag
}

// RangeLag is one active range's lag.
type RangeLag struct {
	Range uint64
	Lag   uint64
}

// DescribeGroup reports a group's committed position and its lag.
func (b *Broker) DescribeGroup(topic, group string) (GroupStatus, error) {
	st := GroupStatus{Group: group}
	topicID, err := b.topicID(topic)
	if err != nil {
		return st, err
	}
	pos := position{topicID: topicID}
	b.meta.View(func(ms *metadata.State) {
		pos.entries = toCursorEntries(ms.GroupEntries(group, topicID))
	})
	if len(pos.entries) > 0 {
		s := cursor.Encode(b.secret, cursor.Cursor{TopicID: topicID, Entries: pos.entries})
		st.Cursor = &s
	}
	plans, lin := b.plans(pos)
	for i := range plans {
		lag := b.rangeLag(&plans[i], pos.entries, lin)
		st.Ranges = append(st.Ranges, RangeLag{Range: plans[i].rangeID, Lag: lag})
		st.Lag += lag
	}
	return st, nil
}

// rangeLag counts the records of a range's history the reader has not
// passed. For ancestor sources it counts the whole unread span of offsets,
// so after a split the figure is an upper bound until the reader reaches
// the range's own segments.
func (b *Broker) rangeLag(p *plan, entries []cursor.Entry, lin lineage) uint64 {
	var lag uint64
	bits := p.slice.Log2Size()
	for i := range p.sources {
		src := &p.sources[i]
		start, done := cursor.Start(entries, src.id, p.slice.Start, bits, sourceBase(src), lin.isAncestor)
		if done {
			continue
		}
		end := b.durableEnd(src)
		if end > start {
			lag += end - start
		}
	}
	return lag
}

// ListGroups names the groups with a committed position on the topic.
func (b *Broker) ListGroups(topic string) ([]string, error) {
	topicID, err := b.topicID(topic)
	if err != nil {
		return nil, err
	}
	var names []string
	b.meta.View(func(st *metadata.State) { names = st.Groups(topicID) })
	for _, g := range b.liveGroups(topicID) {
		if !containsString(names, g) {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	return names, nil
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
