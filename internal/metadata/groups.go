package metadata

import (
	"cmp"
	"slices"
)

// commitOffsets: Group, Topic (name), Entries. The group's stored position
// for the topic is merged with the new entries: the result delivers what
// either delivered, so no slice's offset ever moves back. A group's members
// commit independently and a commit may be late or repeated (a cursor read
// before another member's commit, a retry); a commit that replaced stored
// entries would rewind the others' progress. Entries must name ranges of the
// topic and aligned slices of its keyspace.
func (s *State) commitOffsets(c *Command) Result {
	tr, refused := s.groupTarget(c)
	if refused != "" {
		return failed(refused)
	}
	merged := mergeEntries(tr.groups[c.Group], c.Entries)
	if len(merged) > MaxGroupEntries {
		return failed(ErrInvalidCommand)
	}
	tr.groups[c.Group] = merged
	return Result{TopicID: tr.t.ID}
}

// groupTarget checks what commit_offsets and set_offsets share: a valid
// group name, entries naming ranges and aligned slices of an existing
// topic, and room for the group under the topic's group quota. It returns
// the topic, or the reason to refuse.
func (s *State) groupTarget(c *Command) (*topicRec, Error) {
	if !validName(c.Group) || len(c.Entries) > MaxGroupEntries {
		return nil, ErrInvalidCommand
	}
	tr, ok := s.byName[c.Topic]
	if !ok {
		return nil, ErrNoSuchTopic
	}
	for _, e := range c.Entries {
		if !s.validEntry(tr, e) {
			return nil, ErrInvalidCommand
		}
	}
	if !groupAllowed(c, tr) {
		return nil, ErrQuotaExceeded
	}
	return tr, ""
}

// setOffsets: Group, Topic (name), Entries. Unlike commit_offsets it
// replaces the group's stored position, so it may move the group back: it
// is an operator's explicit reset (a seek), never a member's commit. An
// empty Entries positions the group at the start of the topic.
func (s *State) setOffsets(c *Command) Result {
	tr, refused := s.groupTarget(c)
	if refused != "" {
		return failed(refused)
	}
	// Merging the entries with nothing keeps the stored form canonical:
	// sorted, without entries another of the same source implies.
	tr.groups[c.Group] = mergeEntries(nil, c.Entries)
	return Result{TopicID: tr.t.ID}
}

// deleteGroup: Group, Topic (name). Removes the group's stored position;
// not_found when the group has none.
func (s *State) deleteGroup(c *Command) Result {
	tr, ok := s.byName[c.Topic]
	if !ok {
		return failed(ErrNoSuchTopic)
	}
	if _, ok := tr.groups[c.Group]; !ok {
		return failed(ErrNotFound)
	}
	delete(tr.groups, c.Group)
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

// mergeEntries returns the union of stored and add, sorted; stored is not
// modified. An entry is left out when another entry of the same source
// implies it: a slice containing its slice, with an offset at least its
// offset. So a commit behind the stored position changes nothing, one ahead
// absorbs the stored entries it passes, and a wide entry beside a narrower
// one with a higher offset keeps both.
func mergeEntries(stored, add []GroupEntry) []GroupEntry {
	all := slices.Concat(stored, add)
	// Within a source, by slice start, containing slices before the slices
	// inside them (aligned slices nest or are disjoint), and of equal slices
	// the highest offset first: one pass with a stack of the kept entries
	// containing the current one finds every implied entry in O(n log n).
	slices.SortFunc(all, func(a, b GroupEntry) int {
		return cmp.Or(
			cmp.Compare(a.Source, b.Source),
			cmp.Compare(a.SliceStart, b.SliceStart),
			cmp.Compare(b.SliceBits, a.SliceBits),
			cmp.Compare(b.Offset, a.Offset),
		)
	})
	out := make([]GroupEntry, 0, len(all))
	var open []GroupEntry // kept entries of the current source, each inside the one before
	for _, e := range all {
		for len(open) > 0 && (open[len(open)-1].Source != e.Source || !e.within(open[len(open)-1])) {
			open = open[:len(open)-1]
		}
		// The last open entry has the highest offset of those containing
		// e: each was kept only because it was above all it sits inside.
		if len(open) > 0 && open[len(open)-1].Offset >= e.Offset {
			continue
		}
		out = append(out, e)
		open = append(open, e)
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// validName: a user, group, replica or cluster id of 1..MaxNameLen bytes.
func validName(name string) bool { return name != "" && len(name) <= MaxNameLen }
