package metadata

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// rangeWith creates topic "t" with one range and seals a segment of n
// offsets (all records present) for each n, back to back from offset 0.
// It returns the range id and the segment ids.
func rangeWith(t *testing.T, st *State, ns ...uint64) (uint64, []uint64) {
	t.Helper()
	res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 4})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	rid := res.RangeIDs[0]
	return rid, appendSegments(t, st, rid, ns...)
}

func appendSegments(t *testing.T, st *State, rid uint64, ns ...uint64) []uint64 {
	t.Helper()
	var ids []uint64
	for _, n := range ns {
		r, _ := st.Range(rid)
		open := apply(t, st, Command{Kind: KindOpenSegment, Range: rid, Base: r.NextOffset})
		if open.Err != nil {
			t.Fatal(open.Err)
		}
		seal := apply(t, st, Command{Kind: KindSealSegment, Segment: open.SegmentID, End: r.NextOffset + n, Records: n})
		if seal.Err != nil {
			t.Fatal(seal.Err)
		}
		ids = append(ids, open.SegmentID)
	}
	return ids
}

func spans(t *testing.T, st *State, rid uint64) []DeletedSpan {
	t.Helper()
	r, ok := st.Range(rid)
	if !ok {
		t.Fatalf("no range %d", rid)
	}
	return r.Deleted
}

func TestRetentionDeletesOnlyThePrefix(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10, 10)
	head := apply(t, st, Command{Kind: KindOpenSegment, Range: rid, Base: 30}).SegmentID
	for _, reason := range []string{ReasonRetention, ReasonTTL} {
		before := mustSnapshot(t, st)
		wantErr(t, apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[1], Reason: reason}), ErrSegmentNotFirst)
		if !bytes.Equal(before, mustSnapshot(t, st)) {
			t.Fatal("refused delete changed the state")
		}
	}
	wantErr(t, apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: "age"}), ErrInvalidCommand)
	res := apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	if res.Err != nil || !slices.Equal(res.Deleted, []uint64{segs[0]}) {
		t.Fatalf("retention delete of the first: %+v", res)
	}
	if r, _ := st.Range(rid); r.Trimmed != 10 {
		t.Fatalf("trimmed %d, want 10", r.Trimmed)
	}
	// An operator may still delete in the middle; the front is unchanged.
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[2]})
	if r, _ := st.Range(rid); r.Trimmed != 10 {
		t.Fatalf("trimmed %d after a middle delete, want 10", r.Trimmed)
	}
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[1], Reason: ReasonTTL})
	if r, _ := st.Range(rid); r.Trimmed != 30 {
		t.Fatalf("trimmed %d with only the head left, want 30", r.Trimmed)
	}
	// The active head is first now, but never deletable.
	wantErr(t, apply(t, st, Command{Kind: KindDeleteSegment, Segment: head, Reason: ReasonRetention}), ErrSegmentActive)
	want := []DeletedSpan{{Base: 0, End: 10, Records: 10, Skip: true}, {Base: 10, End: 20, Records: 10},
		{Base: 20, End: 30, Records: 10, Skip: true}}
	if got := spans(t, st, rid); !slices.Equal(got, want) {
		t.Fatalf("spans %+v\nwant %+v", got, want)
	}
}

// TestDeletedSpansMerge: alike neighbours merge (also across a gap no
// segment holds), unlike ones stay apart.
func TestDeletedSpansMerge(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10)
	// A gap of 5 offsets no segment ever held.
	open := apply(t, st, Command{Kind: KindOpenSegment, Range: rid, Base: 25}).SegmentID
	apply(t, st, Command{Kind: KindSealSegment, Segment: open, End: 35, Records: 4})
	segs = append(segs, open)
	segs = append(segs, appendSegments(t, st, rid, 10)...)
	for _, id := range segs[:3] {
		apply(t, st, Command{Kind: KindDeleteSegment, Segment: id, Reason: ReasonRetention})
	}
	want := []DeletedSpan{{Base: 0, End: 35, Records: 24, Skip: true}}
	if got := spans(t, st, rid); !slices.Equal(got, want) {
		t.Fatalf("spans %+v\nwant %+v", got, want)
	}
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[3], Reason: ReasonTTL})
	want = append(want, DeletedSpan{Base: 35, End: 45, Records: 10})
	if got := spans(t, st, rid); !slices.Equal(got, want) {
		t.Fatalf("spans %+v\nwant %+v", got, want)
	}
	// A middle delete between two alike spans joins them.
	st2 := New()
	rid2, s2 := rangeWith(t, st2, 5, 5, 5, 5)
	apply(t, st2, Command{Kind: KindDeleteSegment, Segment: s2[0]})
	apply(t, st2, Command{Kind: KindDeleteSegment, Segment: s2[2]})
	if got := spans(t, st2, rid2); len(got) != 2 {
		t.Fatalf("spans with a live segment between: %+v", got)
	}
	apply(t, st2, Command{Kind: KindDeleteSegment, Segment: s2[1]})
	if got := spans(t, st2, rid2); !slices.Equal(got, []DeletedSpan{{Base: 0, End: 15, Records: 15, Skip: true}}) {
		t.Fatalf("spans after filling the hole: %+v", got)
	}
}

// TestDeletedSpansCap: alternating reasons never merge, so the cap merges
// the oldest two and their count becomes an upper bound.
func TestDeletedSpansCap(t *testing.T) {
	st := New()
	n := MaxDeletedSpans + 3
	ns := make([]uint64, n)
	for i := range ns {
		ns[i] = 2
	}
	rid, segs := rangeWith(t, st, ns...)
	for i, id := range segs {
		reason := ReasonRetention
		if i%2 == 1 {
			reason = ReasonTTL
		}
		if res := apply(t, st, Command{Kind: KindDeleteSegment, Segment: id, Reason: reason}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	got := spans(t, st, rid)
	if len(got) != MaxDeletedSpans {
		t.Fatalf("%d spans, want %d", len(got), MaxDeletedSpans)
	}
	// 67 spans folded into 64: the first holds the oldest four.
	if got[0] != (DeletedSpan{Base: 0, End: 8, Records: 8, Skip: true, Bound: true}) {
		t.Fatalf("oldest span %+v", got[0])
	}
	if got[1].Bound || got[1].Base != 8 {
		t.Fatalf("second span %+v: should be untouched", got[1])
	}
	// Whole span: its count, flagged as a bound; ttl spans add nothing.
	if n, bound := got0(st, rid).DeletedBetween(0, 12); n != 8+2 || !bound {
		t.Fatalf("DeletedBetween(0,12) = %d,%v, want 10,true", n, bound)
	}
	if n, bound := got0(st, rid).DeletedBetween(10, 12); n != 0 || bound {
		t.Fatalf("DeletedBetween over a ttl span = %d,%v, want 0,false", n, bound)
	}
}

func got0(st *State, rid uint64) Range { r, _ := st.Range(rid); return r }

func TestDeletedBetween(t *testing.T) {
	r := Range{Deleted: []DeletedSpan{
		{Base: 0, End: 10, Records: 10, Skip: true},
		{Base: 10, End: 20, Records: 10},            // ttl: never a skip
		{Base: 20, End: 40, Records: 5, Skip: true}, // compacted: 5 of 20 offsets
		{Base: 50, End: 60, Records: 10, Skip: true},
	}}
	cases := []struct {
		from, to uint64
		n        uint64
		bound    bool
	}{
		{0, 100, 25, false}, // every span whole: exact
		{0, 10, 10, false},
		{3, 7, 4, false},   // dense span, partly: exact
		{10, 20, 0, false}, // ttl only
		{20, 40, 5, false}, // compacted span, whole: exact
		{25, 30, 5, true},  // compacted span, partly: capped, a bound
		{25, 27, 2, true},
		{40, 50, 0, false},
		{55, 1000, 5, false},
		{7, 7, 0, false},
		{9, 51, 1 + 5 + 1, false},
	}
	for _, c := range cases {
		n, bound := r.DeletedBetween(c.from, c.to)
		if n != c.n || bound != c.bound {
			t.Errorf("DeletedBetween(%d,%d) = %d,%v, want %d,%v", c.from, c.to, n, bound, c.n, c.bound)
		}
	}
}

func TestWasDeleted(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 1, 1, 1)
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	if !st.WasDeleted(segs[0]) || st.WasDeleted(segs[1]) || st.WasDeleted(999) {
		t.Fatal("WasDeleted wrong after delete_segment")
	}
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "u"})
	uRange := got0(st, rid).ID + 1
	u := appendSegments(t, st, uRange, 3, 3)
	head := apply(t, st, Command{Kind: KindOpenSegment, Range: uRange, Base: 6}).SegmentID
	apply(t, st, Command{Kind: KindDeleteTopic, Topic: "u"})
	restored, err := Restore(mustSnapshot(t, st))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append(u, head, segs[0]) {
		if !restored.WasDeleted(id) {
			t.Errorf("segment %d: not reported deleted after a snapshot round trip", id)
		}
	}
	if restored.WasDeleted(segs[1]) {
		t.Error("a live segment reported deleted")
	}
}

// TestWasDeletedEvictsOldest: the record keeps the last MaxDeletedIDs ids.
func TestWasDeletedEvictsOldest(t *testing.T) {
	st := New()
	res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 4})
	rid := res.RangeIDs[0]
	var first, last uint64
	for i := range MaxDeletedIDs + 2 {
		open := st.Apply(Command{V: Version, Kind: KindOpenSegment, Range: rid, Base: uint64(i)})
		st.Apply(Command{V: Version, Kind: KindSealSegment, Segment: open.SegmentID, End: uint64(i + 1), Records: 1})
		if del := st.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: open.SegmentID, Reason: ReasonRetention}); del.Err != nil {
			t.Fatal(del.Err)
		}
		if i == 0 {
			first = open.SegmentID
		}
		last = open.SegmentID
	}
	if err := st.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if st.WasDeleted(first) || st.WasDeleted(first+1) || !st.WasDeleted(first+2) || !st.WasDeleted(last) {
		t.Fatal("eviction did not drop exactly the two oldest ids")
	}
	restored, err := Restore(mustSnapshot(t, st))
	if err != nil {
		t.Fatal(err)
	}
	if restored.WasDeleted(first+1) || !restored.WasDeleted(first+2) || !restored.WasDeleted(last) {
		t.Fatal("restored record differs")
	}
}

// TestRestoreRefusesRetentionFaults: spans out of order or past
// NextOffset, a trimmed front above a live segment, and a deleted id
// still held are refused.
func TestRestoreRefusesRetentionFaults(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10, 10)
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[2], Reason: ReasonOperator})
	apply(t, st, Command{Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: []GroupEntry{{Source: rid, SliceBits: 4}}})
	apply(t, st, Command{Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: []GroupEntry{{Source: rid, SliceBits: 4, Offset: 12}}})
	good := string(mustSnapshot(t, st))
	for name, edit := range map[string][2]string{
		"span past next":  {`"base":20,"end":30`, `"base":20,"end":31`},
		"spans unordered": {`"base":20,"end":30`, `"base":5,"end":30`},
		"overfull span":   {`"end":10,"records":10`, `"end":10,"records":11`},
		"trimmed high":    {`"trimmed":10`, `"trimmed":11`},
		"held id":         {`"deleted_segments":[1,3]`, `"deleted_segments":[1,2]`},
		"repeated id":     {`"deleted_segments":[1,3]`, `"deleted_segments":[1,1]`},
		"foreign id":      {`"deleted_segments":[1,3]`, `"deleted_segments":[1,99]`},
		"bound no count":  {`"skipped":10`, `"skip_bound":true`},
	} {
		bad := strings.Replace(good, edit[0], edit[1], 1)
		if bad == good {
			t.Fatalf("%s: the edit did not apply to %s", name, good)
		}
		if _, err := Restore([]byte(bad)); err == nil {
			t.Errorf("%s: Restore accepted it", name)
		}
	}
}

// TestOlderSnapshotRestores: a snapshot written before policies and
// retention bookkeeping existed still restores, with none of either.
func TestOlderSnapshotRestores(t *testing.T) {
	old := `{"format":1,"last_topic":1,"last_range":1,"last_segment":2,"topics":[{"id":1,"name":"t","bits":4,"created_at":1,"ranges":[1]}],` +
		`"ranges":[{"id":1,"topic":1,"start":0,"end":16,"active":true,"next_offset":10,"created_at":1}],` +
		`"segments":[{"id":2,"range":1,"active":false,"base":0,"end":10,"records":10,"opened_at":2,"sealed_at":3}],` +
		`"groups":[{"topic":1,"group":"g","entries":[{"source":1,"slice_start":0,"slice_bits":4,"offset":4}]}],"users":[],"acls":[]}`
	st, err := Restore([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Policies()) != 0 || st.WasDeleted(1) {
		t.Fatal("an old snapshot restored with policies or deleted ids")
	}
	if n, bound, ok := st.GroupSkipped("t", "g"); n != 0 || bound || !ok {
		t.Fatalf("GroupSkipped = %d,%v,%v", n, bound, ok)
	}
	if got := string(mustSnapshot(t, st)); got != old {
		t.Fatalf("re-encoded differently:\n%s\n%s", got, old)
	}
}

// A segment keeps the replica count it was opened with: healing holds a
// sealed segment to it, whatever a policy says later, and a replica
// list rewritten by a heal does not change it.
func TestSegmentKeepsItsOpeningFactor(t *testing.T) {
	st := New()
	res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 4})
	rid := res.RangeIDs[0]
	open := apply(t, st, Command{Kind: KindOpenSegment, Range: rid, Replicas: []string{"a", "b", "c"}})
	if open.Err != nil {
		t.Fatal(open.Err)
	}
	if res := apply(t, st, Command{Kind: KindSealSegment, Segment: open.SegmentID, End: 5, Records: 5}); res.Err != nil {
		t.Fatal(res.Err)
	}
	set := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: open.SegmentID,
		Expect: []string{"a", "b", "c"}, Replicas: []string{"a", "b", "c", "d"}})
	if set.Err != nil {
		t.Fatal(set.Err)
	}
	seg, _ := st.Segment(open.SegmentID)
	if seg.Factor != 3 {
		t.Fatalf("factor %d after a heal added a copy, want the 3 it opened with", seg.Factor)
	}
	restored, err := Restore(mustSnapshot(t, st))
	if err != nil {
		t.Fatal(err)
	}
	if seg, _ := restored.Segment(open.SegmentID); seg.Factor != 3 {
		t.Fatalf("factor %d after a snapshot", seg.Factor)
	}
}
