package metadata

import "slices"

// commitOffsets: Group, Topic (name), Entries. The group's stored position
// for the topic is merged with the new entries: for each new entry, the
// stored entries of the same Source whose slice lies inside the new entry's
// slice are replaced by it (the last commit wins); other stored entries stay.
// Entries must name ranges of the topic and aligned slices of its keyspace.
func (s *State) commitOffsets(c *Command) Result {
	if !validName(c.Group) || len(c.Entries) > MaxGroupEntries {
		return failed(ErrInvalidCommand)
	}
	tr, ok := s.byName[c.Topic]
	if !ok {
		return failed(ErrNoSuchTopic)
	}
	for _, e := range c.Entries {
		if !s.validEntry(tr, e) {
			return failed(ErrInvalidCommand)
		}
	}
	merged := mergeEntries(tr.groups[c.Group], c.Entries)
	if len(merged) > MaxGroupEntries {
		return failed(ErrInvalidCommand)
	}
	tr.groups[c.Group] = merged
	return Result{TopicID: tr.t.ID}
}

func (s *State) validEntry(tr *topicRec, e GroupEntry) bool {
	if e.SliceBits > tr.t.Bits || !aligned(e.SliceStart, 1<<e.SliceBits) ||
		e.sliceEnd() > keyspaceSize(tr.t.Bits) {
		return false
	}
	rr, ok := s.ranges[e.Source]
	return ok && rr.r.Topic == tr.t.ID
}

// mergeEntries returns a new sorted slice; stored is not modified. Work is
// grouped by Source so a commit costs the entries per source, not the
// product of the two lists.
func mergeEntries(stored, add []GroupEntry) []GroupEntry {
	bySource := make(map[uint64][]GroupEntry)
	for _, e := range stored {
		bySource[e.Source] = append(bySource[e.Source], e)
	}
	for _, e := range add {
		kept := slices.DeleteFunc(bySource[e.Source], func(o GroupEntry) bool { return o.within(e) })
		bySource[e.Source] = append(kept, e)
	}
	out := make([]GroupEntry, 0, len(stored)+len(add))
	for _, es := range bySource {
		out = append(out, es...)
	}
	slices.SortFunc(out, compareEntries) // map order is random; sorting makes it deterministic
	return out
}

// validName: a user, group, replica or cluster id of 1..MaxNameLen bytes.
func validName(name string) bool { return name != "" && len(name) <= MaxNameLen }
