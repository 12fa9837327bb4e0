package metadata

import (
	"slices"
	"testing"
)

func TestSetOffsetsReplacesAndDeleteGroupRemoves(t *testing.T) {
	st := New()
	res := apply(t, st, Command{Kind: KindCreateTopic, Topic: "t", Bits: 3})
	wantErr(t, res, nil)
	rid := res.RangeIDs[0]
	ahead := []GroupEntry{{Source: rid, SliceStart: 0, SliceBits: 3, Offset: 9}}
	behind := []GroupEntry{{Source: rid, SliceStart: 0, SliceBits: 3, Offset: 2}}
	wantErr(t, apply(t, st, Command{Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: ahead}), nil)
	// A commit behind changes nothing; a set moves the group back.
	wantErr(t, apply(t, st, Command{Kind: KindCommitOffsets, Topic: "t", Group: "g", Entries: behind}), nil)
	if got := st.GroupEntries("g", 1); !slices.Equal(got, ahead) {
		t.Fatalf("after a commit behind: %v", got)
	}
	wantErr(t, apply(t, st, Command{Kind: KindSetOffsets, Topic: "t", Group: "g", Entries: behind}), nil)
	if got := st.GroupEntries("g", 1); !slices.Equal(got, behind) {
		t.Fatalf("after set_offsets: %v, want %v", got, behind)
	}
	// An empty set is the start, and the group still exists.
	wantErr(t, apply(t, st, Command{Kind: KindSetOffsets, Topic: "t", Group: "g"}), nil)
	if got := st.GroupEntries("g", 1); len(got) != 0 || !slices.Contains(st.Groups(1), "g") {
		t.Fatalf("after an empty set: %v, groups %v", got, st.Groups(1))
	}
	wantErr(t, apply(t, st, Command{Kind: KindSetOffsets, Topic: "t", Group: "g",
		Entries: []GroupEntry{{Source: 999, SliceBits: 3}}}), ErrInvalidCommand)
	wantErr(t, apply(t, st, Command{Kind: KindSetOffsets, Topic: "nope", Group: "g"}), ErrNoSuchTopic)
	wantErr(t, apply(t, st, Command{Kind: KindSetOffsets, Topic: "t", Group: "h",
		Quota: &Quota{GroupsPerTopic: 1}}), ErrQuotaExceeded)

	wantErr(t, apply(t, st, Command{Kind: KindDeleteGroup, Topic: "t", Group: "g"}), nil)
	if slices.Contains(st.Groups(1), "g") {
		t.Fatal("group still listed after delete_group")
	}
	wantErr(t, apply(t, st, Command{Kind: KindDeleteGroup, Topic: "t", Group: "g"}), ErrNotFound)
	wantErr(t, apply(t, st, Command{Kind: KindDeleteGroup, Topic: "nope", Group: "g"}), ErrNoSuchTopic)
}

func TestDeleteLastAdmin(t *testing.T) {
	st := New()
	wantErr(t, apply(t, st, Command{Kind: KindCreateUser, User: "a", PasswordHash: "h", Perms: []string{PermAdmin}}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindCreateUser, User: "p", PasswordHash: "h", Perms: []string{PermProduce}}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindDeleteUser, User: "a", KeepAdmin: true}), ErrLastAdmin)
	wantErr(t, apply(t, st, Command{Kind: KindDeleteUser, User: "p", KeepAdmin: true}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindCreateUser, User: "b", PasswordHash: "h", Perms: []string{PermAdmin, PermConsume}}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindDeleteUser, User: "a", KeepAdmin: true}), nil)
	wantErr(t, apply(t, st, Command{Kind: KindDeleteUser, User: "b", KeepAdmin: true}), ErrLastAdmin)
	// A command logged before the rule (no KeepAdmin) replays as it applied.
	wantErr(t, apply(t, st, Command{Kind: KindDeleteUser, User: "b"}), nil)
}
