package metadata

import (
	"slices"
	"sort"
)

// splitRange: Range. Seal-first rule: every segment of the range must be
// sealed (the caller fences and seals the head first), so no write can land
// in the parent after its children exist. The parent is sealed and replaced
// by its two halves; Result.RangeIDs = [lo, hi].
func (s *State) splitRange(c *Command) Result {
	rr, ok := s.ranges[c.Range]
	if !ok {
		return failed(ErrNoSuchRange)
	}
	if !rr.r.Active {
		return failed(ErrSealed)
	}
	lo, hi, ok := halves(rr.r)
	if !ok {
		return failed(ErrCannotSplit)
	}
	if rr.head != nil {
		return failed(ErrActiveSegmentExists)
	}
	if !s.rangesAllowed(c, 2) {
		return failed(ErrQuotaExceeded)
	}
	tr := s.topics[rr.r.Topic]
	i := activeIndex(tr, rr.r.Start)
	lineage := append(slices.Clone(rr.r.Lineage), rr.r.ID)
	children := make([]*rangeRec, 2)
	for j, span := range [2][2]uint64{lo, hi} {
		children[j] = s.addRange(tr, Range{
			ID: s.newRangeID(), Topic: tr.t.ID, Start: span[0], End: span[1], Active: true,
			Parents: []uint64{rr.r.ID}, Lineage: slices.Clone(lineage), CreatedAt: c.Now,
		})
	}
	rr.r.Active, rr.r.SealedAt = false, c.Now
	tr.active = slices.Replace(tr.active, i, i+1, children...)
	return Result{TopicID: tr.t.ID, RangeIDs: []uint64{children[0].r.ID, children[1].r.ID}}
}

// mergeRanges: Range, RangeB. Both active buddies of one topic with sealed
// heads. They are sealed and replaced by their union, whose Parents are
// [lower, upper] and whose Lineage is lower's, then upper's ancestors not
// yet listed, then lower and upper. Each part is ancestor-ordered and an
// ancestor shared by both is listed at its first (lower) position, before
// everything that descends from it, so the order stays a linear extension.
func (s *State) mergeRanges(c *Command) Result {
	a, okA := s.ranges[c.Range]
	b, okB := s.ranges[c.RangeB]
	switch {
	case !okA || !okB:
		return failed(ErrNoSuchRange)
	case a.r.Topic != b.r.Topic:
		return failed(ErrDifferentTopic)
	case !a.r.Active || !b.r.Active:
		return failed(ErrSealed)
	case !buddies(a.r, b.r):
		return failed(ErrNotBuddies)
	case a.head != nil || b.head != nil:
		return failed(ErrActiveSegmentExists)
	case !s.rangesAllowed(c, 1):
		return failed(ErrQuotaExceeded)
	}
	if b.r.Start < a.r.Start {
		a, b = b, a
	}
	tr := s.topics[a.r.Topic]
	i := activeIndex(tr, a.r.Start) // b is at i+1: buddies are adjacent
	child := s.addRange(tr, Range{
		ID: s.newRangeID(), Topic: tr.t.ID, Start: a.r.Start, End: b.r.End, Active: true,
		Parents: []uint64{a.r.ID, b.r.ID}, Lineage: mergedLineage(a.r, b.r), CreatedAt: c.Now,
	})
	a.r.Active, a.r.SealedAt = false, c.Now
	b.r.Active, b.r.SealedAt = false, c.Now
	tr.active = slices.Replace(tr.active, i, i+2, child)
	return Result{TopicID: tr.t.ID, RangeIDs: []uint64{child.r.ID}}
}

// mergedLineage is dedup(lower.Lineage ++ upper.Lineage ++ [lower, upper]),
// keeping first occurrences.
func mergedLineage(lower, upper Range) []uint64 {
	out := make([]uint64, 0, len(lower.Lineage)+len(upper.Lineage)+2)
	seen := make(map[uint64]bool, cap(out))
	for _, ids := range [][]uint64{lower.Lineage, upper.Lineage, {lower.ID, upper.ID}} {
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// activeIndex finds the active range starting at start (binary search).
func activeIndex(tr *topicRec, start uint64) int {
	return sort.Search(len(tr.active), func(i int) bool { return tr.active[i].r.Start >= start })
}

// ActiveRangeFor returns the active range of the topic whose span holds
// pos: a binary search over the active ranges, which tile the keyspace.
func (s *State) ActiveRangeFor(topicID, pos uint64) (Range, bool) {
	tr, ok := s.topics[topicID]
	if !ok || pos >= keyspaceSize(tr.t.Bits) {
		return Range{}, false
	}
	// The first range starting after pos, minus one, is the one holding it.
	i := sort.Search(len(tr.active), func(i int) bool { return tr.active[i].r.Start > pos }) - 1
	if i < 0 || !tr.active[i].r.Contains(pos) {
		return Range{}, false
	}
	return tr.active[i].r.clone(), true
}

// IsAncestor reports whether anc is in desc's lineage.
func (s *State) IsAncestor(anc, desc uint64) bool {
	rr, ok := s.ranges[desc]
	return ok && slices.Contains(rr.r.Lineage, anc)
}

// holdRange: Range, Until. Sets (or, with Until 0, releases) the range's
// hold on opening segments. The range must be active, and Until no
// further than MaxHoldMs past the command's own time.
func (s *State) holdRange(c *Command) Result {
	rr, ok := s.ranges[c.Range]
	switch {
	case !ok:
		return failed(ErrNoSuchRange)
	case !rr.r.Active:
		return failed(ErrSealed)
	case c.Until < 0 || c.Until > c.Now+MaxHoldMs:
		return failed(ErrInvalidCommand)
	}
	rr.r.HeldUntil = c.Until
	return Result{TopicID: rr.r.Topic}
}
