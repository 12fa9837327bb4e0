package metadata

import "slices"

// MaxSegmentID bounds MinID far below the counter's overflow.
const MaxSegmentID = 1 << 62

// openSegment: Range, Base, Replicas, MinID. The range must be active, have
// no active segment, and Base must not fall below NextOffset (offsets only
// grow, even after the last sealed segment was deleted). The new id is the
// next one, raised to MinID if that is higher.
func (s *State) openSegment(c *Command) Result {
	if !validReplicas(c.Replicas) {
		return failed(ErrInvalidCommand)
	}
	rr, ok := s.ranges[c.Range]
	switch {
	case !ok:
		return failed(ErrNoSuchRange)
	case !rr.r.Active:
		return failed(ErrSealed)
	case rr.head != nil:
		return failed(ErrActiveSegmentExists)
	case c.Now < rr.r.HeldUntil:
		return failed(ErrRangeHeld)
	case c.Base < rr.r.NextOffset:
		return failed(ErrSegmentOverlap)
	case !s.validMinID(c.MinID):
		return failed(ErrInvalidCommand)
	}
	if c.MinID > s.lastSegment+1 {
		s.lastSegment = c.MinID - 1
	}
	seg := &Segment{
		ID: s.newSegmentID(), Range: rr.r.ID, Replicas: slices.Clone(c.Replicas),
		Active: true, Base: c.Base, End: c.Base, OpenedAt: c.Now,
	}
	s.segments[seg.ID] = seg
	rr.segs = append(rr.segs, seg)
	rr.head = seg
	return Result{SegmentID: seg.ID}
}

// validReplicas: at most MaxReplicas distinct, non-empty names. An empty
// list is allowed: a single node keeps segments on itself.
func validReplicas(rs []string) bool {
	if len(rs) > MaxReplicas {
		return false
	}
	for i, r := range rs {
		if r == "" || len(r) > MaxNameLen || slices.Contains(rs[:i], r) {
			return false
		}
	}
	return true
}

// sealSegment: Segment, End, Records, Bytes, MaxExpiry, ContentHash,
// Generation. Sealing twice answers ErrAlreadySealed with the first seal in
// Result.Sealed, so racing sealers converge on the winner.
func (s *State) sealSegment(c *Command) Result {
	seg, ok := s.segments[c.Segment]
	if !ok {
		return failed(ErrNoSuchSegment)
	}
	if !seg.Active {
		sealed := seg.clone()
		return Result{Err: ErrAlreadySealed, SegmentID: seg.ID, Sealed: &sealed}
	}
	// Compaction leaves holes, so Records may be below End-Base, never above.
	if c.End < seg.Base || c.Records > c.End-seg.Base || c.Bytes < 0 {
		return failed(ErrInvalidCommand)
	}
	seg.Active = false
	seg.End, seg.Records, seg.Bytes = c.End, c.Records, c.Bytes
	seg.MaxExpiry, seg.ContentHash, seg.Generation = c.MaxExpiry, c.ContentHash, c.Generation
	seg.SealedAt = c.Now
	rr := s.ranges[seg.Range]
	rr.head = nil
	rr.r.NextOffset = c.End // End >= Base >= NextOffset
	sealed := seg.clone()
	return Result{SegmentID: seg.ID, Sealed: &sealed}
}

// deleteSegment: Segment, which must be sealed.
func (s *State) deleteSegment(c *Command) Result {
	seg, ok := s.segments[c.Segment]
	if !ok {
		return failed(ErrNoSuchSegment)
	}
	if seg.Active {
		return failed(ErrSegmentActive)
	}
	rr := s.ranges[seg.Range]
	rr.segs = slices.DeleteFunc(rr.segs, func(x *Segment) bool { return x == seg })
	delete(s.segments, seg.ID)
	return Result{SegmentID: seg.ID, Deleted: []uint64{seg.ID}}
}
