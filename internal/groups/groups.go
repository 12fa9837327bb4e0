// Package groups coordinates the consumer groups of one node: who is a
// member of each (group, topic), which of the topic's active ranges each
// member reads, and the generation that tells members the assignment moved.
//
// # Membership
//
// A member joins implicitly with its first Poll or Join (the fetch path) and
// stays while it polls or heartbeats at least once per session timeout
// (default 30 s). Leave removes it at once; Expire, called by the owner on a
// tick, evicts members silent for longer than the timeout. Poll, Join,
// Heartbeat and Leave also evict the silent members of the group they touch,
// so an assignment never includes a member known to be gone. Membership is
// soft state: after a restart members simply join again. A group is
// forgotten the moment it has no members (its idle timeout is zero): nothing
// about an empty group is worth keeping, and its committed position lives
// in the metadata, not here.
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
// them among the others. An assignment is computed once per generation and
// cached. Computing it costs O(members × ranges), so Join hands the work out
// as a Plan for the owner to compute outside its lock (Install caches the
// result, Answer answers each member waiting on it); Poll and Heartbeat
// compute in line, for owners with no lock.
//
// # Handoff
//
// A range that moves from one live member to another is not handed to its
// new owner at once: the old owner may hold records of it that it has
// read but not yet committed, and the new owner starts from the committed
// position, so both would deliver them. The range stays with the member
// last told it (its holder) until that member polls or heartbeats again
// and learns the new assignment; a member that polls again has finished
// with its previous answer (a fetch loop commits a page before fetching
// the next). Every answer, from a cached assignment or from a Plan just
// computed (Answer), does this bookkeeping: the member's holds become
// exactly the ranges it is told. Meanwhile the new owner's answer leaves
// the range out. A member that leaves or is evicted holds nothing, so its
// ranges pass at once. Members reports the assignment itself, without
// this hold.
//
// Holds survive a change of the range set. A reader of a split range's
// child, or of a merged range, first reads what its parents hold, so a
// member holding a parent holds those records too. The package does not
// know the lineage of ranges, so every range that appears in a change is
// held by every live member that held a range that went away in the same
// change: exact for one split or merge, and only more cautious (a longer
// wait, never a duplicate) when several land in one change. A range may
// so have several holders (a merged range has two parents); it is handed
// to its owner once none of the others is live and holding it.
//
// # Members that fetch
//
// A member that works through a page for a while keeps its membership
// with Touch, which records it alive without answering it, so it keeps
// its holds. Its commit is checked with CommitRanges: only a live member
// under the membership that read the records may commit, and only the
// ranges it holds.
//
// # Limits and concurrency
//
// Group and member names come from clients, so the groups of the node, of
// one topic and of one owner (the user whose member created the group), and
// the members per group are bounded, and names are at most MaxNameLen bytes.
// A join that would pass the topic's or the owner's bound first reclaims
// that topic's or owner's groups whose members have all gone silent.
// The package is pure: no I/O, no clock (time is the `now` argument, unix
// milliseconds), no goroutines and no locks. A Coordinator is not safe for
// concurrent use; its owner serialises calls.
package groups

import (
	"cmp"
	"errors"
	"iter"
	"maps"
	"slices"
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
	// the node's group limit.
	ErrTooManyGroups = errors.New("groups: too many groups")
	// ErrTopicGroupLimit is returned when a join would create a group
	// beyond the limit of groups per topic.
	ErrTopicGroupLimit = errors.New("groups: too many groups on the topic")
	// ErrOwnerGroupLimit is returned when a join would create a group
	// beyond the limit of groups per owner.
	ErrOwnerGroupLimit = errors.New("groups: too many groups of one owner")
	// ErrUnknownMember is returned by Heartbeat for a member that never
	// joined, left, or was evicted; it must poll to join again.
	ErrUnknownMember = errors.New("groups: unknown member")
	// ErrInvalidName is returned for an empty or over-long group or member name.
	ErrInvalidName = errors.New("groups: invalid group or member name")
)

// Limits bound a Coordinator. Values <= 0 select the defaults; the per-topic
// and per-owner bounds default to the node's.
type Limits struct {
	SessionTimeoutMs   int64
	MaxMembersPerGroup int
	MaxGroups          int
	MaxGroupsPerTopic  int
	MaxGroupsPerOwner  int
}

func (l Limits) withDefaults() Limits {
	l.SessionTimeoutMs = cmp.Or(max(l.SessionTimeoutMs, 0), DefaultSessionTimeoutMs)
	l.MaxMembersPerGroup = cmp.Or(max(l.MaxMembersPerGroup, 0), DefaultMaxMembersPerGroup)
	l.MaxGroups = cmp.Or(max(l.MaxGroups, 0), DefaultMaxGroups)
	l.MaxGroupsPerTopic = cmp.Or(max(l.MaxGroupsPerTopic, 0), l.MaxGroups)
	l.MaxGroupsPerOwner = cmp.Or(max(l.MaxGroupsPerOwner, 0), l.MaxGroups)
	return l
}

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
	lim     Limits
	groups  map[groupKey]*group
	byTopic map[uint64]map[string]*group   // the groups of each topic
	byOwner map[string]map[groupKey]*group // the groups each owner created
	lastGen uint64
}

type groupKey struct {
	topic uint64
	name  string
}

type group struct {
	key     groupKey
	owner   string           // who created it ("" = not accounted)
	members map[string]int64 // name -> last seen
	newest  int64            // the latest last-seen of any member it had
	ranges  []uint64         // the topic's active ranges, ascending, unique
	gen     uint64
	assign  map[string][]uint64 // nil when stale
	// held maps a range to the members last handed it (or one of its
	// parents), until each learns it lost it (see Handoff). Lists are
	// short: one holder, or the holders of a change's parents.
	held map[uint64][]string
	// joined is the generation at which each member last joined: a commit
	// naming an older one comes from before it left or was evicted (see
	// CommitRanges).
	joined map[string]uint64
}

// New returns an empty Coordinator with the node-wide limits only. Values
// <= 0 select the defaults.
func New(sessionTimeoutMs int64, maxMembersPerGroup, maxGroups int) *Coordinator {
	return NewWithLimits(Limits{
		SessionTimeoutMs: sessionTimeoutMs, MaxMembersPerGroup: maxMembersPerGroup, MaxGroups: maxGroups,
	})
}

// NewWithLimits returns an empty Coordinator bounded by l.
func NewWithLimits(l Limits) *Coordinator {
	return &Coordinator{
		lim:     l.withDefaults(),
		groups:  make(map[groupKey]*group),
		byTopic: make(map[uint64]map[string]*group),
		byOwner: make(map[string]map[groupKey]*group),
	}
}

// Poll is Join with no owner, computing the assignment in line.
func (c *Coordinator) Poll(topic uint64, groupName, member string, ranges []uint64, now int64) (Assignment, error) {
	a, plan, err := c.Join(topic, groupName, member, "", ranges, now)
	return c.settlePlan(a, plan, member, err)
}

// Join is the fetch path: it joins member to the group if needed (a new
// group is charged to owner, "" for none), records it as alive at now,
// adopts ranges (the topic's active range ids) as the group's range set and
// returns the member's assignment. When the generation's assignment is not
// computed yet it returns a Plan instead, for the caller to compute,
// Install and Answer from; the Assignment is then empty.
func (c *Coordinator) Join(topic uint64, groupName, member, owner string, ranges []uint64, now int64) (Assignment, *Plan, error) {
	if !validName(groupName) || !validName(member) {
		return Assignment{}, nil, ErrInvalidName
	}
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		if err := c.admit(k, owner, now); err != nil {
			return Assignment{}, nil, err
		}
		g = &group{owner: owner, members: make(map[string]int64), held: make(map[uint64][]string),
			joined: make(map[string]uint64)}
	}
	changed := len(c.evictSilent(g, now, member)) > 0
	_, known := g.members[member]
	if !known {
		if len(g.members) >= c.lim.MaxMembersPerGroup {
			c.settle(k, g, changed)
			return Assignment{}, nil, ErrTooManyMembers
		}
		changed = true
	}
	c.seen(g, member, now)
	if norm := normalize(ranges); !slices.Equal(norm, g.ranges) {
		g.adoptRanges(norm)
		changed = true
	}
	c.settle(k, g, changed)
	if !known {
		g.joined[member] = g.gen
	}
	a, plan := c.answer(k, g, member)
	return a, plan, nil
}

// Install caches a computed assignment if the group is still at the plan's
// generation, and reports whether it did.
func (c *Coordinator) Install(p *Plan, assign map[string][]uint64) bool {
	g := c.groups[groupKey{p.Topic, p.Group}]
	if g == nil || g.gen != p.Generation {
		return false
	}
	g.assign = assign
	return true
}

// Answer returns member's share of assign, the assignment computed from
// p, and does the bookkeeping of an answer (see Handoff): the member
// polled, so it is done with what it held; it now holds the ranges it is
// told, which are its share less the ranges another live member holds.
// The members waiting on a Plan are each answered this way once it is
// computed (and Installed). When the group has moved past p's generation
// meanwhile, the answer keeps p's generation and leaves out ranges the
// group no longer has; the member's next poll learns the new generation.
func (c *Coordinator) Answer(p *Plan, member string, assign map[string][]uint64) Assignment {
	k := groupKey{p.Topic, p.Group}
	g := c.groups[k]
	if g == nil {
		return Assignment{Generation: p.Generation}
	}
	if _, ok := g.members[member]; !ok {
		// It left or was evicted while the plan was computed: it holds
		// nothing and is told nothing.
		return Assignment{Generation: p.Generation}
	}
	if g.gen == p.Generation && g.assign != nil {
		a, _ := c.answer(k, g, member)
		return a
	}
	var mine []uint64
	for _, r := range assign[member] {
		if _, found := slices.BinarySearch(g.ranges, r); found {
			mine = append(mine, r)
		}
	}
	return Assignment{Generation: p.Generation, Ranges: g.tell(member, mine)}
}

// Heartbeat records member as alive and returns its assignment, so a member
// learns of a rebalance without fetching. A member that is not in the group,
// or has been silent longer than their member timeout, gets ErrUnknownMember.
func (c *Coordinator) Heartbeat(topic uint64, groupName, member string, now int64) (Assignment, error) {
	k, g, err := c.alive(topic, groupName, member, now)
	if err != nil {
		return Assignment{}, err
	}
	a, plan := c.answer(k, g, member)
	return c.settlePlan(a, plan, member, nil)
}

// alive evicts the group's silent members, then records member as alive
// at now, settling the group either way; ErrUnknownMember when member is
// not (or no longer) in it.
func (c *Coordinator) alive(topic uint64, groupName, member string, now int64) (groupKey, *group, error) {
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		return k, nil, ErrUnknownMember
	}
	changed := len(c.evictSilent(g, now, "")) > 0
	if _, ok := g.members[member]; !ok {
		c.settle(k, g, changed)
		return k, nil, ErrUnknownMember
	}
	c.seen(g, member, now)
	c.settle(k, g, changed)
	return k, g, nil
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
	delete(g.joined, member)
	g.release(member)
	c.settle(k, g, changed || ok)
	return ok
}

// Expire evicts, across all groups, the members silent for longer than the
// session timeout at now, and returns them sorted by topic, group, member.
// Groups left without members are forgotten.
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
	for name, g := range c.byTopic[topic] {
		if !slices.Equal(norm, g.ranges) {
			g.adoptRanges(slices.Clone(norm))
			c.settle(groupKey{topic, name}, g, true)
			n++
		}
	}
	return n
}

// Members returns the members of a group sorted by name, with their
// assignments (computed in line if stale). It evicts nobody; the answer may
// include members that Expire would remove.
func (c *Coordinator) Members(topic uint64, groupName string) []Member {
	k := groupKey{topic, groupName}
	g := c.groups[k]
	if g == nil {
		return nil
	}
	out := make([]Member, 0, len(g.members))
	if g.assign == nil {
		p := c.plan(k, g)
		c.Install(p, p.Compute()) // takes no holds: nobody is told
	}
	for _, name := range slices.Sorted(maps.Keys(g.members)) {
		out = append(out, Member{Name: name, LastSeen: g.members[name], Ranges: slices.Clone(g.assign[name])})
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
	return slices.Sorted(maps.Keys(c.byTopic[topic]))
}

// Owned returns how many groups owner created that still have members.
func (c *Coordinator) Owned(owner string) int { return len(c.byOwner[owner]) }

// admit checks that a new group k of owner fits every limit, first
// reclaiming the topic's or the owner's wholly silent groups if one is full.
func (c *Coordinator) admit(k groupKey, owner string, now int64) error {
	if len(c.groups) >= c.lim.MaxGroups {
		return ErrTooManyGroups
	}
	if len(c.byTopic[k.topic]) >= c.lim.MaxGroupsPerTopic {
		c.reclaim(maps.Values(c.byTopic[k.topic]), now)
		if len(c.byTopic[k.topic]) >= c.lim.MaxGroupsPerTopic {
			return ErrTopicGroupLimit
		}
	}
	if owner != "" && len(c.byOwner[owner]) >= c.lim.MaxGroupsPerOwner {
		c.reclaim(maps.Values(c.byOwner[owner]), now)
		if len(c.byOwner[owner]) >= c.lim.MaxGroupsPerOwner {
			return ErrOwnerGroupLimit
		}
	}
	return nil
}

// reclaim forgets the groups whose members have all gone silent. It looks
// only at each group's newest sighting, O(1) per group, so a join refused
// at a limit costs at most the limit; partly silent groups free no slot and
// are left to Expire.
func (c *Coordinator) reclaim(gs iter.Seq[*group], now int64) {
	for g := range gs {
		if c.silent(g.newest, now) {
			c.forget(g)
		}
	}
}

// evictSilent removes the members of g silent for longer than their session
// timeout, except keep, and returns their names.
func (c *Coordinator) evictSilent(g *group, now int64, keep string) []string {
	var gone []string
	for name, seen := range g.members {
		if name != keep && c.silent(seen, now) {
			delete(g.members, name)
			delete(g.joined, name)
			g.release(name)
			gone = append(gone, name)
		}
	}
	return gone
}

func (c *Coordinator) silent(lastSeen, now int64) bool {
	return now-lastSeen > c.lim.SessionTimeoutMs
}

// seen records member as alive at now.
func (c *Coordinator) seen(g *group, member string, now int64) {
	g.members[member] = now
	g.newest = max(g.newest, now)
}

// settle stores or drops g after a change: an empty group is forgotten, a
// changed one gets a new generation and a stale assignment.
func (c *Coordinator) settle(k groupKey, g *group, changed bool) {
	g.key = k
	if len(g.members) == 0 {
		c.forget(g)
		return
	}
	if c.groups[k] == nil {
		c.index(g)
	}
	if changed {
		c.lastGen++
		g.gen = c.lastGen
		g.assign = nil
	}
}

func (c *Coordinator) index(g *group) {
	c.groups[g.key] = g
	if c.byTopic[g.key.topic] == nil {
		c.byTopic[g.key.topic] = make(map[string]*group)
	}
	c.byTopic[g.key.topic][g.key.name] = g
	if g.owner == "" {
		return
	}
	if c.byOwner[g.owner] == nil {
		c.byOwner[g.owner] = make(map[groupKey]*group)
	}
	c.byOwner[g.owner][g.key] = g
}

// forget removes g and its index entries (a no-op for a group never stored).
func (c *Coordinator) forget(g *group) {
	if c.groups[g.key] != g {
		return
	}
	delete(c.groups, g.key)
	deleteFrom(c.byTopic, g.key.topic, g.key.name)
	if g.owner != "" {
		deleteFrom(c.byOwner, g.owner, g.key)
	}
}

// deleteFrom deletes inner from m[outer], and m[outer] once it is empty.
func deleteFrom[O, I comparable](m map[O]map[I]*group, outer O, inner I) {
	delete(m[outer], inner)
	if len(m[outer]) == 0 {
		delete(m, outer)
	}
}

// answer returns member's share under the current generation, or the plan
// to compute it when the generation's assignment is not cached.
//
// Answering from the cached assignment hands member its ranges that no
// other live member holds, and releases the ones it held that are no
// longer its own: it polled again, so it is done with them.
func (c *Coordinator) answer(k groupKey, g *group, member string) (Assignment, *Plan) {
	if g.assign == nil {
		return Assignment{}, c.plan(k, g)
	}
	return Assignment{Generation: g.gen, Ranges: g.tell(member, g.assign[member])}, nil
}

// plan copies what computing g's assignment needs.
func (c *Coordinator) plan(k groupKey, g *group) *Plan {
	return &Plan{
		Topic: k.topic, Group: k.name, Generation: g.gen,
		Ranges: slices.Clone(g.ranges), Members: slices.Sorted(maps.Keys(g.members)),
	}
}

// tell answers member, which polled, with mine, its share: it is done with
// everything it held, and now holds the ranges of mine that no other live
// member holds, which it returns.
func (g *group) tell(member string, mine []uint64) []uint64 {
	g.release(member)
	var out []uint64
	for _, r := range mine {
		if !g.heldByOther(r, member) {
			g.held[r] = []string{member}
			out = append(out, r)
		}
	}
	return out
}

// heldByOther reports whether a live member other than member holds r.
func (g *group) heldByOther(r uint64, member string) bool {
	for _, h := range g.held[r] {
		if _, live := g.members[h]; live && h != member {
			return true
		}
	}
	return false
}

// release drops every hold of member: it polled again, left or was
// evicted.
func (g *group) release(member string) {
	for r, hs := range g.held {
		if i := slices.Index(hs, member); i >= 0 {
			if hs = slices.Delete(hs, i, i+1); len(hs) == 0 {
				delete(g.held, r)
			} else {
				g.held[r] = hs
			}
		}
	}
}

// adoptRanges makes norm (ascending, unique) the group's range set. The
// holds of ranges that went away pass to the ranges that appeared (see
// Handoff): a new range is held by every live holder of a gone one.
func (g *group) adoptRanges(norm []uint64) {
	var heirs []string
	for r, hs := range g.held {
		if _, found := slices.BinarySearch(norm, r); !found {
			for _, h := range hs {
				if _, live := g.members[h]; live {
					heirs = append(heirs, h)
				}
			}
			delete(g.held, r)
		}
	}
	if len(heirs) > 0 {
		slices.Sort(heirs)
		heirs = slices.Compact(heirs)
		for _, r := range norm {
			if _, found := slices.BinarySearch(g.ranges, r); !found {
				hs := append(g.held[r], heirs...)
				slices.Sort(hs)
				g.held[r] = slices.Compact(hs)
			}
		}
	}
	g.ranges = norm
}

// settlePlan computes and installs a plan in line and answers member from
// it, for callers that hold no lock over the Coordinator.
func (c *Coordinator) settlePlan(a Assignment, plan *Plan, member string, err error) (Assignment, error) {
	if err != nil || plan == nil {
		return a, err
	}
	assign := plan.Compute()
	c.Install(plan, assign)
	return c.Answer(plan, member, assign), nil
}

// normalize returns ranges sorted and without duplicates, as a new slice.
func normalize(ranges []uint64) []uint64 {
	out := slices.Clone(ranges)
	slices.Sort(out)
	return slices.Compact(out)
}

func validName(s string) bool { return s != "" && len(s) <= MaxNameLen }
