package groups

import (
	"errors"
	"slices"
)

// ErrStaleMember is returned by CommitRanges for a commit that does not
// come from the member's current membership: the member left, was
// evicted, or joined again since the generation the commit names.
var ErrStaleMember = errors.New("groups: stale member")

// MemberState is what Touch tells a member: the group's generation, how
// many ranges the member reads now (those it was last told) and how many
// live members the group has.
type MemberState struct {
	Generation uint64
	Ranges     int
	Members    int
}

// Touch records member as alive at now without answering it a new
// assignment: unlike Heartbeat and Poll, it keeps the member's holds, so
// a member that is still working through what it read keeps its ranges
// from their new owners (see Handoff) while it stays alive. A member that
// is not in the group gets ErrUnknownMember; it must poll to join again.
func (c *Coordinator) Touch(topic uint64, groupName, member string, now int64) (MemberState, error) {
	_, g, err := c.alive(topic, groupName, member, now)
	if err != nil {
		return MemberState{}, err
	}
	return MemberState{Generation: g.gen, Ranges: len(g.holds(member)), Members: len(g.members)}, nil
}

// CommitRanges checks a commit of member made under generation and
// returns the ranges it may advance: those it holds, which it was told and
// no other member reads until it polls again. The commit is refused with
// ErrStaleMember when the member is not live, or when generation is older
// than the member's latest join (the records were read before it left or
// was evicted, and may have been handed to another member since) or newer
// than the group's (it was learnt from a coordinator that has restarted
// since). A generation between the two is current: the group may have
// moved on, but the ranges the member holds are still its own to commit.
// The commit counts as a sign of life.
func (c *Coordinator) CommitRanges(topic uint64, groupName, member string, generation uint64, now int64) ([]uint64, error) {
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		return nil, ErrStaleMember
	}
	changed := len(c.evictSilent(g, now, "")) > 0
	_, ok := g.members[member]
	if !ok || generation < g.joined[member] || generation > g.gen {
		c.settle(k, g, changed)
		return nil, ErrStaleMember
	}
	c.seen(g, member, now)
	c.settle(k, g, changed)
	return g.holds(member), nil
}

// holds returns the ranges member holds, ascending.
func (g *group) holds(member string) []uint64 {
	var out []uint64
	for r, hs := range g.held {
		if slices.Contains(hs, member) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}
