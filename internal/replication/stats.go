package replication

// FollowerLag is the most records a follower of the segment has yet to
// acknowledge fsynced: the primary's end minus the lowest follower match
// (0 without followers).
func (p *Primary) FollowerLag() uint64 {
	var lag uint64
	for _, f := range p.followers {
		lag = max(lag, p.end-f.match)
	}
	return lag
}
