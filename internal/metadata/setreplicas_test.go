package metadata

import (
	"bytes"
	"slices"
	"testing"
)

// sealedWithReplicas is a state holding one sealed segment (id 1) on a, b, c.
func sealedWithReplicas(t *testing.T) *State {
	t.Helper()
	st := New()
	apply(t, st, Command{Kind: KindCreateTopic, Topic: "t"})
	apply(t, st, Command{Kind: KindOpenSegment, Range: 1, Replicas: []string{"a", "b", "c"}})
	apply(t, st, Command{Kind: KindSealSegment, Segment: 1, End: 3, Records: 3, Bytes: 90})
	return st
}

func replicasOf(t *testing.T, st *State, id uint64) []string {
	t.Helper()
	seg, ok := st.Segment(id)
	if !ok {
		t.Fatalf("segment %d is gone", id)
	}
	return seg.Replicas
}

func TestSetSegmentReplicasAddsThenDrops(t *testing.T) {
	st := sealedWithReplicas(t)
	res := apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1,
		Expect: []string{"a", "b", "c"}, Replicas: []string{"a", "b", "c", "d"}})
	if res.Err != nil || res.SegmentID != 1 {
		t.Fatalf("add: %+v", res)
	}
	res = apply(t, st, Command{Kind: KindSetSegmentReplicas, Segment: 1,
		Expect: []string{"a", "b", "c", "d"}, Replicas: []string{"a", "c", "d"}})
	if res.Err != nil {
		t.Fatalf("drop: %v", res.Err)
	}
	if got := replicasOf(t, st, 1); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("replicas %v, want [a c d]", got)
	}
}

// A refused command names a clear reason and changes nothing.
func TestSetSegmentReplicasRefusals(t *testing.T) {
	st := sealedWithReplicas(t)
	apply(t, st, Command{Kind: KindOpenSegment, Range: 1, Base: 3, Replicas: []string{"a", "b"}})
	abc := []string{"a", "b", "c"}
	long := string(bytes.Repeat([]byte("n"), MaxNameLen+1))
	many := make([]string, MaxReplicas+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	for name, tc := range map[string]struct {
		cmd  Command
		want Error
	}{
		"stale expect":     {Command{Segment: 1, Expect: []string{"a", "b"}, Replicas: []string{"a", "b", "d"}}, ErrReplicasChanged},
		"expect reordered": {Command{Segment: 1, Expect: []string{"b", "a", "c"}, Replicas: []string{"a", "b", "c", "d"}}, ErrReplicasChanged},
		"no expect":        {Command{Segment: 1, Replicas: []string{"d"}}, ErrReplicasChanged},
		"empty list":       {Command{Segment: 1, Expect: abc}, ErrInvalidCommand},
		"repeated name":    {Command{Segment: 1, Expect: abc, Replicas: []string{"a", "a"}}, ErrInvalidCommand},
		"empty name":       {Command{Segment: 1, Expect: abc, Replicas: []string{"a", ""}}, ErrInvalidCommand},
		"long name":        {Command{Segment: 1, Expect: abc, Replicas: []string{"a", long}}, ErrInvalidCommand},
		"too many":         {Command{Segment: 1, Expect: abc, Replicas: many}, ErrInvalidCommand},
		"active segment":   {Command{Segment: 2, Expect: []string{"a", "b"}, Replicas: []string{"a", "b", "c"}}, ErrSegmentActive},
		"no such segment":  {Command{Segment: 9, Expect: abc, Replicas: abc}, ErrNoSuchSegment},
	} {
		before, _ := st.Snapshot()
		tc.cmd.Kind = KindSetSegmentReplicas
		wantErrNamed(t, name, apply(t, st, tc.cmd), tc.want)
		if after, _ := st.Snapshot(); !bytes.Equal(before, after) {
			t.Errorf("%s: refused but changed the state", name)
		}
	}
	if got := replicasOf(t, st, 1); !slices.Equal(got, abc) {
		t.Fatalf("replicas %v after refusals, want %v", got, abc)
	}
}

func wantErrNamed(t *testing.T, name string, res Result, want Error) {
	t.Helper()
	if res.Err != want {
		t.Errorf("%s: got %v, want %v", name, res.Err, want)
	}
}

// The new list is in the snapshot, and two states fed the same commands
// agree byte for byte.
func TestSetSegmentReplicasSnapshotAndDeterminism(t *testing.T) {
	a, b := sealedWithReplicas(t), sealedWithReplicas(t)
	cmd := Command{Kind: KindSetSegmentReplicas, Segment: 1, Expect: []string{"a", "b", "c"}, Replicas: []string{"c", "d"}}
	apply(t, a, cmd)
	apply(t, b, cmd)
	sa, _ := a.Snapshot()
	sb, _ := b.Snapshot()
	if !bytes.Equal(sa, sb) {
		t.Fatal("equal states given equal commands differ")
	}
	r, err := Restore(sa)
	if err != nil {
		t.Fatal(err)
	}
	if got := replicasOf(t, r, 1); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("restored replicas %v, want [c d]", got)
	}
	// A second command conditional on the restored list applies to it.
	res := apply(t, r, Command{Kind: KindSetSegmentReplicas, Segment: 1, Expect: []string{"c", "d"}, Replicas: []string{"c", "d", "e"}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
}

// C1: a version this state machine does not know is refused whole, the
// new kind included.
func TestSetSegmentReplicasUnknownVersionRefused(t *testing.T) {
	st := sealedWithReplicas(t)
	before, _ := st.Snapshot()
	res := st.Apply(Command{V: Version + 1, Kind: KindSetSegmentReplicas, Segment: 1,
		Expect: []string{"a", "b", "c"}, Replicas: []string{"d"}})
	if res.Err != ErrUnknownCommand {
		t.Fatalf("got %v, want unknown_command", res.Err)
	}
	if after, _ := st.Snapshot(); !bytes.Equal(before, after) {
		t.Fatal("an unknown version changed the state")
	}
	if res := st.Apply(Command{V: Version, Kind: "set_segment_replica"}); res.Err != ErrUnknownCommand {
		t.Fatalf("a misspelt kind: got %v, want unknown_command", res.Err)
	}
}
