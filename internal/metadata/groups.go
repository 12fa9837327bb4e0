package metadata

import (
	"cmp"
	"slices"
)

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
	// Stored entries inside a new one are replaced (last commit wins);
	// the new entries never replace each other: a commit may carry a wide
	// entry beside a narrower one with a higher offset, and both hold.
	for _, e := range add {
		bySource[e.Source] = slices.DeleteFunc(bySource[e.Source], func(o GroupEntry) bool { return o.within(e) })
	}
	for _, e := range add {
		bySource[e.Source] = append(bySource[e.Source], e)
	}
	out := make([]GroupEntry, 0, len(stored)+len(add))
	for _, es := range bySource {
		out = append(out, es...)
	}
	// Map order is random; sorting makes it deterministic. Of entries a
	// commit repeats for one source and slice, the highest offset stays.
	slices.SortFunc(out, func(a, b GroupEntry) int {
		if c := compareEntries(a, b); c != 0 {
			return c
		}
		return cmp.Compare(b.Offset, a.Offset)
	})
	return slices.CompactFunc(out, func(a, b GroupEntry) bool { return compareEntries(a, b) == 0 })
}

// validName: a user, group, replica or cluster id of 1..MaxNameLen bytes.
func validName(name string) bool { return name != "" && len(name) <= MaxNameLen }
