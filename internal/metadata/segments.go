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
		Active: true, Base: c.Base, End: c.Base, OpenedAt: c.Now, Factor: len(c.Replicas),
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

// deleteSegment: Segment, which must be sealed, and Reason. A retention
// or ttl delete takes only the range's first segment, so retention makes
// holes only at the front. The range records the deleted span and the
// state the id (WasDeleted).
func (s *State) deleteSegment(c *Command) Result {
	if !validReason(c.Reason) {
		return failed(ErrInvalidCommand)
	}
	seg, ok := s.segments[c.Segment]
	if !ok {
		return failed(ErrNoSuchSegment)
	}
	if seg.Active {
		return failed(ErrSegmentActive)
	}
	rr := s.ranges[seg.Range]
	first := rr.segs[0] == seg
	if (c.Reason == ReasonRetention || c.Reason == ReasonTTL) && !first {
		return failed(ErrSegmentNotFirst)
	}
	if c.Reason == ReasonLost && (len(seg.Replicas) == 0 || !slices.Equal(seg.Replicas, c.Expect)) {
		return failed(ErrReplicasChanged)
	}
	rr.segs = slices.DeleteFunc(rr.segs, func(x *Segment) bool { return x == seg })
	delete(s.segments, seg.ID)
	rr.recordDeletion(seg, c.Reason, first, c.Now)
	s.deleted.add(seg.ID)
	if c.Reason == ReasonLost {
		s.lost.addBounded(MaxLostIDs, seg.ID)
	}
	return Result{SegmentID: seg.ID, TopicID: rr.r.Topic, Deleted: []uint64{seg.ID}}
}

// setSegmentReplicas: Segment, Expect, Replicas. The segment must be
// sealed (an active segment's replicas are its replica host's: changing
// them under it would split its quorum), have a list (a segment written
// without one has its only copy on a node no list names, which a list
// would make look superseded), and its list must still be Expect,
// compared in order, since the first is the primary. Replicas must be a
// valid, non-empty list keeping at least one current holder whose copy
// is not damaged: a list of nodes none of which holds a good copy would
// make every real copy look superseded (S3, S4). Holders leaving the
// list leave its damaged set too.
func (s *State) setSegmentReplicas(c *Command) Result {
	if len(c.Replicas) == 0 || !validReplicas(c.Replicas) {
		return failed(ErrInvalidCommand)
	}
	seg, ok := s.segments[c.Segment]
	switch {
	case !ok:
		return failed(ErrNoSuchSegment)
	case seg.Active:
		return failed(ErrSegmentActive)
	case !slices.Equal(seg.Replicas, c.Expect):
		return failed(ErrReplicasChanged)
	case len(seg.Replicas) == 0:
		return failed(ErrInvalidCommand)
	case !slices.ContainsFunc(c.Replicas, func(r string) bool {
		return slices.Contains(seg.Replicas, r) && !slices.Contains(seg.Damaged, r)
	}):
		return failed(ErrInvalidCommand)
	}
	seg.Replicas = slices.Clone(c.Replicas)
	seg.Damaged = slices.DeleteFunc(seg.Damaged, func(r string) bool { return !slices.Contains(seg.Replicas, r) })
	if len(seg.Damaged) == 0 {
		seg.Damaged = nil
	}
	return Result{SegmentID: seg.ID}
}

// markCopyDamaged: Segment, Node. The segment must be sealed and Node in
// its list (else replicas_changed: the copy is no longer listed). Marking
// a copy already marked changes nothing, so a retried mark converges.
func (s *State) markCopyDamaged(c *Command) Result {
	seg, ok := s.segments[c.Segment]
	switch {
	case c.Node == "":
		return failed(ErrInvalidCommand)
	case !ok:
		return failed(ErrNoSuchSegment)
	case seg.Active:
		return failed(ErrSegmentActive)
	case !slices.Contains(seg.Replicas, c.Node):
		return failed(ErrReplicasChanged)
	}
	if i, found := slices.BinarySearch(seg.Damaged, c.Node); !found {
		seg.Damaged = slices.Insert(seg.Damaged, i, c.Node)
	}
	return Result{SegmentID: seg.ID}
}
