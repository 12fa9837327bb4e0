package metadata

import (
	"bytes"
	"slices"
	"testing"
)

func damagedOf(t *testing.T, st *State, id uint64) []string {
	t.Helper()
	seg, ok := st.Segment(id)
	if !ok {
		t.Fatalf("segment %d is gone", id)
	}
	return seg.Damaged
}

// A damaged mark is recorded once, sorted, survives a snapshot, and is
// forgotten when its holder leaves the list.
func TestMarkCopyDamagedIsRecordedAndLeavesWithItsHolder(t *testing.T) {
	st := sealedWithReplicas(t)
	for _, n := range []string{"c", "b", "c"} {
		if res := apply(t, st, Command{Kind: KindMarkCopyDamaged, Segment: 1, Node: n}); res.Err != nil {
			t.Fatalf("mark %s: %v", n, res.Err)
		}
	}
	if got := damagedOf(t, st, 1); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("damaged %v, want [b c]", got)
	}
	snap, _ := st.Snapshot()
	r, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	if got := damagedOf(t, r, 1); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("restored damaged %v, want [b c]", got)
	}
	apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1, Expect: []string{"a", "b", "c"}, Replicas: []string{"a", "b", "c", "d"}})
	if res := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1, Expect: []string{"a", "b", "c", "d"}, Replicas: []string{"a", "b", "d"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := damagedOf(t, st, 1); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("damaged %v after c left the list, want [b]", got)
	}
}

// A damaged holder is no holder to keep: a list keeping only damaged
// copies is refused.
func TestSetSegmentReplicasRefusesAListKeepingOnlyDamagedHolders(t *testing.T) {
	st := sealedWithReplicas(t)
	apply(t, st, Command{Kind: KindMarkCopyDamaged, Segment: 1, Node: "c"})
	before, _ := st.Snapshot()
	res := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1, Expect: []string{"a", "b", "c"}, Replicas: []string{"c", "d"}})
	wantErrNamed(t, "only damaged kept", res, ErrInvalidCommand)
	if after, _ := st.Snapshot(); !bytes.Equal(before, after) {
		t.Fatal("refused but changed the state")
	}
}

func TestMarkCopyDamagedRefusals(t *testing.T) {
	st := sealedWithReplicas(t)
	apply(t, st, Command{Kind: KindOpenSegment, Range: 1, Base: 3, Replicas: []string{"a", "b"}})
	for name, tc := range map[string]struct {
		cmd  Command
		want Error
	}{
		"no node":         {Command{Segment: 1}, ErrInvalidCommand},
		"not listed":      {Command{Segment: 1, Node: "z"}, ErrReplicasChanged},
		"active segment":  {Command{Segment: 2, Node: "a"}, ErrSegmentActive},
		"no such segment": {Command{Segment: 9, Node: "a"}, ErrNoSuchSegment},
	} {
		before, _ := st.Snapshot()
		tc.cmd.Kind = KindMarkCopyDamaged
		wantErrNamed(t, name, apply(t, st, tc.cmd), tc.want)
		if after, _ := st.Snapshot(); !bytes.Equal(before, after) {
			t.Errorf("%s: refused but changed the state", name)
		}
	}
}

// Deleting the segment forgets its damaged copies with it.
func TestMarkCopyDamagedGoesWithTheDeletedSegment(t *testing.T) {
	st := sealedWithReplicas(t)
	apply(t, st, Command{Kind: KindMarkCopyDamaged, Segment: 1, Node: "b"})
	if res := apply(t, st, Command{Kind: KindDeleteSegment, Segment: 1}); res.Err != nil {
		t.Fatal(res.Err)
	}
	wantErrNamed(t, "deleted", apply(t, st, Command{Kind: KindMarkCopyDamaged, Segment: 1, Node: "b"}), ErrNoSuchSegment)
	if err := st.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
