package metadata

import (
	"bytes"
	"testing"
)

// snapshotOf is the state's snapshot, for "a refused command changed nothing".
func snapshotOf(t *testing.T, st *State) []byte {
	t.Helper()
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refused applies c, wants quota_exceeded and an unchanged state.
func refused(t *testing.T, st *State, c Command) {
	t.Helper()
	before := snapshotOf(t, st)
	wantErr(t, apply(t, st, c), ErrQuotaExceeded)
	if !bytes.Equal(before, snapshotOf(t, st)) {
		t.Fatalf("%s refused with quota_exceeded but changed the state", c.Kind)
	}
}

func TestCreateTopicRecordsOwner(t *testing.T) {
	st := New()
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "a", Owner: "alice"}), nil)
	topic, _ := st.Topic("a")
	if topic.Owner != "alice" {
		t.Fatalf("owner %q, want alice", topic.Owner)
	}
	if n, r := st.OwnerUsage("alice"); n != 1 || r != 1 {
		t.Fatalf("alice owns %d topics %d ranges, want 1 and 1", n, r)
	}
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "b", Owner: string(make([]byte, MaxNameLen+1))}), ErrInvalidCommand)
}

func TestNodeTopicQuota(t *testing.T) {
	st := New()
	q := &Quota{Topics: 2}
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "a", Quota: q}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "b", Quota: q}), nil)
	refused(t, st, Command{Kind: KindCreateTopic, Topic: "c", Quota: q})
	// Without a quota the state machine sets no limit of its own.
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "c"}), nil)
}

func TestNodeRangeQuotaCountsSealedRanges(t *testing.T) {
	st := New()
	q := &Quota{Ranges: 6}
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "a", Bits: 8, Ranges: 4, Quota: q}), nil)
	refused(t, st, Command{Kind: KindCreateTopic, Topic: "b", Bits: 8, Ranges: 4, Quota: q})
	lo := st.ActiveRanges(1)[0].ID
	// A split seals one range and adds two: 6 in all, at the limit.
	res := apply(t, st, Command{Kind: KindSplitRange, Range: lo, Quota: q})
	wantErr(t, res, nil)
	refused(t, st, Command{Kind: KindSplitRange, Range: res.RangeIDs[0], Quota: q})
	refused(t, st, Command{Kind: KindMergeRanges, Range: res.RangeIDs[0], RangeB: res.RangeIDs[1], Quota: q})
	if st.RangeCount() != 6 {
		t.Fatalf("%d ranges, want 6", st.RangeCount())
	}
}

func TestOwnerQuotas(t *testing.T) {
	st := New()
	q := &Quota{OwnerTopics: 2, OwnerRanges: 5}
	create := func(topic, owner string, ranges int) Command {
		return Command{Kind: KindCreateTopic, Topic: topic, Bits: 8, Ranges: ranges, Owner: owner, Quota: q}
	}
	wantErr(t, apply(t, st, create("a1", "alice", 4)), nil)
	refused(t, st, create("a2", "alice", 2)) // 6 ranges > 5
	wantErr(t, apply(t, st, create("a2", "alice", 1)), nil)
	refused(t, st, create("a3", "alice", 1)) // a third topic
	// Another owner's quota is its own.
	wantErr(t, apply(t, st, create("b1", "bob", 4)), nil)
	// Deleting a topic gives its owner the room back.
	wantErr(t, apply(t, st, Command{Kind: KindDeleteTopic, Topic: "a1"}), nil)
	wantErr(t, apply(t, st, create("a3", "alice", 4)), nil)
	if n, r := st.OwnerUsage("alice"); n != 2 || r != 5 {
		t.Fatalf("alice owns %d topics %d ranges, want 2 and 5", n, r)
	}
}

func TestGroupsPerTopicQuota(t *testing.T) {
	st := New()
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "t"}), nil)
	q := &Quota{GroupsPerTopic: 2}
	commit := func(group string) Command {
		return Command{Kind: KindCommitOffsets, Topic: "t", Group: group, Quota: q,
			Entries: []GroupEntry{{Source: 1, SliceBits: 16, Offset: 1}}}
	}
	wantErr(t, apply(t, st, commit("g1")), nil)
	wantErr(t, apply(t, st, commit("g2")), nil)
	refused(t, st, commit("g3"))
	// A group that already has a position keeps committing.
	wantErr(t, apply(t, st, commit("g1")), nil)
}

func TestNegativeQuotaIsInvalid(t *testing.T) {
	st := New()
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "a", Quota: &Quota{Topics: -1}}), ErrInvalidCommand)
}

// A snapshot written before topics had owners still loads, and the owner
// index is rebuilt from a snapshot that has them.
func TestSnapshotOwners(t *testing.T) {
	old := `{"format":1,"last_topic":1,"last_range":1,"last_segment":0,` +
		`"topics":[{"id":1,"name":"t","bits":16,"created_at":5,"ranges":[1]}],` +
		`"ranges":[{"id":1,"topic":1,"start":0,"end":65536,"active":true,"created_at":5}],` +
		`"segments":[],"groups":[],"users":[],"acls":[]}`
	st, err := Restore([]byte(old))
	if err != nil {
		t.Fatalf("old snapshot: %v", err)
	}
	if topic, _ := st.Topic("t"); topic.Owner != "" {
		t.Fatalf("owner %q from a snapshot without owners", topic.Owner)
	}
	wantErr(t, apply(t, st, Command{Kind: KindCreateTopic, Topic: "u", Bits: 4, Ranges: 2, Owner: "alice"}), nil)
	again, err := Restore(snapshotOf(t, st))
	if err != nil {
		t.Fatal(err)
	}
	if n, r := again.OwnerUsage("alice"); n != 1 || r != 2 {
		t.Fatalf("restored: alice owns %d topics %d ranges, want 1 and 2", n, r)
	}
}
