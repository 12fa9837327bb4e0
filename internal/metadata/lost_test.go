package metadata

import (
	"errors"
	"testing"
)

// TestDeleteLostSegment: a lost segment anywhere in a range becomes a
// skipped span, only while its list is still the one the proposer saw;
// without a recorded count its span counts End-Base as an upper bound.
func TestDeleteLostSegment(t *testing.T) {
	s := New()
	res := s.Apply(Command{V: Version, Kind: KindCreateTopic, Topic: "t", Bits: 8, Ranges: 1, ReplicationFactor: 1})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	rid := s.ActiveRanges(res.TopicID)[0].ID
	var ids []uint64
	for i, end := range []uint64{10, 20, 30} {
		o := s.Apply(Command{V: Version, Kind: KindOpenSegment, Range: rid, Base: uint64(i) * 10, Replicas: []string{"n1"}})
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		recs := uint64(10)
		if i == 1 {
			recs = 0 // a failover's seal: no count
		}
		if r := s.Apply(Command{V: Version, Kind: KindSealSegment, Segment: o.SegmentID, End: end, Records: recs}); r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, o.SegmentID)
	}
	if r := s.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: ids[1], Reason: ReasonLost, Expect: []string{"n2"}}); !errors.Is(r.Err, ErrReplicasChanged) {
		t.Fatalf("a lost delete on a changed list: %v, want %v", r.Err, ErrReplicasChanged)
	}
	if r := s.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: ids[1], Reason: ReasonLost, Expect: []string{"n1"}}); r.Err != nil {
		t.Fatalf("a lost delete of the middle segment: %v", r.Err)
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	r, _ := s.Range(rid)
	if n, bound := r.DeletedBetween(0, 30); n != 10 || !bound {
		t.Fatalf("deleted between 0 and 30: %d (bound %v), want 10, an upper bound", n, bound)
	}
	if len(r.Deleted) != 1 || !r.Deleted[0].Lost || !r.Deleted[0].Skip {
		t.Fatalf("deleted spans %+v, want one lost, skipped", r.Deleted)
	}
	// A retention delete of the first segment next to it stays apart.
	if r := s.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: ids[0], Reason: ReasonRetention}); r.Err != nil {
		t.Fatalf("retention of the first segment: %v", r.Err)
	}
	r, _ = s.Range(rid)
	if len(r.Deleted) != 2 || r.Deleted[0].Lost || !r.Deleted[1].Lost {
		t.Fatalf("deleted spans %+v, want a retention span then a lost one", r.Deleted)
	}
	r2, _ := s.Segment(ids[2])
	if r := s.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: ids[2], Reason: ReasonLost, Expect: r2.Replicas}); r.Err != nil {
		t.Fatalf("a lost delete of the last segment: %v", r.Err)
	}
	r, _ = s.Range(rid)
	if n, bound := r.DeletedBetween(0, 30); n != 30 || !bound {
		t.Fatalf("deleted between 0 and 30: %d (bound %v), want 30, an upper bound", n, bound)
	}
	if !s.WasLost(ids[1]) || !s.WasLost(ids[2]) || s.WasLost(ids[0]) || !s.WasDeleted(ids[0]) {
		t.Fatalf("lost record: %v %v %v, want the two lost ids only", s.WasLost(ids[0]), s.WasLost(ids[1]), s.WasLost(ids[2]))
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !back.WasLost(ids[1]) || !back.WasLost(ids[2]) || back.WasLost(ids[0]) {
		t.Fatal("the lost record did not survive a snapshot")
	}
}

// TestLostIDsOutliveRetentionChurn: retention deletes past MaxDeletedIDs
// push a lost id out of the deleted record, not out of the lost one.
func TestLostIDsOutliveRetentionChurn(t *testing.T) {
	s := New()
	res := s.Apply(Command{V: Version, Kind: KindCreateTopic, Topic: "t", Bits: 8, Ranges: 1, ReplicationFactor: 1})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	rid := s.ActiveRanges(res.TopicID)[0].ID
	seal := func(base uint64) uint64 {
		o := s.Apply(Command{V: Version, Kind: KindOpenSegment, Range: rid, Base: base, Replicas: []string{"n1"}})
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if r := s.Apply(Command{V: Version, Kind: KindSealSegment, Segment: o.SegmentID, End: base + 1, Records: 1}); r.Err != nil {
			t.Fatal(r.Err)
		}
		return o.SegmentID
	}
	lost := seal(0)
	if r := s.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: lost, Reason: ReasonLost, Expect: []string{"n1"}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	for i := range MaxDeletedIDs {
		id := seal(uint64(i) + 1)
		if r := s.Apply(Command{V: Version, Kind: KindDeleteSegment, Segment: id, Reason: ReasonRetention}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if s.WasDeleted(lost) || !s.WasLost(lost) {
		t.Fatalf("after %d retention deletes: deleted %v lost %v, want forgotten as deleted, kept as lost",
			MaxDeletedIDs, s.WasDeleted(lost), s.WasLost(lost))
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
