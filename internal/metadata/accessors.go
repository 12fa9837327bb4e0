package metadata

import (
	"slices"
	"strings"
)

// Read accessors. They return copies: nothing a caller does to a returned
// value can reach the state.

// Topic looks a topic up by name.
func (s *State) Topic(name string) (Topic, bool) {
	tr, ok := s.byName[name]
	if !ok {
		return Topic{}, false
	}
	return tr.t.clone(), true
}

// TopicByID looks a topic up by id.
func (s *State) TopicByID(id uint64) (Topic, bool) {
	tr, ok := s.topics[id]
	if !ok {
		return Topic{}, false
	}
	return tr.t.clone(), true
}

// Topics returns every topic sorted by name.
func (s *State) Topics() []Topic {
	out := make([]Topic, 0, len(s.topics))
	for _, tr := range s.topics {
		out = append(out, tr.t.clone())
	}
	slices.SortFunc(out, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Range looks a range up by id.
func (s *State) Range(id uint64) (Range, bool) {
	rr, ok := s.ranges[id]
	if !ok {
		return Range{}, false
	}
	return rr.r.clone(), true
}

// ActiveRanges returns the topic's active ranges sorted by Start; they tile
// its keyspace. Nil for an unknown topic.
func (s *State) ActiveRanges(topicID uint64) []Range {
	tr, ok := s.topics[topicID]
	if !ok {
		return nil
	}
	out := make([]Range, len(tr.active))
	for i, rr := range tr.active {
		out[i] = rr.r.clone()
	}
	return out
}

// TopicRanges returns every range of the topic, active and sealed, in
// creation order.
func (s *State) TopicRanges(topicID uint64) []Range {
	tr, ok := s.topics[topicID]
	if !ok {
		return nil
	}
	out := make([]Range, len(tr.t.Ranges))
	for i, id := range tr.t.Ranges {
		out[i] = s.ranges[id].r.clone()
	}
	return out
}

// Segment looks a segment up by id.
func (s *State) Segment(id uint64) (Segment, bool) {
	seg, ok := s.segments[id]
	if !ok {
		return Segment{}, false
	}
	return seg.clone(), true
}

// SegmentDeleted reports whether segment id was allocated by this state
// and has been deleted since. Ids are never reused, so an id of this
// state's shard at or below its counter that it no longer holds is gone
// for good; an id above the counter may belong to a command not applied
// here yet, and is not reported.
func (s *State) SegmentDeleted(id uint64) bool {
	if id == 0 || id > s.lastSegment || ShardOf(id) != s.shard {
		return false
	}
	_, ok := s.segments[id]
	return !ok
}

// RangeSegments returns the range's segments in offset order (the active
// one, if any, last).
func (s *State) RangeSegments(rangeID uint64) []Segment {
	rr, ok := s.ranges[rangeID]
	if !ok {
		return nil
	}
	out := make([]Segment, len(rr.segs))
	for i, seg := range rr.segs {
		out[i] = seg.clone()
	}
	return out
}

// ActiveSegment returns the range's active segment.
func (s *State) ActiveSegment(rangeID uint64) (Segment, bool) {
	rr, ok := s.ranges[rangeID]
	if !ok || rr.head == nil {
		return Segment{}, false
	}
	return rr.head.clone(), true
}

// GroupEntries returns the group's committed position for the topic,
// sorted by (Source, SliceStart, SliceBits). Nil when nothing was committed.
func (s *State) GroupEntries(group string, topicID uint64) []GroupEntry {
	tr, ok := s.topics[topicID]
	if !ok {
		return nil
	}
	return slices.Clone(tr.groups[group])
}

// Groups returns the names of the groups that committed to the topic, sorted.
func (s *State) Groups(topicID uint64) []string {
	tr, ok := s.topics[topicID]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(tr.groups))
	for g := range tr.groups {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

// User looks a user up by name.
func (s *State) User(name string) (User, bool) {
	u, ok := s.users[name]
	if !ok {
		return User{}, false
	}
	return u.clone(), true
}

// Users returns every user sorted by name.
func (s *State) Users() []User {
	out := make([]User, 0, len(s.users))
	for _, u := range s.users {
		out = append(out, u.clone())
	}
	slices.SortFunc(out, func(a, b User) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ACLs returns the user's grants sorted by (Operation, Pattern).
func (s *State) ACLs(user string) []ACL {
	return slices.Clone(s.acls[user])
}

// ClusterID returns the id set by init_cluster ("" before).
func (s *State) ClusterID() string { return s.clusterID }

// ClusterSecret returns the secret set by init_cluster (nil before). It keys
// cursor MACs.
func (s *State) ClusterSecret() []byte { return slices.Clone(s.clusterSecret) }
