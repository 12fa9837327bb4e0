package broker

import (
	"cmp"
	"errors"
	"math"

	"github.com/malachi-log/malachi/internal/metadata"
)

// ErrTopicRecreated refuses a page asked of a topic whose id is not the
// one paging began on: it was deleted and created again meanwhile.
var ErrTopicRecreated = errors.New("broker: the topic was deleted and created again since paging began")

// PageQuery asks for one page of a topic's description. Ranges come in
// id order; ids increase as ranges are created and are never reused, so
// paging by "after the last id seen" lists every range that exists for
// the whole paging exactly once, whatever splits and merges happen
// meanwhile.
type PageQuery struct {
	// TopicID, when not 0, is the topic paging began on.
	TopicID uint64
	// After is the last range id of the previous page; 0 for the first.
	After uint64
	// Max bounds the ranges of the page, Scan the ranges looked at (it
	// matters with ActiveOnly: sealed ranges passed over cost too).
	Max, Scan  int
	ActiveOnly bool
	// MaxSegments bounds the segments listed per range: the newest are
	// kept, the rest counted in RangeDescription.SegmentsOmitted (0:
	// no bound). Segments bounds those of the page: it ends after the range that
	// reaches it.
	MaxSegments, Segments int
	// Groups asks for the topic's groups; Copies for segment copies.
	Groups, Copies bool
}

// TopicPage is one page of a topic's description: the topic's fields,
// Ranges of this page only (Groups only when asked), the topic's range
// counts, and where the page ended.
type TopicPage struct {
	TopicDescription
	RangesTotal, ActiveRanges int
	// Last is the id of the last range looked at; More says the topic
	// has ranges after it.
	Last uint64
	More bool
}

// DescribeTopicPage builds one page of a topic's description. It costs
// about the page, not the topic: it seeks to the first range after
// q.After and copies only the ranges and segments it returns.
func (b *Broker) DescribeTopicPage(name string, q PageQuery) (TopicPage, error) {
	var (
		p   TopicPage
		err error = metadata.ErrNoSuchTopic
	)
	_ = b.plane.ViewTopicName(name, func(st *metadata.State) {
		t, ok := st.TopicHeader(name)
		if !ok {
			return
		}
		if q.TopicID != 0 && q.TopicID != t.ID {
			err = ErrTopicRecreated
			return
		}
		rp, ok := st.TopicRangePage(t.ID, q.After, q.Max, q.Scan, q.ActiveOnly)
		if !ok {
			return
		}
		err = nil
		p.TopicDescription = TopicDescription{ID: t.ID, Name: t.Name, Bits: t.Bits, Owner: t.Owner, CreatedAt: msTime(t.CreatedAt)}
		if q.Groups {
			p.Groups = st.Groups(t.ID)
		}
		p.RangesTotal, p.ActiveRanges = st.TopicRangeCounts(t.ID)
		p.Last, p.More = rp.Last, rp.More
		p.Ranges = make([]RangeDescription, 0, len(rp.Ranges))
		listed := 0
		for i, r := range rp.Ranges {
			if q.Segments > 0 && listed >= q.Segments {
				p.Last, p.More = rp.Ranges[i-1].ID, true
				break
			}
			segs, omitted := st.RangeSegmentsTail(r.ID, cmp.Or(q.MaxSegments, math.MaxInt))
			listed += len(segs)
			p.Ranges = append(p.Ranges, describeRange(r, segs, omitted))
		}
	})
	if err != nil {
		return TopicPage{}, err
	}
	b.fillLive(&p.TopicDescription)
	if q.Copies {
		b.fillCopies(&p.TopicDescription)
	}
	return p, nil
}

// DescribeTopicSize estimates the size of the topic's whole description,
// ranges in id order, as rangeSize (of a range with that many parents)
// and segSize (of a segment with those replicas) count them, and stops
// as soon as the sum passes limit: a topic too large to describe whole is
// refused for about the cost of a frame, before anything is copied. The
// callbacks must not keep replicas.
func (b *Broker) DescribeTopicSize(name string, limit int, rangeSize func(parents int) int, segSize func(replicas []string) int) (int, error) {
	var (
		n   int
		err error = metadata.ErrNoSuchTopic
	)
	_ = b.plane.ViewTopicName(name, func(st *metadata.State) {
		t, ok := st.TopicHeader(name)
		if !ok {
			return
		}
		n, ok = st.TopicSize(t.ID, limit,
			func(r *metadata.Range) int { return rangeSize(len(r.Parents)) },
			func(s *metadata.Segment) int { return segSize(s.Replicas) })
		if ok {
			err = nil
		}
	})
	return n, err
}
