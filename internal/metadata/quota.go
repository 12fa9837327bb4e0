package metadata

// Quota is the limits a command is held to; a zero field sets no limit.
//
// The limits travel inside the command instead of living in the state: the
// proposer stamps its configured limits into each command it proposes, and
// Apply checks them against the state the command meets. So the check and
// the change happen in one step (two racing creates cannot both pass a
// check made beforehand), a logged command replays to the same result
// whatever the configuration is later, and commands logged before quotas
// existed carry none and replay unchanged.
type Quota struct {
	// Topics bounds the topics of the state (create_topic).
	Topics int `json:"topics,omitempty"`
	// Ranges bounds the ranges of the state, active and sealed
	// (create_topic, split_range, merge_ranges).
	Ranges int `json:"ranges,omitempty"`
	// OwnerTopics and OwnerRanges bound the topics whose Owner is the
	// command's Owner, and the ranges of those topics (create_topic with an
	// Owner).
	OwnerTopics int `json:"owner_topics,omitempty"`
	OwnerRanges int `json:"owner_ranges,omitempty"`
	// GroupsPerTopic bounds the groups with a committed position on a
	// topic; a group that has one may always commit (commit_offsets).
	GroupsPerTopic int `json:"groups_per_topic,omitempty"`
}

func (q *Quota) valid() bool {
	return q == nil || q.Topics >= 0 && q.Ranges >= 0 && q.OwnerTopics >= 0 &&
		q.OwnerRanges >= 0 && q.GroupsPerTopic >= 0
}

// over reports whether have+add passes limit (0 = no limit).
func over(limit, have, add int) bool { return limit > 0 && have+add > limit }

// usage is what one owner's topics hold.
type usage struct{ topics, ranges int }

// charge adds d to owner's usage (negative fields release). The node's own
// topics (owner "") are not accounted.
func (s *State) charge(owner string, d usage) {
	if owner == "" {
		return
	}
	u := s.owners[owner]
	u.topics += d.topics
	u.ranges += d.ranges
	if u == (usage{}) {
		delete(s.owners, owner)
		return
	}
	s.owners[owner] = u
}

// createAllowed checks a create_topic of n ranges against its quota.
func (s *State) createAllowed(c *Command, n int) Error {
	q := c.Quota
	if q == nil {
		return ""
	}
	u := s.owners[c.Owner]
	owned := c.Owner != ""
	if over(q.Topics, len(s.topics), 1) || over(q.Ranges, len(s.ranges), n) ||
		owned && (over(q.OwnerTopics, u.topics, 1) || over(q.OwnerRanges, u.ranges, n)) {
		return ErrQuotaExceeded
	}
	return ""
}

// rangesAllowed checks adding n ranges (a split or merge) against c's quota.
func (s *State) rangesAllowed(c *Command, n int) bool {
	return c.Quota == nil || !over(c.Quota.Ranges, len(s.ranges), n)
}

// groupAllowed checks a commit that would give topic tr a new group.
func groupAllowed(c *Command, tr *topicRec) bool {
	if _, ok := tr.groups[c.Group]; ok || c.Quota == nil {
		return true
	}
	return !over(c.Quota.GroupsPerTopic, len(tr.groups), 1)
}

// TopicCount is the number of topics.
func (s *State) TopicCount() int { return len(s.topics) }

// RangeCount is the number of ranges, active and sealed.
func (s *State) RangeCount() int { return len(s.ranges) }

// OwnerUsage returns the topics owner created that still exist and the
// ranges (active and sealed) they hold.
func (s *State) OwnerUsage(owner string) (topics, ranges int) {
	u := s.owners[owner]
	return u.topics, u.ranges
}

// rebuildOwners recomputes the owner index from the topics (Restore, and
// CheckInvariants to compare).
func (s *State) rebuildOwners() map[string]usage {
	owners := make(map[string]usage)
	for _, tr := range s.topics {
		if tr.t.Owner == "" {
			continue
		}
		u := owners[tr.t.Owner]
		u.topics++
		u.ranges += len(tr.t.Ranges)
		owners[tr.t.Owner] = u
	}
	return owners
}
