package metadata

import (
	"fmt"
	"maps"
	"slices"
)

// CheckInvariants verifies what every sequence of commands preserves. It
// walks the whole state, so it is for Restore, tests and simulators, not for
// a hot path. The invariants:
//   - the indexes agree with the tables (names, active ranges, segments);
//   - a topic's active ranges are aligned buddy blocks tiling [0, 2^bits);
//   - a range's lineage holds exactly its ancestors (the closure of its
//     parents), each listed after its own ancestors;
//   - a range has at most one active segment, none if sealed, and it is the
//     last; segments are ordered and never overlap; NextOffset bounds them;
//   - group entries are sorted, capped, and name ranges of their topic;
//   - ids never exceed their counters, and a sharded state's counters and
//     ids lie in its shard's block; ACLs belong to existing users;
//   - the owner index counts exactly each owner's topics and their ranges;
//   - policies are valid and canonical, at most MaxPolicies; deleted
//     spans are ordered within [0, NextOffset] and at most
//     MaxDeletedSpans; the deleted-id and lost-id records are bounded and name only
//     ids no longer held; skip counters belong to existing groups.
func (s *State) CheckInvariants() error {
	if len(s.byName) != len(s.topics) {
		return fmt.Errorf("name index has %d topics, table %d", len(s.byName), len(s.topics))
	}
	nRanges, nSegs := 0, 0
	for _, tr := range s.topics {
		if s.byName[tr.t.Name] != tr || !validTopicName(tr.t.Name) {
			return fmt.Errorf("topic %d: bad or unindexed name %q", tr.t.ID, tr.t.Name)
		}
		if err := s.checkTopic(tr); err != nil {
			return fmt.Errorf("topic %q: %w", tr.t.Name, err)
		}
		nRanges += len(tr.t.Ranges)
		for _, id := range tr.t.Ranges {
			nSegs += len(s.ranges[id].segs)
		}
	}
	if nRanges != len(s.ranges) || nSegs != len(s.segments) {
		return fmt.Errorf("orphans: %d/%d ranges, %d/%d segments reachable",
			nRanges, len(s.ranges), nSegs, len(s.segments))
	}
	if !maps.Equal(s.owners, s.rebuildOwners()) {
		return fmt.Errorf("owner index disagrees with the topics")
	}
	if err := s.checkShard(); err != nil {
		return err
	}
	if err := s.checkPolicies(); err != nil {
		return err
	}
	if err := s.checkDeletedIDs(); err != nil {
		return err
	}
	return s.checkAccess()
}

func (s *State) checkTopic(tr *topicRec) error {
	if tr.t.Bits < 1 || tr.t.Bits > MaxBits || tr.t.ID > s.lastTopic {
		return fmt.Errorf("bad bits %d or id %d", tr.t.Bits, tr.t.ID)
	}
	if tr.t.Policy != "" && !validName(tr.t.Policy) {
		return fmt.Errorf("bad policy name %q", tr.t.Policy)
	}
	if err := s.checkTiling(tr); err != nil {
		return err
	}
	for i, id := range tr.t.Ranges {
		rr := s.ranges[id]
		if rr == nil || rr.r.Topic != tr.t.ID {
			return fmt.Errorf("range %d: missing or foreign", id)
		}
		// Ids ascend strictly (paging seeks by binary search over them),
		// which also keeps a range from being listed twice.
		if i > 0 && id <= tr.t.Ranges[i-1] {
			return fmt.Errorf("range %d listed after range %d: ids out of order", id, tr.t.Ranges[i-1])
		}
		if err := s.checkRange(rr); err != nil {
			return fmt.Errorf("range %d: %w", id, err)
		}
	}
	if err := checkSkips(tr); err != nil {
		return err
	}
	return s.checkGroups(tr)
}

// checkTiling: the active index lists exactly the active ranges, in Start
// order, back to back from 0 to 2^bits.
func (s *State) checkTiling(tr *topicRec) error {
	var next uint64
	for _, rr := range tr.active {
		if !rr.r.Active || s.ranges[rr.r.ID] != rr || rr.r.Topic != tr.t.ID {
			return fmt.Errorf("active index holds range %d wrongly", rr.r.ID)
		}
		if rr.r.Start != next || !aligned(rr.r.Start, rr.r.Size()) {
			return fmt.Errorf("range %d [%d,%d) breaks the tiling at %d", rr.r.ID, rr.r.Start, rr.r.End, next)
		}
		next = rr.r.End
	}
	if next != keyspaceSize(tr.t.Bits) {
		return fmt.Errorf("active ranges end at %d, keyspace at %d", next, keyspaceSize(tr.t.Bits))
	}
	active := 0
	for _, id := range tr.t.Ranges {
		if rr := s.ranges[id]; rr != nil && rr.r.Active {
			active++
		}
	}
	if active != len(tr.active) {
		return fmt.Errorf("%d active ranges, %d indexed", active, len(tr.active))
	}
	return nil
}

func (s *State) checkRange(rr *rangeRec) error {
	r := rr.r
	if r.ID > s.lastRange || !aligned(r.Start, r.Size()) || r.End <= r.Start {
		return fmt.Errorf("bad id or span [%d,%d)", r.Start, r.End)
	}
	if err := s.checkLineage(r); err != nil {
		return err
	}
	if err := checkRetention(rr); err != nil {
		return err
	}
	return s.checkSegments(rr)
}

// checkLineage: Lineage == closure of Parents, no duplicates, every entry
// preceded by its own lineage, every ancestor a sealed range of the same
// topic. An ancestor need not overlap the range: after a merge and a split,
// the lineage of a half includes the other half's ancestors.
func (s *State) checkLineage(r Range) error {
	pos := make(map[uint64]int, len(r.Lineage))
	for i, id := range r.Lineage {
		a := s.ranges[id]
		if a == nil || a.r.Topic != r.Topic || a.r.Active || id == r.ID {
			return fmt.Errorf("ancestor %d missing, foreign, active or self", id)
		}
		if _, dup := pos[id]; dup {
			return fmt.Errorf("ancestor %d listed twice", id)
		}
		for _, anc := range a.r.Lineage {
			if j, ok := pos[anc]; !ok || j >= i {
				return fmt.Errorf("ancestor %d listed before its own ancestor %d", id, anc)
			}
		}
		pos[id] = i
	}
	if len(r.Parents) > 2 {
		return fmt.Errorf("%d parents", len(r.Parents))
	}
	closure := make(map[uint64]bool)
	for _, p := range r.Parents {
		pr := s.ranges[p]
		if pr == nil {
			return fmt.Errorf("parent %d missing", p)
		}
		closure[p] = true
		for _, anc := range pr.r.Lineage {
			closure[anc] = true
		}
	}
	for id := range closure {
		if _, ok := pos[id]; !ok {
			return fmt.Errorf("ancestor %d missing from the lineage", id)
		}
	}
	if len(closure) != len(r.Lineage) {
		return fmt.Errorf("lineage has %d entries, the parents' closure %d", len(r.Lineage), len(closure))
	}
	return nil
}

func (s *State) checkSegments(rr *rangeRec) error {
	var end uint64
	for i, seg := range rr.segs {
		last := i == len(rr.segs)-1
		switch {
		case s.segments[seg.ID] != seg || seg.Range != rr.r.ID || seg.ID > s.lastSegment:
			return fmt.Errorf("segment %d: unindexed or foreign", seg.ID)
		case i > 0 && rr.segs[i-1].ID >= seg.ID:
			return fmt.Errorf("segment %d: out of order", seg.ID)
		case seg.Base < end || seg.End < seg.Base || seg.Records > seg.End-seg.Base:
			return fmt.Errorf("segment %d [%d,%d) overlaps or is inverted (prev end %d)", seg.ID, seg.Base, seg.End, end)
		case seg.Active && (!last || !rr.r.Active || rr.head != seg || seg.End != seg.Base):
			return fmt.Errorf("segment %d: active but not the head of an active range", seg.ID)
		case !seg.Active && seg.End > rr.r.NextOffset:
			return fmt.Errorf("segment %d ends at %d past next offset %d", seg.ID, seg.End, rr.r.NextOffset)
		case !validDamaged(seg):
			return fmt.Errorf("segment %d: damaged copies %v are not a sorted subset of its replicas %v", seg.ID, seg.Damaged, seg.Replicas)
		}
		end = seg.End
	}
	if rr.head != nil && (len(rr.segs) == 0 || rr.segs[len(rr.segs)-1] != rr.head || !rr.head.Active) {
		return fmt.Errorf("head segment %d is not the last, active segment", rr.head.ID)
	}
	if rr.head != nil && rr.head.Base < rr.r.NextOffset {
		return fmt.Errorf("head segment %d opens below next offset %d", rr.head.ID, rr.r.NextOffset)
	}
	return nil
}

func (s *State) checkGroups(tr *topicRec) error {
	for g, es := range tr.groups {
		if !validName(g) || len(es) > MaxGroupEntries {
			return fmt.Errorf("group %q: bad name or %d entries", g, len(es))
		}
		for i, e := range es {
			if !s.validEntry(tr, e) || i > 0 && compareEntries(es[i-1], e) >= 0 {
				return fmt.Errorf("group %q: entry %d invalid or out of order", g, i)
			}
		}
	}
	return nil
}

func (s *State) checkAccess() error {
	for name, u := range s.users {
		perms, ok := normalPerms(u.Perms)
		if name != u.Name || !validName(name) || !ok || !slices.Equal(perms, u.Perms) {
			return fmt.Errorf("user %q: bad name or perms", name)
		}
	}
	for user, list := range s.acls {
		if s.users[user] == nil || len(list) == 0 {
			return fmt.Errorf("acls of unknown user %q", user)
		}
		for i, a := range list {
			if _, err := checkACL(&Command{User: a.User, Operation: a.Operation, Pattern: a.Pattern}); err != "" || a.User != user {
				return fmt.Errorf("acl %v: %s", a, err)
			}
			if i > 0 && compareACLs(list[i-1], a) >= 0 {
				return fmt.Errorf("acls of %q out of order", user)
			}
		}
	}
	if s.clusterSecret != nil && (len(s.clusterSecret) < MinSecretLen || len(s.clusterSecret) > MaxSecretLen) {
		return fmt.Errorf("cluster secret of %d bytes", len(s.clusterSecret))
	}
	return nil
}

// validDamaged: a segment's damaged set is sorted, without repeats, and
// names only its replicas.
func validDamaged(seg *Segment) bool {
	for i, d := range seg.Damaged {
		if !slices.Contains(seg.Replicas, d) || i > 0 && seg.Damaged[i-1] >= d {
			return false
		}
	}
	return true
}
