package groups

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const timeout = 30_000

func mustPoll(t *testing.T, c *Coordinator, group, member string, ranges []uint64, now int64) Assignment {
	t.Helper()
	a, err := c.Poll(1, group, member, ranges, now)
	if err != nil {
		t.Fatalf("Poll(%s, %s): %v", group, member, err)
	}
	return a
}

func TestNewDefaults(t *testing.T) {
	c := New(0, -1, 0)
	l := c.lim
	if l.SessionTimeoutMs != DefaultSessionTimeoutMs || l.MaxMembersPerGroup != DefaultMaxMembersPerGroup ||
		l.MaxGroups != DefaultMaxGroups || l.MaxGroupsPerTopic != DefaultMaxGroups || l.MaxGroupsPerOwner != DefaultMaxGroups {
		t.Fatalf("defaults not applied: %+v", l)
	}
}

func TestPollJoinsAndAssigns(t *testing.T) {
	c := New(timeout, 10, 10)
	ranges := []uint64{5, 1, 3, 3}
	a := mustPoll(t, c, "g", "m1", ranges, 1000)
	if !reflect.DeepEqual(a.Ranges, []uint64{1, 3, 5}) || a.Generation == 0 {
		t.Fatalf("sole member got %+v", a)
	}
	again := mustPoll(t, c, "g", "m1", ranges, 1500)
	if again.Generation != a.Generation {
		t.Fatalf("an unchanged poll bumped the generation: %d -> %d", a.Generation, again.Generation)
	}
	b := mustPoll(t, c, "g", "m2", ranges, 2000)
	if b.Generation <= a.Generation {
		t.Fatalf("join did not bump the generation: %d -> %d", a.Generation, b.Generation)
	}
	a = mustPoll(t, c, "g", "m1", ranges, 2000)
	if a.Generation != b.Generation {
		t.Fatalf("members disagree on the generation: %d vs %d", a.Generation, b.Generation)
	}
	// m1 held every range when m2 joined; m2 gets its share once m1 has
	// polled under the new generation (see TestHandoffWaitsForHolder).
	b = mustPoll(t, c, "g", "m2", ranges, 2000)
	all := append(slices.Clone(a.Ranges), b.Ranges...)
	slices.Sort(all)
	if !reflect.DeepEqual(all, []uint64{1, 3, 5}) {
		t.Fatalf("assignments %v and %v do not partition the ranges", a.Ranges, b.Ranges)
	}
	want := Assign([]uint64{1, 3, 5}, []string{"m1", "m2"})
	if !slices.Equal(a.Ranges, want["m1"]) || !slices.Equal(b.Ranges, want["m2"]) {
		t.Fatalf("assignment %v/%v differs from Assign %v", a.Ranges, b.Ranges, want)
	}
}

// TestHandoffWaitsForHolder: a range moving between live members reaches
// its new owner only after the member that held it has polled again, so
// the two never read it at the same time; leaving hands it over at once.
func TestHandoffWaitsForHolder(t *testing.T) {
	c := New(timeout, 10, 10)
	ranges := []uint64{1, 2, 3, 4}
	if a := mustPoll(t, c, "g", "a", ranges, 0); len(a.Ranges) != 4 {
		t.Fatalf("sole member got %v", a.Ranges)
	}
	want := Assign(ranges, []string{"a", "b"})
	if len(want["b"]) == 0 {
		t.Fatal("the test needs b to get a range")
	}
	if b := mustPoll(t, c, "g", "b", ranges, 1); len(b.Ranges) != 0 {
		t.Fatalf("b got %v while a still holds every range", b.Ranges)
	}
	if got := c.Members(1, "g"); !slices.Equal(got[1].Ranges, want["b"]) {
		t.Fatalf("Members reports %v for b, want the assignment %v", got[1].Ranges, want["b"])
	}
	if a := mustPoll(t, c, "g", "a", ranges, 2); !slices.Equal(a.Ranges, want["a"]) {
		t.Fatalf("a got %v, want %v", a.Ranges, want["a"])
	}
	if b := mustPoll(t, c, "g", "b", ranges, 3); !slices.Equal(b.Ranges, want["b"]) {
		t.Fatalf("b got %v after a polled, want %v", b.Ranges, want["b"])
	}
	// b leaves: its ranges go back to a at once.
	c.Leave(1, "g", "b", 4)
	if a := mustPoll(t, c, "g", "a", ranges, 5); len(a.Ranges) != 4 {
		t.Fatalf("a got %v after b left", a.Ranges)
	}
	// c joins and a is evicted without polling again: c need not wait.
	mustPoll(t, c, "g", "c", ranges, timeout)
	if got := mustPoll(t, c, "g", "c", ranges, timeout+6); len(got.Ranges) != 4 {
		t.Fatalf("c got %v after a went silent", got.Ranges)
	}
}

func TestRangeChangeBumpsGeneration(t *testing.T) {
	c := New(timeout, 10, 10)
	a := mustPoll(t, c, "g", "m", []uint64{1}, 0)
	b := mustPoll(t, c, "g", "m", []uint64{2, 3}, 1)
	if b.Generation <= a.Generation || !slices.Equal(b.Ranges, []uint64{2, 3}) {
		t.Fatalf("range change: %+v -> %+v", a, b)
	}
	if n := c.SetRanges(1, []uint64{3, 2}); n != 0 {
		t.Fatalf("SetRanges with the same set changed %d groups", n)
	}
	if n := c.SetRanges(1, []uint64{4}); n != 1 {
		t.Fatalf("SetRanges changed %d groups, want 1", n)
	}
	if n := c.SetRanges(2, []uint64{4}); n != 0 {
		t.Fatalf("SetRanges of another topic changed %d groups", n)
	}
	hb, err := c.Heartbeat(1, "g", "m", 2)
	if err != nil || hb.Generation <= b.Generation || !slices.Equal(hb.Ranges, []uint64{4}) {
		t.Fatalf("after SetRanges: %+v %v", hb, err)
	}
}

func TestLimitsAndNames(t *testing.T) {
	c := New(timeout, 2, 2)
	mustPoll(t, c, "g", "a", nil, 0)
	mustPoll(t, c, "g", "b", nil, 0)
	if _, err := c.Poll(1, "g", "c", nil, 0); !errors.Is(err, ErrTooManyMembers) {
		t.Fatalf("third member: %v", err)
	}
	mustPoll(t, c, "g", "a", nil, 1) // existing members still poll
	mustPoll(t, c, "h", "a", nil, 0)
	if _, err := c.Poll(1, "i", "a", nil, 0); !errors.Is(err, ErrTooManyGroups) {
		t.Fatalf("third group: %v", err)
	}
	if _, err := c.Poll(2, "g", "a", nil, 0); !errors.Is(err, ErrTooManyGroups) {
		t.Fatalf("same group name, other topic: %v", err)
	}
	// A silent member makes room for a new one.
	mustPoll(t, c, "g", "a", nil, timeout+5)
	if _, err := c.Poll(1, "g", "c", nil, timeout+5); err != nil {
		t.Fatalf("join after eviction: %v", err)
	}
	for _, tt := range []struct{ group, member string }{
		{"", "m"}, {"g", ""}, {strings.Repeat("x", MaxNameLen+1), "m"}, {"g", strings.Repeat("x", MaxNameLen+1)},
	} {
		if _, err := c.Poll(1, tt.group, tt.member, nil, 0); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Poll(%q, %q): %v", tt.group, tt.member, err)
		}
	}
	if _, err := New(timeout, 2, 2).Poll(1, strings.Repeat("x", MaxNameLen), "m", nil, 0); err != nil {
		t.Errorf("name of MaxNameLen bytes: %v", err)
	}
}

func TestHeartbeatAndLeave(t *testing.T) {
	c := New(timeout, 10, 10)
	if _, err := c.Heartbeat(1, "g", "m", 0); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat before join: %v", err)
	}
	mustPoll(t, c, "g", "m", []uint64{1, 2}, 0)
	mustPoll(t, c, "g", "n", []uint64{1, 2}, 0)
	if _, err := c.Heartbeat(1, "g", "x", 0); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat of a stranger: %v", err)
	}
	if _, err := c.Heartbeat(1, "g", "m", timeout); err != nil {
		t.Fatalf("heartbeat at the timeout: %v", err)
	}
	gen, _ := c.Generation(1, "g")
	if !c.Leave(1, "g", "n", timeout) {
		t.Fatal("Leave of a member reported false")
	}
	if c.Leave(1, "g", "n", timeout) {
		t.Fatal("second Leave reported true")
	}
	a, err := c.Heartbeat(1, "g", "m", timeout)
	if err != nil || a.Generation <= gen || !slices.Equal(a.Ranges, []uint64{1, 2}) {
		t.Fatalf("after leave: %+v %v (gen before %d)", a, err, gen)
	}
	if _, err := c.Heartbeat(1, "g", "m", 2*timeout+1); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat after its session ran out: %v", err)
	}
	if _, ok := c.Generation(1, "g"); ok || len(c.Groups(1)) != 0 {
		t.Fatal("an empty group is still listed")
	}
}

func TestExpireBoundary(t *testing.T) {
	c := New(timeout, 10, 10)
	mustPoll(t, c, "g", "a", []uint64{1}, 100)
	mustPoll(t, c, "g", "b", []uint64{1}, 200)
	if ev := c.Expire(100 + timeout); len(ev) != 0 {
		t.Fatalf("evicted at exactly the timeout: %v", ev)
	}
	gen, _ := c.Generation(1, "g")
	ev := c.Expire(101 + timeout)
	if !reflect.DeepEqual(ev, []Evicted{{Topic: 1, Group: "g", Member: "a"}}) {
		t.Fatalf("Expire = %v", ev)
	}
	if g2, _ := c.Generation(1, "g"); g2 <= gen {
		t.Fatalf("eviction did not bump the generation: %d -> %d", gen, g2)
	}
	m := c.Members(1, "g")
	if len(m) != 1 || m[0].Name != "b" || m[0].LastSeen != 200 || !slices.Equal(m[0].Ranges, []uint64{1}) {
		t.Fatalf("Members = %+v", m)
	}
	ev = c.Expire(1 << 40)
	if len(ev) != 1 || c.Members(1, "g") != nil {
		t.Fatalf("final Expire = %v, members %v", ev, c.Members(1, "g"))
	}
}

func TestGroupsListing(t *testing.T) {
	c := New(timeout, 10, 10)
	mustPoll(t, c, "b", "m", nil, 0)
	mustPoll(t, c, "a", "m", nil, 0)
	if _, err := c.Poll(2, "z", "m", nil, 0); err != nil {
		t.Fatal(err)
	}
	if got := c.Groups(1); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("Groups(1) = %v", got)
	}
}

func TestAssignTable(t *testing.T) {
	if got := Assign([]uint64{1, 2}, nil); len(got) != 0 {
		t.Fatalf("no members: %v", got)
	}
	got := Assign(nil, []string{"a", "b"})
	if len(got) != 2 || got["a"] != nil || got["b"] != nil {
		t.Fatalf("no ranges: %v", got)
	}
	// Each range goes to the highest Score.
	ranges := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	members := []string{"alpha", "beta", "gamma"}
	got = Assign(ranges, members)
	for _, r := range ranges {
		best := slices.MaxFunc(members, func(a, b string) int {
			sa, sb := Score(r, a), Score(r, b)
			if sa != sb {
				if sa < sb {
					return -1
				}
				return 1
			}
			return strings.Compare(b, a)
		})
		if !slices.Contains(got[best], r) {
			t.Errorf("range %d not with %s: %v", r, best, got)
		}
	}
}

func drawNames(t *rapid.T, label string) []string {
	return rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z]{1,6}`), 0, 8, rapid.ID[string]).Draw(t, label)
}

func checkPartition(t *rapid.T, ranges []uint64, members []string, got map[string][]uint64) {
	if len(members) == 0 {
		if len(got) != 0 {
			t.Fatalf("assignment without members: %v", got)
		}
		return
	}
	seen := map[uint64]int{}
	for m, rs := range got {
		if !slices.Contains(members, m) {
			t.Fatalf("assigned to non-member %q", m)
		}
		if !slices.IsSorted(rs) {
			t.Fatalf("ranges of %q not sorted: %v", m, rs)
		}
		for _, r := range rs {
			seen[r]++
		}
	}
	for _, r := range ranges {
		if seen[r] != 1 {
			t.Fatalf("range %d assigned %d times: %v", r, seen[r], got)
		}
	}
	if len(seen) != len(slices.Compact(slices.Sorted(slices.Values(ranges)))) {
		t.Fatalf("assigned ranges that do not exist: %v", got)
	}
}

func TestPropAssignDeterministicAndSticky(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ranges := rapid.SliceOfN(rapid.Uint64Range(0, 50), 0, 30).Draw(t, "ranges")
		members := drawNames(t, "members")
		got := Assign(ranges, members)
		checkPartition(t, ranges, members, got)

		shuffled := slices.Clone(members)
		slices.Reverse(shuffled)
		rev := slices.Clone(ranges)
		slices.Reverse(rev)
		if !reflect.DeepEqual(Assign(rev, shuffled), got) {
			t.Fatal("assignment depends on input order")
		}
		if len(members) == 0 {
			return
		}
		// A member leaving moves only its own ranges.
		gone := rapid.SampledFrom(members).Draw(t, "leaver")
		rest := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == gone })
		after := Assign(ranges, rest)
		for _, m := range rest {
			for _, r := range got[m] {
				if !slices.Contains(after[m], r) {
					t.Fatalf("range %d moved off %q when %q left", r, m, gone)
				}
			}
		}
		// A member joining only takes ranges.
		joiner := rapid.StringMatching(`[A-Z]{1,6}`).Draw(t, "joiner")
		joined := Assign(ranges, append(slices.Clone(members), joiner))
		for _, m := range members {
			for _, r := range joined[m] {
				if !slices.Contains(got[m], r) {
					t.Fatalf("range %d moved to %q when %q joined", r, m, joiner)
				}
			}
		}
	})
}

// TestPropCoordinator drives a Coordinator with random operations and a
// clock that only moves forward, and checks it against a model of who is
// alive.
func TestPropCoordinator(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const to = 100
		c := NewWithLimits(Limits{SessionTimeoutMs: to, MaxMembersPerGroup: 4, MaxGroups: 3,
			MaxGroupsPerTopic: 2, MaxGroupsPerOwner: 2})
		owners := []string{"", "u", "v"}
		groupNames := []string{"g1", "g2", "g3", "g4"}
		memberNames := []string{"a", "b", "c", "d", "e"}
		type key struct {
			topic uint64
			group string
		}
		lastSeen := map[key]map[string]int64{} // the model
		// told is what each member was last answered: no range may be
		// in two live members' answers at once.
		told := map[key]map[string][]uint64{}
		now := int64(0)
		hand := func(k key, member string, rs []uint64) {
			for other, theirs := range told[k] {
				// A member silent past the timeout may have been evicted,
				// and an evicted member holds nothing.
				if seen, ok := lastSeen[k][other]; !ok || now-seen > to || other == member {
					continue
				}
				for _, r := range rs {
					if slices.Contains(theirs, r) {
						t.Fatalf("range %d of %v handed to %s while %s holds it", r, k, member, other)
					}
				}
			}
			if told[k] == nil {
				told[k] = map[string][]uint64{}
			}
			told[k][member] = rs
		}
		lastGen := map[key]uint64{}
		rangesOf := map[uint64][]uint64{1: {1, 2, 3}, 2: {10}}

		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			now += rapid.Int64Range(0, 60).Draw(t, "dt")
			topic := rapid.Uint64Range(1, 2).Draw(t, "topic")
			k := key{topic, rapid.SampledFrom(groupNames).Draw(t, "group")}
			member := rapid.SampledFrom(memberNames).Draw(t, "member")
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1:
				owner := rapid.SampledFrom(owners).Draw(t, "owner")
				a, plan, err := c.Join(topic, k.group, member, owner, rangesOf[topic], now)
				a, err = c.settlePlan(a, plan, member, err)
				if err == nil {
					if lastSeen[k] == nil {
						lastSeen[k] = map[string]int64{}
					}
					lastSeen[k][member] = now
					hand(k, member, a.Ranges)
				}
			case 2:
				if a, err := c.Heartbeat(topic, k.group, member, now); err == nil {
					lastSeen[k][member] = now
					hand(k, member, a.Ranges)
				} else if seen, ok := lastSeen[k][member]; ok && now-seen <= to {
					t.Fatalf("heartbeat of live member %v/%s refused: %v", k, member, err)
				}
			case 3:
				c.Leave(topic, k.group, member, now)
				delete(lastSeen[k], member)
				delete(told[k], member)
			case 4:
				for _, ev := range c.Expire(now) {
					seen := lastSeen[key{ev.Topic, ev.Group}][ev.Member]
					if now-seen <= to {
						t.Fatalf("evicted %+v seen at %d, now %d", ev, seen, now)
					}
				}
			}
			// Silent members may be gone at any time; live ones must be there.
			for k, ms := range lastSeen {
				var alive []string
				for _, m := range c.Members(k.topic, k.group) {
					alive = append(alive, m.Name)
				}
				for m, seen := range ms {
					in := slices.Contains(alive, m)
					if now-seen <= to && !in {
						t.Fatalf("live member %v/%s (seen %d, now %d) missing", k, m, seen, now)
					}
					if !in {
						delete(ms, m)
						delete(told[k], m)
					}
				}
				for _, m := range alive {
					if _, ok := ms[m]; !ok {
						t.Fatalf("member %v/%s present but never joined or left", k, m)
					}
				}
				if gen, ok := c.Generation(k.topic, k.group); ok {
					if gen < lastGen[k] {
						t.Fatalf("generation of %v went back: %d -> %d", k, lastGen[k], gen)
					}
					lastGen[k] = gen
					got := map[string][]uint64{}
					for _, m := range c.Members(k.topic, k.group) {
						got[m.Name] = m.Ranges
					}
					checkPartition(t, rangesOf[k.topic], slices.Collect(maps.Keys(got)), got)
				}
			}
			if len(c.groups) > 3 {
				t.Fatalf("%d groups over the limit", len(c.groups))
			}
			checkIndexes(t, c)
			for _, o := range owners[1:] {
				if c.Owned(o) > 2 {
					t.Fatalf("owner %s has %d groups", o, c.Owned(o))
				}
			}
			for topic := range rangesOf {
				if len(c.Groups(topic)) > 2 {
					t.Fatalf("topic %d has %d groups", topic, len(c.Groups(topic)))
				}
			}
		}
	})
}

func ExampleAssign() {
	a := Assign([]uint64{1, 2, 3, 4}, []string{"reader-1", "reader-2"})
	fmt.Println(len(a["reader-1"]) + len(a["reader-2"]))
	// Output: 4
}
