package metadata

import "slices"

// RangePage is a slice of a topic's ranges in id order, for describing a
// topic by pages: Ranges are those found, Last the id of the last range
// looked at (listed or passed over), More whether the topic has ranges
// after Last.
type RangePage struct {
	Ranges []Range
	Last   uint64
	More   bool
}

// TopicRangePage returns up to n of the topic's ranges with ids above
// after, ascending by id, only the active ones when activeOnly. It looks
// at no more than scan ranges, so a page of active ranges among many
// sealed ones costs at most scan steps and may come back short (or
// empty) with More set. A topic's range ids increase in creation order
// (one counter per shard, never reused), so it seeks by binary search and
// copies only what it returns. ok is false for an unknown topic.
func (s *State) TopicRangePage(topicID, after uint64, n, scan int, activeOnly bool) (p RangePage, ok bool) {
	tr, ok := s.topics[topicID]
	if !ok {
		return p, false
	}
	ids := tr.t.Ranges
	i, found := slices.BinarySearch(ids, after)
	if found {
		i++
	}
	p.Last = after
	for ; i < len(ids) && len(p.Ranges) < n && scan > 0; i++ {
		scan--
		p.Last = ids[i]
		rr := s.ranges[ids[i]]
		if rr == nil || (activeOnly && !rr.r.Active) {
			continue
		}
		p.Ranges = append(p.Ranges, rr.r.clone())
	}
	p.More = i < len(ids)
	return p, true
}

// TopicRangeCounts returns how many ranges the topic has, all and active.
func (s *State) TopicRangeCounts(topicID uint64) (all, active int) {
	tr, ok := s.topics[topicID]
	if !ok {
		return 0, 0
	}
	return len(tr.t.Ranges), len(tr.active)
}

// RangeSegmentsTail returns the range's newest n segments in offset order
// and how many older ones it left out.
func (s *State) RangeSegmentsTail(rangeID uint64, n int) (segs []Segment, omitted int) {
	rr, ok := s.ranges[rangeID]
	if !ok {
		return nil, 0
	}
	tail := rr.segs[max(len(rr.segs)-n, 0):]
	segs = make([]Segment, len(tail))
	for i, seg := range tail {
		segs[i] = seg.clone()
	}
	return segs, len(rr.segs) - len(tail)
}

// TopicHeader returns the topic's fields without its range list, which
// for a large topic is the costly part of Topic.
func (s *State) TopicHeader(name string) (Topic, bool) {
	return header(s.byName[name])
}

// TopicHeaderByID is TopicHeader for a topic named by its id.
func (s *State) TopicHeaderByID(id uint64) (Topic, bool) {
	return header(s.topics[id])
}

func header(tr *topicRec) (Topic, bool) {
	if tr == nil {
		return Topic{}, false
	}
	t := tr.t
	t.Ranges = nil
	return t, true
}

// TopicSize adds up the size of the topic's ranges in id order, rangeSize
// of each range and segSize of each of its segments, and stops as soon as
// the sum passes limit: it answers the sum so far, copying nothing, so
// that a description too large to send is refused for about the cost of
// what would fit. The callbacks must not keep or change what they are
// given. ok is false for an unknown topic.
func (s *State) TopicSize(topicID uint64, limit int, rangeSize func(*Range) int, segSize func(*Segment) int) (n int, ok bool) {
	tr, ok := s.topics[topicID]
	if !ok {
		return 0, false
	}
	for _, id := range tr.t.Ranges {
		rr := s.ranges[id]
		if rr == nil {
			continue
		}
		n += rangeSize(&rr.r)
		for _, seg := range rr.segs {
			if n > limit {
				return n, true
			}
			n += segSize(seg)
		}
		if n > limit {
			return n, true
		}
	}
	return n, true
}
