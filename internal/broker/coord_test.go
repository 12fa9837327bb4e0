package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/groups"
	"github.com/malachi-log/malachi/internal/metadata"
)

var (
	malloryID = Identity{User: "mallory", Perms: []string{"consume"}}
	aliceID   = Identity{User: "alice", Perms: []string{"consume"}}
)

// openGroups opens a broker on a manual clock with a topic "t".
func openGroups(t *testing.T, cfg Config) (*Broker, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	cfg.DataDir, cfg.Clock = t.TempDir(), clk
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.CreateTopic(context.Background(), "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	return b, clk
}

// poll is one group fetch of member in group, as id.
func poll(b *Broker, id Identity, group, member string) (Page, error) {
	return b.Fetch(context.Background(), FetchRequest{Topic: "t", Group: &group, Member: &member, Max: 10, Identity: id})
}

// TestJunkGroupsHitUserQuota: a consumer polling with junk group names
// fills its own share, not the node's table: its next new group is
// refused while another user's group still works.
func TestJunkGroupsHitUserQuota(t *testing.T) {
	b, _ := openGroups(t, Config{MaxGroups: 10, Limits: Limits{MaxGroupsPerUser: 3}})
	for i := range 3 {
		if _, err := poll(b, malloryID, fmt.Sprint("junk-", i), "m"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < 20; i++ {
		if _, err := poll(b, malloryID, fmt.Sprint("junk-", i), "m"); !errors.Is(err, ErrQuotaExceeded) {
			t.Fatalf("junk group %d: %v, want quota_exceeded", i, err)
		}
	}
	if _, err := poll(b, aliceID, "billing", "a1"); err != nil {
		t.Fatalf("another user's group: %v", err)
	}
	// Existing groups keep taking members, from anyone.
	if _, err := poll(b, malloryID, "junk-0", "m2"); err != nil {
		t.Fatalf("joining an existing group: %v", err)
	}
	if got := b.coord.live(1); len(got) != 4 {
		t.Fatalf("live groups %v, want mallory's 3 and billing", got)
	}
}

// TestIdleGroupsEvicted: once a group's members are silent past the
// session timeout it is evicted from the coordinator, giving its creator
// the slot back; its committed position stays in the metadata.
func TestIdleGroupsEvicted(t *testing.T) {
	b, clk := openGroups(t, Config{Limits: Limits{MaxGroupsPerUser: 3}})
	ctx := context.Background()
	for i := range 3 {
		page, err := poll(b, malloryID, fmt.Sprint("g", i), "m")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := b.Commit(ctx, "t", "g0", *page.Cursor); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Advance(b.cfg.GroupSessionTimeout) // at the timeout: still members
	b.expireMembers()
	if got := b.coord.live(1); len(got) != 3 {
		t.Fatalf("evicted at the timeout: live %v", got)
	}
	clk.Advance(time.Millisecond)
	b.expireMembers()
	if got := b.coord.live(1); len(got) != 0 {
		t.Fatalf("live groups %v after the timeout, want none", got)
	}
	names, _ := b.ListGroups("t")
	st, _ := b.DescribeGroup("t", "g0")
	if !slices.Equal(names, []string{"g0"}) || st.Cursor == nil {
		t.Fatalf("committed position lost: groups %v, cursor %v", names, st.Cursor)
	}
	for i := range 3 {
		if _, err := poll(b, malloryID, fmt.Sprint("h", i), "m"); err != nil {
			t.Fatalf("slot %d not given back: %v", i, err)
		}
	}
	// Silent groups also give their slots up to a join at the limit,
	// before the maintenance loop gets to them.
	clk.Advance(b.cfg.GroupSessionTimeout + time.Millisecond)
	if _, err := poll(b, malloryID, "late", "m"); err != nil {
		t.Fatalf("join at the limit with only silent groups: %v", err)
	}
}

type tryLocker interface {
	TryLock() bool
	Unlock()
}

// TestAssignmentOutsideLocks: with 1000 members and 1024 ranges, a
// rebalance is computed with neither the broker-wide lock nor the
// coordinator's held (a hook where it is computed checks both), once per
// generation, and every range goes to exactly one member.
func TestAssignmentOutsideLocks(t *testing.T) {
	b, _ := openGroups(t, Config{MaxMembersPerGroup: 1000})
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "wide", 10, 1024); err != nil {
		t.Fatal(err)
	}
	topicID, _ := b.topicID("wide")
	var ranges []uint64
	b.meta.View(func(st *metadata.State) { ranges = activeIDs(st, topicID) })
	members := make([]string, 1000)
	b.coord.mu.Lock()
	for i := range members {
		members[i] = fmt.Sprint("m", i)
		if _, _, err := b.coord.c.Join(topicID, "g", members[i], "", ranges, b.nowMs()); err != nil {
			t.Fatal(err)
		}
	}
	b.coord.mu.Unlock()
	computed := 0
	b.coord.beforeAssign = func(p *groups.Plan) {
		computed++
		for name, mu := range map[string]tryLocker{"broker": &b.mu, "coordinator": &b.coord.mu} {
			if !mu.TryLock() {
				t.Errorf("the %s lock is held while the assignment is computed", name)
				continue
			}
			mu.Unlock()
		}
		if len(p.Members) != 1000 || len(p.Ranges) != 1024 {
			t.Errorf("plan of %d members, %d ranges", len(p.Members), len(p.Ranges))
		}
	}
	owner := map[uint64]string{}
	for _, m := range members {
		a, _, err := b.memberAssignment(topicID, "g", m, "", ranges)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range a.Ranges {
			if prev, ok := owner[r]; ok {
				t.Fatalf("range %d assigned to %s and %s", r, prev, m)
			}
			owner[r] = m
		}
	}
	if computed != 1 || len(owner) != 1024 {
		t.Fatalf("computed %d times (want 1); %d of 1024 ranges assigned", computed, len(owner))
	}
}

// Concurrent polls of one generation share one computation: the second
// caller waits on the first's rather than starting its own.
func TestAssignmentComputedOncePerGeneration(t *testing.T) {
	co := newCoordinator(Config{}.withDefaults())
	co.mu.Lock()
	_, plan, _ := co.c.Join(1, "g", "a", "", []uint64{1, 2}, 0)
	first, lead := co.startLocked(plan)
	again, lead2 := co.startLocked(plan)
	_, next, _ := co.c.Join(1, "g", "b", "", []uint64{1, 2}, 0) // a new generation
	other, lead3 := co.startLocked(next)
	co.mu.Unlock()
	if !lead || lead2 || again != first || !lead3 || other == first {
		t.Fatalf("lead %v %v %v, shared %v, new generation shared %v", lead, lead2, lead3, again == first, other == first)
	}
	co.assign(next, other)
	if _, ok := co.inflight[coordKey{1, "g"}]; ok {
		t.Fatal("finished computation left in flight")
	}
}
