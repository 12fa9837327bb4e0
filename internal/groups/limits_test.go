package groups

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// join is Join with the plan, if any, computed and installed in line.
func join(t *testing.T, c *Coordinator, topic uint64, group, member, owner string, now int64) (Assignment, error) {
	t.Helper()
	a, plan, err := c.Join(topic, group, member, owner, []uint64{1, 2, 3}, now)
	return c.settlePlan(a, plan, member, err)
}

// checkIndexes: the per-topic and per-owner indexes list exactly the groups.
func checkIndexes(t interface {
	Helper()
	Fatalf(string, ...any)
}, c *Coordinator) {
	t.Helper()
	n, owned := 0, 0
	for topic, gs := range c.byTopic {
		for name, g := range gs {
			if c.groups[groupKey{topic, name}] != g || len(gs) == 0 {
				t.Fatalf("topic index holds %d/%s wrongly", topic, name)
			}
			n++
		}
	}
	for owner, gs := range c.byOwner {
		for k, g := range gs {
			if c.groups[k] != g || g.owner != owner || len(gs) == 0 {
				t.Fatalf("owner index holds %v under %q wrongly", k, owner)
			}
			owned++
		}
	}
	for _, g := range c.groups {
		if g.owner == "" {
			owned++
		}
		if len(g.members) == 0 {
			t.Fatalf("group %v kept without members", g.key)
		}
	}
	if n != len(c.groups) || owned != len(c.groups) {
		t.Fatalf("indexes list %d and %d groups, table %d", n, owned, len(c.groups))
	}
}

func TestOwnerGroupLimit(t *testing.T) {
	c := NewWithLimits(Limits{SessionTimeoutMs: timeout, MaxGroupsPerOwner: 3})
	for i := range 3 {
		if _, err := join(t, c, 1, fmt.Sprint("junk-", i), "m", "mallory", 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := join(t, c, 2, "junk-3", "m", "mallory", 0); !errors.Is(err, ErrOwnerGroupLimit) {
		t.Fatalf("fourth group of one owner: %v, want ErrOwnerGroupLimit", err)
	}
	// Another owner, and mallory's members joining existing groups, go on.
	if _, err := join(t, c, 1, "billing", "m", "alice", 0); err != nil {
		t.Fatalf("another owner's group: %v", err)
	}
	if _, err := join(t, c, 1, "junk-0", "m2", "mallory", 0); err != nil {
		t.Fatalf("joining an existing group at the limit: %v", err)
	}
	// A group is charged to its creator, not to whoever joins it.
	if _, err := join(t, c, 1, "billing", "m3", "mallory", 0); err != nil || c.Owned("alice") != 1 || c.Owned("mallory") != 3 {
		t.Fatalf("err %v, owned alice %d mallory %d", err, c.Owned("alice"), c.Owned("mallory"))
	}
	checkIndexes(t, c)
}

func TestTopicGroupLimit(t *testing.T) {
	c := NewWithLimits(Limits{SessionTimeoutMs: timeout, MaxGroupsPerTopic: 2})
	join(t, c, 1, "a", "m", "", 0)
	join(t, c, 1, "b", "m", "", 0)
	if _, err := join(t, c, 1, "c", "m", "", 0); !errors.Is(err, ErrTopicGroupLimit) {
		t.Fatalf("third group of a topic: %v, want ErrTopicGroupLimit", err)
	}
	if _, err := join(t, c, 2, "c", "m", "", 0); err != nil {
		t.Fatalf("another topic: %v", err)
	}
	checkIndexes(t, c)
}

// At a limit, groups whose members have all gone silent give their slot
// up to the join; a group with one live member does not.
func TestLimitReclaimsSilentGroups(t *testing.T) {
	c := NewWithLimits(Limits{SessionTimeoutMs: timeout, MaxGroupsPerOwner: 2})
	join(t, c, 1, "old", "m", "u", 0)
	join(t, c, 1, "live", "m", "u", 0)
	join(t, c, 1, "live", "n", "u", timeout) // keeps "live" alive
	if _, err := join(t, c, 1, "new", "m", "u", timeout); !errors.Is(err, ErrOwnerGroupLimit) {
		t.Fatalf("before the timeout: %v", err)
	}
	if _, err := join(t, c, 1, "new", "m", "u", timeout+1); err != nil {
		t.Fatalf("after old went silent: %v", err)
	}
	if got := c.Groups(1); !slices.Equal(got, []string{"live", "new"}) {
		t.Fatalf("groups %v, want [live new]", got)
	}
	if _, err := join(t, c, 1, "newer", "m", "u", timeout+1); !errors.Is(err, ErrOwnerGroupLimit) {
		t.Fatalf("live groups must keep their slots: %v", err)
	}
	checkIndexes(t, c)
}

// A group whose members all go silent is forgotten by Expire: the
// coordinator keeps no empty groups, and the owner's slot comes back.
func TestExpireForgetsEmptyGroups(t *testing.T) {
	c := NewWithLimits(Limits{SessionTimeoutMs: timeout, MaxGroupsPerOwner: 1})
	join(t, c, 1, "g", "m", "u", 0)
	if ev := c.Expire(timeout); len(ev) != 0 {
		t.Fatalf("expired at the boundary: %v", ev)
	}
	if ev := c.Expire(timeout + 1); len(ev) != 1 {
		t.Fatalf("Expire = %v, want one member", ev)
	}
	if len(c.Groups(1)) != 0 || c.Owned("u") != 0 {
		t.Fatalf("groups %v, owned %d after expiry", c.Groups(1), c.Owned("u"))
	}
	checkIndexes(t, c)
}

func TestJoinPlansOncePerGeneration(t *testing.T) {
	c := New(timeout, 10, 10)
	_, plan, err := c.Join(1, "g", "a", "", []uint64{1, 2}, 0)
	if err != nil || plan == nil {
		t.Fatalf("first join: plan %v, err %v", plan, err)
	}
	// Another join moves the generation on: the first plan is stale.
	_, plan2, _ := c.Join(1, "g", "b", "", []uint64{1, 2}, 0)
	if c.Install(plan, plan.Compute()) {
		t.Fatal("installed a plan of an old generation")
	}
	if !c.Install(plan2, plan2.Compute()) {
		t.Fatal("current plan not installed")
	}
	a, plan3, _ := c.Join(1, "g", "a", "", []uint64{1, 2}, 1)
	if plan3 != nil || a.Generation != plan2.Generation {
		t.Fatalf("after install: plan %v, generation %d want %d", plan3, a.Generation, plan2.Generation)
	}
	b, _, _ := c.Join(1, "g", "b", "", []uint64{1, 2}, 1)
	if got := slices.Concat(a.Ranges, b.Ranges); len(got) != 2 {
		t.Fatalf("a %v b %v do not share both ranges", a.Ranges, b.Ranges)
	}
}
