package metadata

import (
	"slices"

	"github.com/malachi-log/malachi/internal/cursor"
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
	stored := tr.groups[c.Group]
	merged := mergeEntries(stored, c.Entries)
	if len(merged) > MaxGroupEntries {
		return failed(ErrInvalidCommand)
	}
	s.countSkips(tr, c.Group, stored, c.Entries)
	tr.groups[c.Group] = merged
	tr.noteCommit(c.Group, c.Now)
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
	tr.noteCommit(c.Group, c.Now)
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
	delete(tr.skips, c.Group)
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
	// The same rule a reader's cursor follows (cursor.Merge); the types
	// differ only in their JSON tags.
	merged := cursor.Merge(toCursor(stored), toCursor(add))
	out := make([]GroupEntry, len(merged))
	for i, e := range merged {
		out[i] = GroupEntry(e)
	}
	slices.SortFunc(out, compareEntries)
	return out
}

func toCursor(es []GroupEntry) []cursor.Entry {
	out := make([]cursor.Entry, len(es))
	for i, e := range es {
		out[i] = cursor.Entry(e)
	}
	return out
}

// validName: a user, group, replica or cluster id of 1..MaxNameLen bytes.
func validName(name string) bool { return name != "" && len(name) <= MaxNameLen }

// noteCommit records when the group's position was last set, for the skip
// counter (deletedSince). Never moved back: proposers' clocks differ.
func (tr *topicRec) noteCommit(group string, now int64) {
	sc := tr.skips[group]
	if sc.at = max(sc.at, now); sc.at != 0 || sc.n != 0 {
		tr.skips[group] = sc
	}
}
