package broker

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/metadata"
)

// Skips. Retention deletes a range's oldest sealed segments; a reader
// whose position lies in what it deleted reads on from the oldest record
// left (readSource starts a segment at its base) and is told how many
// records it missed. The count is the records of deleted spans
// (metadata.Range.DeletedBetween, which counts retention and operator
// deletions, never TTL ones) that the page's cursor passed: from each
// entry the reader had to the entry the page returns. The returned cursor
// has passed them, so they are told once. A reader with no entry for a
// source started at its oldest record and missed nothing. The rule is the
// one a group commit counts by (metadata), so a group's count and the sum
// of its pages' counts agree.

// skips is what pages told a reader: records missed, and whether the
// count is an upper bound.
type skips struct {
	n     uint64
	bound bool
}

func (s *skips) add(o skips) {
	s.n = satAdd(s.n, o.n)
	s.bound = s.bound || o.bound
}

// skipsBetween counts the deleted records a reader passed by moving from
// the entries before to those after. Each entry after is compared with the
// furthest entry before of the same source whose slice contains it; an
// entry narrower than its source's keys counts every deleted record of its
// offsets (whatever the key), so the count is then an upper bound, capped
// per source by what the source deleted over the offsets passed.
func (b *Broker) skipsBetween(topicID uint64, before, after []cursor.Entry) skips {
	moved, fresh := movedEntries(bySource(before), after)
	if len(moved) == 0 && len(fresh) == 0 {
		return skips{}
	}
	var out skips
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		moved = append(moved, finishedEntries(st, before, fresh)...)
		type span struct{ n, from, to uint64 }
		per := map[uint64]*span{}
		for _, m := range moved {
			r, ok := st.Range(m.to.Source)
			if !ok || len(r.Deleted) == 0 {
				continue
			}
			n, bound := r.DeletedBetween(m.from, m.to.Offset)
			if n == 0 {
				continue
			}
			s := per[m.to.Source]
			if s == nil {
				s = &span{from: m.from, to: m.to.Offset}
				per[m.to.Source] = s
			}
			s.n = satAdd(s.n, n)
			s.from, s.to = min(s.from, m.from), max(s.to, m.to.Offset)
			out.bound = out.bound || bound || m.to.SliceStart > r.Start || entryEnd(m.to) < r.End
		}
		for src, s := range per {
			r, _ := st.Range(src)
			cover, _ := r.DeletedBetween(s.from, s.to)
			out.n = satAdd(out.n, min(s.n, cover))
		}
	})
	return out
}

// move is an entry after a page and the offset its source's entry had
// before.
type move struct {
	from uint64
	to   cursor.Entry
}

// movedEntries pairs each entry of after with the furthest entry of
// before, of the same source, whose slice contains it, and keeps those
// that moved forward. An entry with no such entry before is the reader's
// first position in that source: it missed nothing there, and it is
// returned in fresh (it may mark an ancestor done: finishedEntries).
// Both lists are walked in source order side by side (bySource; a reader's
// position keeps them so), and an entry its source's only one before
// equals, most of them when a page reads a few of many ranges, costs one
// comparison: a page costs O(entries) and allocates nothing more.
func movedEntries(before []cursor.Entry, after []cursor.Entry) (moved []move, fresh []cursor.Entry) {
	j := 0
	for _, e := range bySource(after) {
		for j < len(before) && before[j].Source < e.Source {
			j++
		}
		k := j
		for k < len(before) && before[k].Source == e.Source {
			k++
		}
		if k == j+1 && before[j] == e {
			continue // neither moved nor new
		}
		from, found, same := uint64(0), false, false
		for _, o := range before[j:k] {
			if o.SliceStart <= e.SliceStart && entryEnd(o) >= entryEnd(e) {
				from, found = max(from, o.Offset), true
			}
			same = same || o.SliceStart == e.SliceStart && o.SliceBits == e.SliceBits
		}
		if found && e.Offset > from {
			moved = append(moved, move{from: from, to: e})
		}
		if !same {
			fresh = append(fresh, e)
		}
	}
	return moved, fresh
}

// bySource returns entries sorted by source: as they are when canonical,
// which a reader's position keeps them (a map per page cost more than the
// rest of the count at a thousand ranges), else a sorted copy.
func bySource(entries []cursor.Entry) []cursor.Entry {
	order := func(a, b cursor.Entry) int { return cmp.Compare(a.Source, b.Source) }
	if slices.IsSortedFunc(entries, order) {
		return entries
	}
	out := slices.Clone(entries)
	slices.SortStableFunc(out, order)
	return out
}

// finishedEntries are the entries of before whose source the page read
// to its end: a retired ancestor that a fresh entry of a descendant now
// covers, since an entry for a range marks its ancestors done for its
// slice. Everything deleted of the ancestor above the reader's old offset
// was passed, so each is a move to the end of the source's offsets.
func finishedEntries(st *metadata.State, before, fresh []cursor.Entry) []move {
	// Only an entry of a range with ancestors can finish one, and most
	// fresh entries are of ranges never split or merged: a reader's first
	// pass over a thousand such ranges looks at none of before.
	type heir struct {
		e       cursor.Entry
		lineage []uint64
	}
	var heirs []heir
	for _, e := range fresh {
		if r, ok := st.Range(e.Source); ok && len(r.Lineage) > 0 {
			heirs = append(heirs, heir{e, r.Lineage})
		}
	}
	if len(heirs) == 0 {
		return nil
	}
	var out []move
	for _, o := range before {
		covered := slices.ContainsFunc(heirs, func(h heir) bool {
			e := h.e
			if e.Source == o.Source || e.SliceStart >= entryEnd(o) || o.SliceStart >= entryEnd(e) {
				return false
			}
			return slices.Contains(h.lineage, o.Source)
		})
		if covered {
			to := o
			to.Offset = math.MaxUint64
			out = append(out, move{from: o.Offset, to: to})
		}
	}
	return out
}

// entryEnd is the end of an entry's slice of positions.
func entryEnd(e cursor.Entry) uint64 {
	if e.SliceBits >= 64 {
		return math.MaxUint64
	}
	if end := e.SliceStart + 1<<e.SliceBits; end > e.SliceStart {
		return end
	}
	return math.MaxUint64
}

// errSegmentGone is a read of a sealed segment the plan lists but whose
// files are gone: retention deleted it after the plan was taken. The
// read refreshes the plan and goes on; it never fails the page.
var errSegmentGone = errors.New("broker: segment deleted")

func segmentGone(segID uint64, err error) error {
	return &goneError{seg: segID, err: fmt.Errorf("%w: segment %d: %v", errSegmentGone, segID, err)}
}

// maxPlanRefreshes bounds how often one range's walk refreshes its plan
// after finding segments gone. Each refresh follows a committed deletion,
// so running out means the metadata here lags the disks: the walk ends
// where it is, and the next page looks again.
const maxPlanRefreshes = 3

// refreshPlan rebuilds the topic's plans from the metadata, after waiting
// for this node's replica of the range's metadata to catch up when it
// still lists a segment found gone, and returns the range's fresh plan:
// nil when the range is no longer active. listed says the metadata still
// lists the segment gone: then no copy holds a segment that exists, which
// must never read as an empty range.
func (pr *pageRead) refreshPlan(p *plan, gone uint64) (fresh *plan, listed bool) {
	fresh = pr.rebuildPlan(p.rangeID)
	if fresh != nil && fresh.lists(gone) {
		pr.b.catchUpRange(p.rangeID)
		fresh = pr.rebuildPlan(p.rangeID)
	}
	if fresh != nil && fresh.lists(gone) {
		return nil, true
	}
	return fresh, false
}

func (pr *pageRead) rebuildPlan(rangeID uint64) *plan {
	r := pr.reads
	r.mu.Lock()
	pr.b.rebuildLocked(r, pr.topicID)
	plans, lin := r.plans, r.lin
	r.mu.Unlock()
	pr.lin = lin
	for _, q := range plans {
		if q.rangeID == rangeID {
			return q
		}
	}
	return nil
}

// lists says some source of p still lists segment id.
func (p *plan) lists(id uint64) bool {
	for i := range p.sources {
		for _, s := range p.sources[i].segments {
			if s.ID == id {
				return true
			}
		}
	}
	return false
}

// goneError is errSegmentGone with the segment it names.
type goneError struct {
	seg uint64
	err error
}

func (e *goneError) Error() string { return e.err.Error() }
func (e *goneError) Unwrap() error { return e.err }

// satAdd adds without wrapping: a count past 2^64-1 stays there.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
