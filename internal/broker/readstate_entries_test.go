package broker

// The entry set a page reads through keeps a reader's cursor entries in
// canonical order and writes a range's entries back in place when their
// count holds. These tests drive it with random takes and puts (entries
// moved on, added, dropped, spread over several sources at once) and
// compare every answer with a plain model: the entries as a list, a
// source's entries filtered out of it, and the list sorted to answer.

import (
	"cmp"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/cursor"
	"pgregory.net/rapid"
)

func drawEntry(t *rapid.T, source uint64) cursor.Entry {
	return cursor.Entry{Source: source, SliceStart: rapid.Uint64Range(0, 3).Draw(t, "idx") << 2, SliceBits: 2,
		Offset: rapid.Uint64Range(0, 1000).Draw(t, "offset")}
}

// modelList is what the set must answer: every entry, sorted (stably) in
// canonical order.
func modelList(m []cursor.Entry) []cursor.Entry {
	out := slices.Clone(m)
	slices.SortStableFunc(out, cursor.Compare)
	return out
}

func TestPropEntrySetMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var model []cursor.Entry
		for range rapid.IntRange(0, 12).Draw(t, "start") {
			model = append(model, drawEntry(t, rapid.Uint64Range(1, 8).Draw(t, "source")))
		}
		given, modelBefore := slices.Clone(model), slices.Clone(model)
		s := newEntrySet(given)
		slices.SortStableFunc(model, cursor.Compare) // the set may sort its own copy, never given
		for range rapid.IntRange(0, 30).Draw(t, "ops") {
			ids := rapid.SliceOfNDistinct(rapid.Uint64Range(1, 8), 1, 3, func(id uint64) uint64 { return id }).Draw(t, "ids")
			var want []cursor.Entry
			for _, e := range modelList(model) {
				if slices.Contains(ids, e.Source) {
					want = append(want, e)
				}
			}
			got := s.take(ids)
			if !slices.Equal(got, cursor.Canonical(want)) {
				t.Fatalf("take(%v) = %v, want %v", ids, got, cursor.Canonical(want))
			}
			// What a walk puts back: the entries it took, each moved on
			// (the usual case), or some dropped and new ones added.
			next := slices.Clone(got)
			for i := range next {
				next[i].Offset += rapid.Uint64Range(0, 50).Draw(t, "advance")
			}
			if rapid.Bool().Draw(t, "reshape") {
				if len(next) > 0 && rapid.Bool().Draw(t, "drop") {
					next = slices.Delete(next, 0, 1)
				}
				for range rapid.IntRange(0, 2).Draw(t, "add") {
					next = append(next, drawEntry(t, rapid.SampledFrom(ids).Draw(t, "of")))
				}
				next = cursor.Canonical(next)
			}
			s.put(ids, next)
			model = slices.DeleteFunc(model, func(e cursor.Entry) bool { return slices.Contains(ids, e.Source) })
			model = append(model, next...)
		}
		if !slices.Equal(given, modelBefore) {
			t.Fatalf("the set changed the caller's entries: %v, were %v", given, modelBefore)
		}
		got, want := s.list(), modelList(model)
		if !slices.EqualFunc(got, want, func(a, b cursor.Entry) bool { return a == b }) {
			t.Fatalf("list() = %v, want %v", got, want)
		}
		if !slices.IsSortedFunc(got, func(a, b cursor.Entry) int {
			return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.SliceStart, b.SliceStart), cmp.Compare(a.SliceBits, b.SliceBits))
		}) {
			t.Fatalf("list() = %v is not in canonical order", got)
		}
	})
}
