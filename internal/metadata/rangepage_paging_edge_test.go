package metadata

import (
	"encoding/json"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TopicRangePage seeks by binary search over a topic's range ids, which
// is right only while every topic's id list stays strictly ascending.
// Random command sequences (creates, splits, merges, deletes, topics
// deleted and created again), on a single-node state and on a sharded
// one, with the state replaced by its restored snapshot now and then,
// must keep the list ascending, and paging through it by "after the last
// id" must list each range exactly once, active-only paging each active
// one exactly once.
func TestRangePagesStayOrderedThroughSplitsMergesAndRestore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shard := uint16(rapid.SampledFrom([]int{0, 3}).Draw(t, "shard"))
		st := NewShard(shard)
		steps := rapid.IntRange(1, 150).Draw(t, "steps")
		for i := range steps {
			st.Apply(genCommand(t, st, int64(i)))
			if rapid.IntRange(0, 4).Draw(t, "restore") == 0 {
				st = roundTrip(t, st)
			}
			checkRangePages(t, st, rapid.IntRange(1, 5).Draw(t, "page"))
		}
	})
}

func checkRangePages(t *rapid.T, st *State, n int) {
	for _, tp := range st.Topics() {
		ids := tp.Ranges
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("topic %d: range ids not strictly ascending: %v", tp.ID, ids)
		}
		for _, activeOnly := range []bool{false, true} {
			var want []uint64
			for _, r := range st.TopicRanges(tp.ID) {
				if r.Active || !activeOnly {
					want = append(want, r.ID)
				}
			}
			slices.Sort(want)
			var got []uint64
			after := uint64(0)
			for pages := 0; ; pages++ {
				if pages > len(ids)+1 {
					t.Fatalf("topic %d: paging does not end", tp.ID)
				}
				p, ok := st.TopicRangePage(tp.ID, after, n, n*2, activeOnly)
				if !ok {
					t.Fatalf("topic %d: no page", tp.ID)
				}
				for _, r := range p.Ranges {
					got = append(got, r.ID)
				}
				if !p.More {
					break
				}
				if p.Last <= after {
					t.Fatalf("topic %d: page after %d ends at %d with more", tp.ID, after, p.Last)
				}
				after = p.Last
			}
			if !slices.Equal(got, want) {
				t.Fatalf("topic %d (active only %v): paged %v, want %v", tp.ID, activeOnly, got, want)
			}
			all, active := st.TopicRangeCounts(tp.ID)
			if all != len(ids) || active != len(st.ActiveRanges(tp.ID)) {
				t.Fatalf("topic %d: counts %d/%d, want %d/%d", tp.ID, all, active, len(ids), len(st.ActiveRanges(tp.ID)))
			}
		}
	}
}

// Restore "checks every invariant, so a damaged snapshot is refused rather
// than served", but CheckInvariants (invariants.go, checkTopic) does not
// check that a topic lists its ranges in ascending id order, which
// TopicRangePage's binary search now relies on: a snapshot listing them
// out of order is accepted, and paging through it skips ranges.
func TestRestoreRefusesRangesOutOfIDOrder(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 8, Ranges: 4})
	apply(t, st, Command{Kind: KindSplitRange, Range: 1})
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var img map[string]any
	if err := json.Unmarshal(b, &img); err != nil {
		t.Fatal(err)
	}
	topic := img["topics"].([]any)[0].(map[string]any)
	ids := topic["ranges"].([]any)
	slices.Reverse(ids)
	damaged, err := json.Marshal(img)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(damaged)
	if err == nil {
		tp, _ := r.Topic("t")
		var paged []uint64
		for after := uint64(0); ; {
			p, _ := r.TopicRangePage(tp.ID, after, 1, 1, false)
			for _, rg := range p.Ranges {
				paged = append(paged, rg.ID)
			}
			if !p.More {
				break
			}
			after = p.Last
		}
		t.Fatalf("restored a topic listing ranges %v; paging it lists %v", tp.Ranges, paged)
	}
}
