package metadata

import (
	"bytes"
	"slices"
	"testing"
)

// A replica list may gain a copy or lose some, but a list that keeps
// none of the segment's current holders names only nodes that were never
// filled from a recorded copy: applied, every real copy becomes unlisted
// and is deleted as superseded (S3, S4). The state machine is the last
// place that can refuse it.
func TestSetSegmentReplicasRefusesAListKeepingNoCurrentHolder(t *testing.T) {
	st := sealedWithReplicas(t)
	before, _ := st.Snapshot()
	res := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1,
		Expect: []string{"a", "b", "c"}, Replicas: []string{"x", "y", "z"}})
	if res.Err == nil {
		t.Fatalf("a list sharing no holder with [a b c] was applied: replicas now %v", replicasOf(t, st, 1))
	}
	if after, _ := st.Snapshot(); !bytes.Equal(before, after) {
		t.Fatal("refused but changed the state")
	}
}

// A sealed segment written without a replica list (a topic of factor
// one) has its one copy on the node that wrote it, which no list names.
// Giving it a list makes that copy look superseded on its own node; the
// command must not apply to a segment that has no list.
func TestSetSegmentReplicasRefusesASegmentWithoutAList(t *testing.T) {
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t"})
	apply(t, st, Command{Kind: KindOpenSegment, Range: 1})
	apply(t, st, Command{Kind: KindSealSegment, Segment: 1, End: 3, Records: 3, Bytes: 90})
	res := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1, Replicas: []string{"node-2"}})
	if res.Err == nil {
		t.Fatalf("a segment with no replica list was given one: %v", replicasOf(t, st, 1))
	}
}

// A deleted segment's list cannot be set again: the record of a heal that
// finished after the segment was deleted is refused, not resurrected.
func TestSetSegmentReplicasRefusesADeletedSegment(t *testing.T) {
	st := sealedWithReplicas(t)
	abc := []string{"a", "b", "c"}
	if res := apply(t, st, Command{Kind: KindDeleteSegment, Segment: 1}); res.Err != nil {
		t.Fatalf("delete: %v", res.Err)
	}
	wantErrNamed(t, "deleted segment", apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1,
		Expect: abc, Replicas: append(slices.Clone(abc), "d")}), ErrNoSuchSegment)
	if _, ok := st.Segment(1); ok {
		t.Fatal("the deleted segment is back")
	}
}

// Setting the list it already has changes nothing and answers no error,
// so a record retried after its first try applied converges.
func TestSetSegmentReplicasToTheSameListIsANoOp(t *testing.T) {
	st := sealedWithReplicas(t)
	abc := []string{"a", "b", "c"}
	before, _ := st.Snapshot()
	if res := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1, Expect: abc, Replicas: abc}); res.Err != nil {
		t.Fatalf("same list: %v", res.Err)
	}
	if after, _ := st.Snapshot(); !bytes.Equal(before, after) {
		t.Fatal("setting the same list changed the state")
	}
}
