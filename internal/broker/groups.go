package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// pollMember joins or heartbeats a group member and returns its ranges,
// with the group's committed position for them as the coordinator knows
// it (see memberAssignment).
func (b *Broker) pollMember(topicID uint64, group, member, owner string, ranges []uint64) ([]uint64, []cursor.Entry, error) {
	a, committed, err := b.memberAssignment(topicID, group, member, owner, ranges)
	return a.Ranges, committed, err
}

// Commit merges a cursor into a group's stored position for a topic,
// durably. The merge never moves a range back: the members of a group
// commit independently, and a cursor a member took before another
// member's commit still carries that member's ranges at their old place.
// The wire's commit names no member and no generation, so a member's late
// commit for a range that has since moved to another member cannot be told
// apart; it is accepted, and changes only what it advances, which are
// records it was given. MemberCommit is the commit that names both.
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
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
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
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
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
	_ = b.plane.ViewTopicName(topic, func(st *metadata.State) {
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
	// Skipped counts the records retention deleted that the group's
	// commits passed without having read them; SkippedBound says the
	// count is an upper bound (an ancestor read for a narrower slice, or
	// a deletion record merged past its bound).
	Skipped      uint64
	SkippedBound bool
}

// RangeLag is one active range's lag.
type RangeLag struct {
	Range uint64
	Lag   uint64
}

// DescribeGroup reports a group's committed position and its lag. A group
// that has neither a committed position nor live members is unknown:
// answering it with the whole topic as lag would describe a group that
// does not exist (a typo reads as a real, far-behind group).
func (b *Broker) DescribeGroup(topic, group string) (GroupStatus, error) {
	st := GroupStatus{Group: group}
	topicID, err := b.topicID(topic)
	if err != nil {
		return st, err
	}
	pos := position{topicID: topicID}
	var committed bool
	_ = b.plane.ViewTopic(topicID, func(ms *metadata.State) {
		pos.entries = toCursorEntries(ms.GroupEntries(group, topicID))
		committed = containsString(ms.Groups(topicID), group)
		st.Skipped, st.SkippedBound, _ = ms.GroupSkipped(topic, group)
	})
	if !committed {
		live, err := b.liveGroups(b.life, topicID)
		if err != nil {
			return st, err
		}
		if !containsString(live, group) {
			return st, ErrGroupNotFound
		}
	}
	if len(pos.entries) > 0 {
		s := cursor.Encode(b.secret, cursor.Cursor{TopicID: topicID, Entries: pos.entries})
		st.Cursor = &s
	}
	plans, lin := b.plans(pos)
	scan := lagScanRecords
	for i := range plans {
		lag, err := b.rangeLag(&plans[i], pos.entries, lin, &scan)
		if err != nil {
			return GroupStatus{Group: group}, err
		}
		st.Ranges = append(st.Ranges, RangeLag{Range: plans[i].rangeID, Lag: lag})
		st.Lag += lag
	}
	return st, nil
}

// lagScanRecords bounds the ancestor records one describe reads to count
// lag exactly: past it, the rest is estimated, so a group far behind on a
// split topic (or a --watch loop) cannot make each describe read the whole
// history.
const lagScanRecords = 1 << 20

// rangeLag counts the records of a range's history the reader has not
// passed. The range's own records are counted by offset. An ancestor's
// records are shared between its descendants by key, so they are read and
// counted one by one: only those whose key lies in this range's slice and
// that the entries leave undelivered. Counting the ancestor's unread
// offsets instead would count each of its records once per child. Once
// scan (records left to read in this describe) runs out, the rest of an
// ancestor is estimated as its unread offsets times the slice's share of
// the ancestor's keyspace.
func (b *Broker) rangeLag(p *plan, entries []cursor.Entry, lin lineage, scan *int) (uint64, error) {
	var lag uint64
	bits := p.slice.Log2Size()
	for i := range p.sources {
		src := &p.sources[i]
		start, done := cursor.Start(entries, src.id, p.slice.Start, bits, sourceBase(src), lin.isAncestor)
		if done {
			continue
		}
		end := b.durableEnd(src)
		if end <= start {
			continue
		}
		if src.id == p.rangeID {
			lag += end - start
			continue
		}
		n, err := b.countUnread(p, src, entries, lin, start, end, scan)
		if err != nil {
			return 0, err
		}
		lag += n
	}
	return lag, nil
}

// countUnread counts the records of an ancestor source in [start, end)
// whose key lies in the plan's slice and which entries do not deliver,
// reading at most *scan of them and estimating the rest (see rangeLag).
func (b *Broker) countUnread(p *plan, src *source, entries []cursor.Entry, lin lineage, start, end uint64, scan *int) (uint64, error) {
	var n uint64
	next, stopped := start, *scan <= 0 // next: where the exact count stopped
	if !stopped {
		err := b.scanSlice(p, src, start, end, func(pos, offset uint64) bool {
			if *scan <= 0 {
				stopped, next = true, offset
				return false
			}
			*scan--
			if !cursor.Consumed(entries, src.id, pos, offset, lin.isAncestor) {
				n++
			}
			return true
		})
		if err != nil || !stopped {
			return n, err
		}
	}
	// The slice and the span are buddy blocks: after a split the slice is
	// a part of the ancestor's span, after a merge it covers all of it.
	var share uint8
	if sb, pb := src.span.Log2Size(), p.slice.Log2Size(); sb > pb {
		share = sb - pb
	}
	return n + (end-next)>>share, nil
}

// scanSlice calls fn, in offset order, with the key position and offset
// of every durable record of src in [start, end) whose key lies in the
// plan's slice, until fn returns false.
func (b *Broker) scanSlice(p *plan, src *source, start, end uint64, fn func(pos, offset uint64) bool) error {
	var recs []segment.Record
	for _, seg := range src.segments {
		if seg.End <= start && !seg.Active {
			continue
		}
		from := max(start, seg.Base)
		for from < end {
			buf, next, err := b.readSegment(b.life, seg, from, 1<<20, end)
			if err != nil {
				return fmt.Errorf("broker: scan segment %d: %w", seg.ID, err)
			}
			if len(buf) == 0 {
				break
			}
			batches, err := segment.SplitBatches(buf)
			if err != nil {
				return err
			}
			for _, batch := range batches {
				if recs, err = segment.DecodeRecords(batch, recs[:0]); err != nil {
					return fmt.Errorf("broker: scan decode: %w", err)
				}
				for _, r := range recs {
					if r.Offset < from || r.Offset >= end {
						continue
					}
					pos := src.span.Start // as filterBatches: a nil key sits at the source's first position
					if r.Key != nil {
						pos = keyspace.Position(r.Key, p.bits)
					}
					if p.slice.Contains(pos) && !fn(pos, r.Offset) {
						return nil
					}
				}
			}
			from = next
		}
	}
	return nil
}

// ListGroups names the groups with a committed position on the topic, and
// those with live members.
func (b *Broker) ListGroups(topic string) ([]string, error) {
	topicID, err := b.topicID(topic)
	if err != nil {
		return nil, err
	}
	var names []string
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { names = st.Groups(topicID) })
	live, err := b.liveGroups(b.life, topicID)
	if err != nil {
		return nil, err
	}
	for _, g := range live {
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
