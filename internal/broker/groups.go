package broker

import (
	"context"
	"errors"
	"sort"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/groups"
	"github.com/malachi-log/malachi/internal/metadata"
)

// pollMember joins or heartbeats a group member and returns its ranges.
func (b *Broker) pollMember(topicID uint64, group, member string, ranges []uint64) ([]uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, err := b.mu.groups.Poll(topicID, group, member, ranges, b.nowMs())
	if errors.Is(err, groups.ErrTooManyMembers) || errors.Is(err, groups.ErrTooManyGroups) {
		return nil, ErrTooManyMembers
	}
	if err != nil {
		return nil, err
	}
	if a.Ranges == nil {
		return []uint64{}, nil
	}
	return a.Ranges, nil
}

// Commit stores a group's position for a topic durably. The cursor's
// entries replace the stored ones they cover (last commit wins per slice).
func (b *Broker) Commit(ctx context.Context, topic, group, cur string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	c, err := cursor.Decode(b.secret, topicID, cur)
	if err != nil {
		return ErrInvalidCursor
	}
	_, err = b.apply(ctx, metadata.Command{
		Kind:    "commit_offsets",
		Topic:   topic,
		Group:   group,
		Entries: toGroupEntries(c.Entries),
	})
	return err
}

// LeaveGroup removes a member so its ranges move to the others now rather
// than after their session timeout.
func (b *Broker) LeaveGroup(topic, group, member string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.groups.Leave(topicID, group, member, b.nowMs())
	return nil
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
	b.mu.Lock()
	for _, g := range b.mu.groups.Groups(topicID) {
		if !containsString(names, g) {
			names = append(names, g)
		}
	}
	b.mu.Unlock()
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
