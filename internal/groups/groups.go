// Package groups coordinates the consumer groups of one node: who is a
// member of each (group, topic), which of the topic's active ranges each
// member reads, and the generation that tells members the assignment moved.
//
// # Membership
//
// A member joins implicitly with its first Poll (the fetch path) and stays
// while it polls or heartbeats at least once per session timeout (default
// 30 s). Leave removes it at once; Expire, called by the owner on a tick,
// evicts members silent for longer than the timeout. Poll, Heartbeat and
// Leave also evict the silent members of the group they touch, so an
// assignment never includes a member known to be gone. Membership is soft
// state: after a restart members simply join again.
//
// # Generations
//
// Every change to a group's members or to its topic's range set bumps the
// group's generation, and the whole assignment is recomputed (an eager
// rebalance). Generations come from one counter per Coordinator, so they only
// grow, also across a group emptied and created again.
//
// # Assignment
//
// Ranges are assigned by rendezvous (highest random weight) hashing: range r
// goes to the member m with the highest xxhash64(bigendian64(r) || m), ties
// to the smaller name. This is deterministic (every node computes the same
// answer from the same inputs) and sticky: when a member leaves only its own
// ranges move, and a member that joins only takes ranges, never shuffling
// them among the others.
//
// # Limits and concurrency
//
// Group and member names come from clients, so both the number of groups and
// the members per group are bounded, and names are at most MaxNameLen bytes.
// The package is pure: no I/O, no clock (time is the `now` argument, unix
// milliseconds), no goroutines and no locks. A Coordinator is not safe for
// concurrent use; its owner serialises calls.
package groups

import (
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"slices"

	"github.com/cespare/xxhash/v2"
)

const (
	// DefaultSessionTimeoutMs is how long a member may stay silent.
	DefaultSessionTimeoutMs = 30_000
	// DefaultMaxMembersPerGroup bounds the members of one (group, topic).
	DefaultMaxMembersPerGroup = 1024
	// DefaultMaxGroups bounds the (group, topic) pairs with live members.
	DefaultMaxGroups = 10_000
	// MaxNameLen bounds group and member names, in bytes.
	MaxNameLen = 255
)

var (
	// ErrTooManyMembers is returned when a join would exceed the member limit.
	ErrTooManyMembers = errors.New("groups: too many members in the group")
	// ErrTooManyGroups is returned when a join would create a group beyond
	// the group limit.
	ErrTooManyGroups = errors.New("groups: too many groups")
	// ErrUnknownMember is returned by Heartbeat for a member that never
	// joined, left, or was evicted; it must poll to join again.
	ErrUnknownMember = errors.New("groups: unknown member")
	// ErrInvalidName is returned for an empty or over-long group or member name.
	ErrInvalidName = errors.New("groups: invalid group or member name")
)

// Assignment is what a member reads: its ranges, ascending, under a
// generation.
type Assignment struct {
	Generation uint64
	Ranges     []uint64
}

// Member describes one member of a group.
type Member struct {
	Name     string
	LastSeen int64    // unix ms of its last poll or heartbeat
	Ranges   []uint64 // assigned ranges, ascending
}

// Evicted names a member removed by Expire.
type Evicted struct {
	Topic  uint64
	Group  string
	Member string
}

// Coordinator holds all consumer groups of a node.
type Coordinator struct {
	sessionTimeout int64
	maxMembers     int
	maxGroups      int
	groups         map[groupKey]*group
	lastGen        uint64
}

type groupKey struct {
	topic uint64
	name  string
}

type group struct {
	members map[string]int64 // name -> last seen
	ranges  []uint64         // the topic's active ranges, ascending, unique
	gen     uint64
	assign  map[string][]uint64 // nil when stale
}

// New returns an empty Coordinator. Values <= 0 select the defaults.
func New(sessionTimeoutMs int64, maxMembersPerGroup, maxGroups int) *Coordinator {
	c := &Coordinator{
		sessionTimeout: cmp.Or(max(sessionTimeoutMs, 0), DefaultSessionTimeoutMs),
		maxMembers:     cmp.Or(max(maxMembersPerGroup, 0), DefaultMaxMembersPerGroup),
		maxGroups:      cmp.Or(max(maxGroups, 0), DefaultMaxGroups),
		groups:         make(map[groupKey]*group),
	}
	return c
}

// Poll is the fetch path: it joins member to the group if needed, records it
// as alive at now, adopts ranges (the topic's active range ids) as the
// group's range set and returns the member's assignment.
func (c *Coordinator) Poll(topic uint64, groupName, member string, ranges []uint64, now int64) (Assignment, error) {
	if !validName(groupName) || !validName(member) {
		return Assignment{}, ErrInvalidName
	}
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		if len(c.groups) >= c.maxGroups {
			return Assignment{}, ErrTooManyGroups
		}
		g = &group{members: make(map[string]int64)}
	}
	changed := len(c.evictSilent(g, now, member)) > 0
	if _, ok := g.members[member]; !ok {
		if len(g.members) >= c.maxMembers {
			c.settle(k, g, changed)
			return Assignment{}, ErrTooManyMembers
		}
		changed = true
	}
	g.members[member] = now
	if norm := normalize(ranges); !slices.Equal(norm, g.ranges) {
		g.ranges = norm
		changed = true
	}
	c.settle(k, g, changed)
	return g.assignment(member), nil
}

// Heartbeat records member as alive and returns its assignment, so a member
// learns of a rebalance without fetching. A member that is not in the group,
// or has been silent longer than their session timeout, gets ErrUnknownMember.
func (c *Coordinator) Heartbeat(topic uint64, groupName, member string, now int64) (Assignment, error) {
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		return Assignment{}, ErrUnknownMember
	}
	changed := len(c.evictSilent(g, now, "")) > 0
	if _, ok := g.members[member]; !ok {
		c.settle(k, g, changed)
		return Assignment{}, ErrUnknownMember
	}
	g.members[member] = now
	c.settle(k, g, changed)
	return g.assignment(member), nil
}

// Leave removes member from the group and reports whether it was a member.
// Its ranges move to the remaining members under a new generation.
func (c *Coordinator) Leave(topic uint64, groupName, member string, now int64) bool {
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		return false
	}
	changed := len(c.evictSilent(g, now, "")) > 0
	_, ok := g.members[member]
	delete(g.members, member)
	c.settle(k, g, changed || ok)
	return ok
}

// Expire evicts, across all groups, the members silent for longer than the
// session timeout at now, and returns them sorted by topic, group, member.
func (c *Coordinator) Expire(now int64) []Evicted {
	var out []Evicted
	for k, g := range c.groups {
		gone := c.evictSilent(g, now, "")
		for _, name := range gone {
			out = append(out, Evicted{Topic: k.topic, Group: k.name, Member: name})
		}
		c.settle(k, g, len(gone) > 0)
	}
	slices.SortFunc(out, func(a, b Evicted) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Member, b.Member))
	})
	return out
}

// SetRanges adopts ranges as the active range set of every group of topic,
// as after a split or merge, and returns how many groups changed (and so got
// a new generation).
func (c *Coordinator) SetRanges(topic uint64, ranges []uint64) int {
	norm := normalize(ranges)
	n := 0
	for k, g := range c.groups {
		if k.topic == topic && !slices.Equal(norm, g.ranges) {
			g.ranges = slices.Clone(norm)
			c.settle(k, g, true)
			n++
		}
	}
	return n
}

// Members returns the members of a group sorted by name, with their
// assignments. It evicts nobody; the answer may include members that Expire
// would remove.
func (c *Coordinator) Members(topic uint64, groupName string) []Member {
	g := c.groups[groupKey{topic, groupName}]
	if g == nil {
		return nil
	}
	out := make([]Member, 0, len(g.members))
	for _, name := range slices.Sorted(maps.Keys(g.members)) {
		out = append(out, Member{Name: name, LastSeen: g.members[name], Ranges: g.assignment(name).Ranges})
	}
	return out
}

// Generation returns a group's current generation; ok is false when the
// group has no members.
func (c *Coordinator) Generation(topic uint64, groupName string) (gen uint64, ok bool) {
	g := c.groups[groupKey{topic, groupName}]
	if g == nil {
		return 0, false
	}
	return g.gen, true
}

// Groups returns the names of the groups of topic with members, sorted.
func (c *Coordinator) Groups(topic uint64) []string {
	var out []string
	for k := range c.groups {
		if k.topic == topic {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}

// evictSilent removes the members of g silent for longer than their session
// timeout, except keep, and returns their names.
func (c *Coordinator) evictSilent(g *group, now int64, keep string) []string {
	var gone []string
	for name, seen := range g.members {
		if name != keep && c.silent(seen, now) {
			delete(g.members, name)
			gone = append(gone, name)
		}
	}
	return gone
}

func (c *Coordinator) silent(lastSeen, now int64) bool {
	return now-lastSeen > c.sessionTimeout
}

// settle stores or drops g after a change: an empty group is forgotten, a
// changed one gets a new generation and a stale assignment.
func (c *Coordinator) settle(k groupKey, g *group, changed bool) {
	if len(g.members) == 0 {
		delete(c.groups, k)
		return
	}
	c.groups[k] = g
	if changed {
		c.lastGen++
		g.gen = c.lastGen
		g.assign = nil
	}
}

// assignment returns member's share under the current generation.
func (g *group) assignment(member string) Assignment {
	if g.assign == nil {
		g.assign = Assign(g.ranges, slices.Collect(maps.Keys(g.members)))
	}
	return Assignment{Generation: g.gen, Ranges: slices.Clone(g.assign[member])}
}

// Assign maps every range to one member by rendezvous hashing. The result
// has a key for every member (nil when it gets no range), each value
// ascending. Duplicate ranges or members count once; input order does not
// matter. With no members the result is empty.
func Assign(ranges []uint64, members []string) map[string][]uint64 {
	out := make(map[string][]uint64, len(members))
	for _, m := range members {
		out[m] = nil
	}
	if len(members) == 0 {
		return out
	}
	var buf []byte
	for _, r := range normalize(ranges) {
		var best string
		var bestScore uint64
		first := true
		for m := range out {
			buf = binary.BigEndian.AppendUint64(buf[:0], r)
			buf = append(buf, m...)
			s := xxhash.Sum64(buf)
			if first || s > bestScore || s == bestScore && m < best {
				best, bestScore, first = m, s, false
			}
		}
		out[best] = append(out[best], r)
	}
	return out
}

// Score is the rendezvous weight of member for range r: xxhash64 of r as
// 8 big-endian bytes followed by the member name. Assign gives r to the
// member with the highest score.
func Score(r uint64, member string) uint64 {
	buf := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(member)), r)
	return xxhash.Sum64(append(buf, member...))
}

// normalize returns ranges sorted and without duplicates, as a new slice.
func normalize(ranges []uint64) []uint64 {
	out := slices.Clone(ranges)
	slices.Sort(out)
	return slices.Compact(out)
}

func validName(s string) bool { return s != "" && len(s) <= MaxNameLen }
