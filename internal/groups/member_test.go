package groups

import (
	"errors"
	"reflect"
	"testing"
)

func TestTouchKeepsHolds(t *testing.T) {
	c := New(timeout, 10, 10)
	ranges := []uint64{1, 2, 3, 4}
	mustPoll(t, c, "g", "m1", ranges, 1000) // m1 holds every range
	if b := mustPoll(t, c, "g", "m2", ranges, 1100); len(b.Ranges) != 0 {
		t.Fatalf("m2 got %v while m1 holds every range", b.Ranges)
	}
	st, err := c.Touch(1, "g", "m1", 1200)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ranges != 4 || st.Members != 2 {
		t.Fatalf("m1's state after the join: %+v, want 4 ranges of 2 members", st)
	}
	if b := mustPoll(t, c, "g", "m2", ranges, 1300); len(b.Ranges) != 0 {
		t.Fatalf("m2 got %v after m1 only touched: the touch released m1's holds", b.Ranges)
	}
	a := mustPoll(t, c, "g", "m1", ranges, 1400)
	b := mustPoll(t, c, "g", "m2", ranges, 1500)
	if len(a.Ranges)+len(b.Ranges) != 4 || len(b.Ranges) == 0 {
		t.Fatalf("after m1 polled: m1 %v, m2 %v", a.Ranges, b.Ranges)
	}
	st, err = c.Touch(1, "g", "m2", 1600)
	if err != nil || st.Ranges != len(b.Ranges) || st.Generation != b.Generation {
		t.Fatalf("m2's touch: %+v, %v; its poll said %+v", st, err, b)
	}
}

func TestTouchUnknownMember(t *testing.T) {
	c := New(timeout, 10, 10)
	if _, err := c.Touch(1, "g", "m1", 0); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("touch of a group without members: %v", err)
	}
	mustPoll(t, c, "g", "m1", []uint64{1}, 0)
	mustPoll(t, c, "g", "m2", []uint64{1}, 0)
	if _, err := c.Touch(1, "g", "m3", 10); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("touch of a member that never joined: %v", err)
	}
	c.Leave(1, "g", "m2", 20)
	if _, err := c.Touch(1, "g", "m2", 30); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("touch of a member that left: %v", err)
	}
	// m1 touched within the timeout stays; silent past it, it is gone.
	if _, err := c.Touch(1, "g", "m1", timeout); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Touch(1, "g", "m1", 2*timeout+1); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("touch after the group member timeout: %v", err)
	}
}

func TestCommitRangesOfCurrentMember(t *testing.T) {
	c := New(timeout, 10, 10)
	ranges := []uint64{1, 2, 3, 4}
	a := mustPoll(t, c, "g", "m1", ranges, 1000)
	got, err := c.CommitRanges(1, "g", "m1", a.Generation, 1100)
	if err != nil || !reflect.DeepEqual(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("commit of the sole member: %v, %v", got, err)
	}
	// A join moves the generation on; m1 still holds what it read under
	// the old one, so its commit of those records is accepted.
	mustPoll(t, c, "g", "m2", ranges, 1200)
	got, err = c.CommitRanges(1, "g", "m1", a.Generation, 1300)
	if err != nil || !reflect.DeepEqual(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("commit under the generation before a join: %v, %v", got, err)
	}
	// Once m1 polls again it holds only its share.
	a = mustPoll(t, c, "g", "m1", ranges, 1400)
	got, err = c.CommitRanges(1, "g", "m1", a.Generation, 1500)
	if err != nil || !reflect.DeepEqual(got, a.Ranges) {
		t.Fatalf("commit after the rebalance: %v, %v; told %v", got, err, a.Ranges)
	}
}

func TestCommitRangesRefusesStaleMember(t *testing.T) {
	c := New(timeout, 10, 10)
	ranges := []uint64{1, 2}
	old := mustPoll(t, c, "g", "m1", ranges, 0)
	mustPoll(t, c, "g", "m2", ranges, 0)

	if _, err := c.CommitRanges(1, "g", "m1", old.Generation+100, 10); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("a generation from the future: %v", err)
	}
	if _, err := c.CommitRanges(1, "g", "m3", old.Generation, 10); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("a member that never joined: %v", err)
	}
	if _, err := c.CommitRanges(1, "other", "m1", old.Generation, 10); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("a group without members: %v", err)
	}

	// m1 goes silent and is evicted; its commit is refused, and it stays
	// refused once m1 has joined again: the records were read before.
	for _, now := range []int64{timeout / 2, timeout + 1} {
		if _, err := c.Touch(1, "g", "m2", now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CommitRanges(1, "g", "m1", old.Generation, timeout+2); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("an evicted member: %v", err)
	}
	again := mustPoll(t, c, "g", "m1", ranges, timeout+3)
	if _, err := c.CommitRanges(1, "g", "m1", old.Generation, timeout+4); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("a member that joined again, under its old generation: %v", err)
	}
	if _, err := c.CommitRanges(1, "g", "m1", again.Generation, timeout+5); err != nil {
		t.Fatalf("the same member under its new generation: %v", err)
	}

	// A member that left is stale too.
	c.Leave(1, "g", "m1", timeout+6)
	if _, err := c.CommitRanges(1, "g", "m1", again.Generation, timeout+7); !errors.Is(err, ErrStaleMember) {
		t.Fatalf("a member that left: %v", err)
	}
}
