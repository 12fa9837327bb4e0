package metadata

import (
	"testing"
)

// TestEdgeSpanCapAcrossLiveSegment: once MaxDeletedSpans forces the two
// oldest spans to merge across a segment that is still live, deleting that
// segment later must still leave the spans ordered, disjoint and no fuller
// than their offsets (checkRetention), and the state must stay
// restorable from its own snapshot.
func TestEdgeSpanCapAcrossLiveSegment(t *testing.T) {
	st := New()
	n := 2*MaxDeletedSpans + 2
	sizes := make([]uint64, n)
	for i := range sizes {
		sizes[i] = 10
	}
	rid, segs := rangeWith(t, st, sizes...)
	// Every other segment: one span each, separated by live segments, so
	// the cap merges spans 0 and 1 across the live segment 1.
	for i := 0; i <= 2*MaxDeletedSpans; i += 2 {
		apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[i]})
	}
	// Deleting the segment the merged span already covers.
	st.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: segs[1]})
	if err := st.CheckInvariants(); err != nil {
		t.Errorf("deleting a segment inside a capped span broke the state: %v\nspans %+v", err, spans(t, st, rid)[:3])
	}
	if _, err := Restore(mustSnapshot(t, st)); err != nil {
		t.Errorf("a state's own snapshot is refused: %v", err)
	}
}

// TestEdgeSkipCountOverflowWithinCommit: two narrow entries of one commit
// each count a span of more than 2^63 records. The counter claims an
// upper bound, so it must never come out below what the range deleted
// over those offsets; a wrapping sum makes it tiny.
func TestEdgeSkipCountOverflowWithinCommit(t *testing.T) {
	st := New()
	big := uint64(1)<<63 + 10
	rid, segs := rangeWith(t, st, big)
	quarter := func(start, off uint64) GroupEntry {
		return GroupEntry{Source: rid, SliceStart: start, SliceBits: 2, Offset: off}
	}
	commit(t, st, KindCommitOffsets, "g", whole(rid, 0))
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	commit(t, st, KindCommitOffsets, "g", quarter(0, big), quarter(4, big))
	n, bound, ok := st.GroupSkipped("t", "g")
	if !ok || !bound || n < big {
		t.Fatalf("GroupSkipped = %d,%v,%v; an upper bound must be at least the %d records deleted", n, bound, ok, big)
	}
}

// TestEdgeSkipCountNeverDecreases: the skip counter only grows; a seek
// back and a second commit over the same deleted span must not wrap it
// around to a smaller number.
func TestEdgeSkipCountNeverDecreases(t *testing.T) {
	st := New()
	big := ^uint64(0) - 1
	rid, segs := rangeWith(t, st, big)
	commit(t, st, KindCommitOffsets, "g", whole(rid, 0))
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	commit(t, st, KindCommitOffsets, "g", whole(rid, big))
	first, _, _ := st.GroupSkipped("t", "g")
	commit(t, st, KindSetOffsets, "g", whole(rid, 0))
	commit(t, st, KindCommitOffsets, "g", whole(rid, big))
	second, _, _ := st.GroupSkipped("t", "g")
	if second < first {
		t.Fatalf("skip counter went from %d down to %d", first, second)
	}
}

// TestEdgePolicySpreadByMustBeAnAttributeName: spread_by names a node
// attribute, and node attribute keys are [a-z][a-z0-9_.-]* (membership
// refuses any other). A spread_by no node can ever carry (control bytes,
// spaces, upper case) puts every node in the one domain of nodes without
// it, so min_domains can never be met; it must be invalid_policy.
func TestEdgePolicySpreadByMustBeAnAttributeName(t *testing.T) {
	for _, attr := range []string{"zone\n", "\x00", "rack id", "Zone", "-zone"} {
		_, err := ValidatePolicy(map[string]PolicyValue{FieldSpreadBy: {Str: attr, IsStr: true}})
		if err == nil {
			t.Errorf("spread_by %q accepted; no node attribute can have that name", attr)
		}
	}
}
