package metadata

// recordSealContent: Segment, End, Records, Bytes, MaxExpiry, ContentHash,
// Generation. A failover seals a segment at the end its fence agreed
// before any copy is cut to that end, so the seal knows only the end;
// the counts and the content hash stay zero, which retention, healing and
// describe would otherwise take as "empty". Once a copy is sealed at
// exactly that end, its footer supplies them. Only the first recording
// lands: later ones (every other holder seals its copy too) change
// nothing and answer the recorded segment, so they cannot replace the
// hash that copies are verified against. A seal that already carries a
// content hash (a roll's) is never changed.
func (s *State) recordSealContent(c *Command) Result {
	seg, ok := s.segments[c.Segment]
	switch {
	case !ok:
		return failed(ErrNoSuchSegment)
	case seg.Active:
		return failed(ErrSegmentActive)
	case c.End != seg.End || c.ContentHash == 0 || c.Bytes < 0 || c.Records > c.End-seg.Base:
		return failed(ErrInvalidCommand)
	}
	if seg.ContentHash == 0 {
		seg.Records, seg.Bytes, seg.MaxExpiry = c.Records, c.Bytes, c.MaxExpiry
		seg.ContentHash, seg.Generation = c.ContentHash, c.Generation
	}
	sealed := seg.clone()
	return Result{SegmentID: seg.ID, Sealed: &sealed}
}
