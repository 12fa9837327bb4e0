package replica

// Lag sums what the primaries run here have not yet replicated.
type Lag struct {
	// Primaries and Copies count the segments this node replicates as
	// primary and as follower.
	Primaries, Copies int
	// Uncommitted is the records appended at the primaries and not yet
	// under their commit watermark (waiting for a quorum's fsync);
	// MaxUncommitted the most of one segment.
	Uncommitted, MaxUncommitted uint64
	// FollowerMax is the most records any follower of a primary here has
	// yet to acknowledge.
	FollowerMax uint64
}

// Lag reads the replication lag of the segments replicated here.
func (h *Host) Lag() Lag {
	h.mu.Lock()
	segs := make([]*seg, 0, len(h.mu.segs))
	for _, s := range h.mu.segs {
		segs = append(segs, s)
	}
	h.mu.Unlock()
	var l Lag
	for _, s := range segs {
		s.mu.Lock()
		if p := s.p; p != nil {
			l.Primaries++
			u := p.End() - p.Watermark()
			l.Uncommitted += u
			l.MaxUncommitted = max(l.MaxUncommitted, u)
			l.FollowerMax = max(l.FollowerMax, p.FollowerLag())
		} else {
			l.Copies++
		}
		s.mu.Unlock()
	}
	return l
}
