package metadata

import (
	"bytes"
	"testing"
)

// commitClock stamps the commits of these tests after their deletions
// (which carry Now 0), so the counts are exact unless a test says
// otherwise.
var commitClock int64 = 1000

func commit(t *testing.T, st *State, kind, group string, es ...GroupEntry) {
	t.Helper()
	commitClock++
	if res := apply(t, st, Command{Kind: kind, Topic: "t", Group: group, Entries: es, Now: commitClock}); res.Err != nil {
		t.Fatalf("%s %v: %v", kind, es, res.Err)
	}
}

func wantSkipped(t *testing.T, st *State, group string, n uint64, bound bool) {
	t.Helper()
	gn, gb, ok := st.GroupSkipped("t", group)
	if !ok || gn != n || gb != bound {
		t.Fatalf("GroupSkipped(%s) = %d,%v,%v, want %d,%v,true", group, gn, gb, ok, n, bound)
	}
}

// whole is an entry over the whole keyspace of topic t (4 bits).
func whole(rid, off uint64) GroupEntry { return GroupEntry{Source: rid, SliceBits: 4, Offset: off} }

func TestGroupSkipCounter(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10, 10, 10)
	if _, _, ok := st.GroupSkipped("t", "g"); ok {
		t.Fatal("a group without a position reported")
	}
	commit(t, st, KindCommitOffsets, "g", whole(rid, 5))
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[1], Reason: ReasonRetention})
	wantSkipped(t, st, "g", 0, false)
	// From 5 to 25: offsets 5..19 were deleted before the group read them.
	commit(t, st, KindCommitOffsets, "g", whole(rid, 25))
	wantSkipped(t, st, "g", 15, false)
	// Repeating or committing behind adds nothing.
	commit(t, st, KindCommitOffsets, "g", whole(rid, 25))
	commit(t, st, KindCommitOffsets, "g", whole(rid, 3))
	wantSkipped(t, st, "g", 15, false)
	// A first commit, even far past deleted records, adds nothing.
	commit(t, st, KindCommitOffsets, "first", whole(rid, 30))
	wantSkipped(t, st, "first", 0, false)
	// A seek adds nothing, backwards or forwards.
	commit(t, st, KindSetOffsets, "g", whole(rid, 0))
	commit(t, st, KindSetOffsets, "g", whole(rid, 30))
	wantSkipped(t, st, "g", 15, false)
	// ttl deletions never count.
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[2], Reason: ReasonTTL})
	commit(t, st, KindCommitOffsets, "first", whole(rid, 0))
	commit(t, st, KindSetOffsets, "first", whole(rid, 20))
	commit(t, st, KindCommitOffsets, "first", whole(rid, 35))
	wantSkipped(t, st, "first", 0, false)
	// Counters survive a snapshot and go with the group.
	restored, err := Restore(mustSnapshot(t, st))
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped(t, restored, "g", 15, false)
	apply(t, st, Command{Kind: KindDeleteGroup, Topic: "t", Group: "g"})
	if _, _, ok := st.GroupSkipped("t", "g"); ok {
		t.Fatal("deleted group still has a counter")
	}
	commit(t, st, KindSetOffsets, "g", whole(rid, 0))
	wantSkipped(t, st, "g", 0, false)
	apply(t, st, Command{Kind: KindDeleteTopic, Topic: "t"})
	if _, _, ok := st.GroupSkipped("t", "g"); ok {
		t.Fatal("deleted topic still has a counter")
	}
}

// TestGroupSkipNarrowSlices: a slice narrower than the range counts an
// upper bound; two entries of one commit never count a record twice.
func TestGroupSkipNarrowSlices(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10)
	half := func(start, off uint64) GroupEntry {
		return GroupEntry{Source: rid, SliceStart: start, SliceBits: 3, Offset: off}
	}
	commit(t, st, KindCommitOffsets, "narrow", half(0, 0))
	commit(t, st, KindCommitOffsets, "nested", whole(rid, 0))
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	commit(t, st, KindCommitOffsets, "narrow", half(0, 10))
	wantSkipped(t, st, "narrow", 10, true)
	// The other half was never committed: a first commit for it.
	commit(t, st, KindCommitOffsets, "narrow", half(8, 10))
	wantSkipped(t, st, "narrow", 10, true)
	// Wide to 4 and a half inside it to 8 in one commit: 0..3 counted
	// once (exactly), 4..7 once (narrow: a bound).
	commit(t, st, KindCommitOffsets, "nested", whole(rid, 4), half(0, 8))
	wantSkipped(t, st, "nested", 8, true)
}

// TestGroupSkipRefusedCommitCountsNothing: a refused commit leaves the
// counter as it was.
func TestGroupSkipRefusedCommitCountsNothing(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10)
	commit(t, st, KindCommitOffsets, "g", whole(rid, 0))
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0]})
	before := mustSnapshot(t, st)
	bad := []GroupEntry{whole(rid, 10), {Source: 999, SliceBits: 4, Offset: 1}}
	wantErr(t, apply(t, st, Command{Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: bad}), ErrInvalidCommand)
	full := &Quota{GroupsPerTopic: 1}
	wantErr(t, apply(t, st, Command{Kind: KindCommitOffsets, Topic: "t", Group: "other", Entries: []GroupEntry{whole(rid, 10)}, Quota: full}), ErrQuotaExceeded)
	if !bytes.Equal(before, mustSnapshot(t, st)) {
		t.Fatal("a refused commit changed the state")
	}
	wantSkipped(t, st, "g", 0, false)
}

// TestGroupSkipCommitCapped: disjoint narrow entries of one commit each
// count every deleted record of their offsets; the commit adds no more
// than the range deleted over those offsets.
func TestGroupSkipCommitCapped(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10)
	quarter := func(start, off uint64) GroupEntry {
		return GroupEntry{Source: rid, SliceStart: start, SliceBits: 2, Offset: off}
	}
	commit(t, st, KindCommitOffsets, "g", quarter(0, 0), quarter(4, 0), quarter(8, 0), quarter(12, 0))
	apply(t, st, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	commit(t, st, KindCommitOffsets, "g", quarter(0, 10), quarter(4, 10), quarter(8, 5))
	wantSkipped(t, st, "g", 10, true)
	// Within one slice, later commits still add their own stretch.
	commit(t, st, KindCommitOffsets, "g", quarter(8, 10))
	wantSkipped(t, st, "g", 15, true)
}

// A span deleted after the group's previous commit may hold records the
// group read before they went: the metadata cannot tell, so the count is
// an upper bound. A commit made after the deletion (the position
// unchanged) settles it: what the next commit passes was deleted before
// the group got there, and the count is exact.
func TestGroupSkipDeletedSinceLastCommitIsABound(t *testing.T) {
	st := New()
	rid, segs := rangeWith(t, st, 10, 10, 10)
	at := func(now int64, c Command) {
		t.Helper()
		c.Now, c.Topic = now, "t"
		if res := apply(t, st, c); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	at(100, Command{Kind: KindCommitOffsets, Group: "read", Entries: []GroupEntry{whole(rid, 5)}})
	at(100, Command{Kind: KindCommitOffsets, Group: "stuck", Entries: []GroupEntry{whole(rid, 5)}})
	at(150, Command{Kind: KindDeleteSegment, Segment: segs[0], Reason: ReasonRetention})
	at(160, Command{Kind: KindCommitOffsets, Group: "stuck", Entries: []GroupEntry{whole(rid, 5)}})
	at(200, Command{Kind: KindCommitOffsets, Group: "read", Entries: []GroupEntry{whole(rid, 15)}})
	at(200, Command{Kind: KindCommitOffsets, Group: "stuck", Entries: []GroupEntry{whole(rid, 15)}})
	wantSkipped(t, st, "read", 5, true)
	wantSkipped(t, st, "stuck", 5, false)
	restored, err := Restore(mustSnapshot(t, st))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustSnapshot(t, restored), mustSnapshot(t, st)) {
		t.Fatal("snapshot of the restored state differs")
	}
}
