package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/groups"
)

// coordinator is the node's consumer-group coordinator behind its own
// lock, so that group work never waits on, or holds up, the write heads
// and watches under Broker.mu. The lock covers only membership
// bookkeeping; an assignment, O(members × ranges), is computed with no
// lock held (see assign).
//
// On a single node it coordinates every topic. In a cluster it
// coordinates the topics of the vnodes the node leads (cluster_groups.go):
// one groups.Coordinator for all of them, so the node's group limits hold
// whatever number of vnodes it leads, and a vnode's groups are dropped
// when the node's leadership of it ends.
type coordinator struct {
	mu       sync.Mutex
	c        *groups.Coordinator
	inflight map[coordKey]*assignCall // assignments being computed

	// beforeAssign, when set (tests), runs where an assignment is
	// computed, so a test can check which locks are held there.
	beforeAssign func(*groups.Plan)

	// lastGen is the highest generation of c seen yet; c's own counter
	// is at or above it.
	lastGen uint64
	// vnodes, in a cluster, is this node's leadership of each vnode it
	// leads or led, and the topics it coordinates under it.
	vnodes map[uint64]*vnodeLead
	// genLimit bounds the generations one leadership hands out (see
	// genSpace): 1 << genTermShift, lower in tests.
	genLimit uint64
}

// genSpace maps the coordinator's generations to the ones members see.
// On a single node they are the same. In a cluster a member sees
// base + (gen - start): base is the raft term of the leadership shifted
// by genTermShift and start the coordinator's last generation when the
// leadership began, so every generation of a leadership lies in
// [term << genTermShift, (term+1) << genTermShift) and is below every
// generation of a later one. limit (0: none) bounds gen - start, so a
// generation never runs into the next term's; past it the leadership
// refuses (errGenerationsExhausted) rather than repeat or overlap.
type genSpace struct {
	base, start, limit uint64
}

// errGenerationsExhausted: the leadership of the topic's vnode has handed
// out every generation it may (2^32); its groups answer again under the
// next leadership.
var errGenerationsExhausted = fmt.Errorf("%w: the coordinator of the topic's consumer groups has no generation left under this leadership", ErrMetadataUnavailable)

// inner is the coordinator's generation for one a member shows, and
// whether it belongs to this space at all.
func (sp genSpace) inner(shown uint64) (uint64, bool) {
	if shown < sp.base {
		return 0, false
	}
	low := shown - sp.base
	if sp.limit > 0 && low >= sp.limit {
		return 0, false
	}
	return low + sp.start, true
}

// leadCheck runs under co.mu at the start of every operation on a topic's
// groups and answers the generation space to answer in. On a single node
// it is singleNode; in a cluster it checks that the node still leads the
// topic's vnode (errNotCoordinator if not), in the same hold of the lock
// as the operation, so no operation runs on a leadership that has ended.
type leadCheck func(topicID uint64, now int64) (genSpace, error)

func singleNode(uint64, int64) (genSpace, error) { return genSpace{}, nil }

type coordKey struct {
	topic uint64
	group string
}

// assignCall is one computation of a group's assignment for a generation;
// members of the group that poll meanwhile wait for it rather than compute
// the same answer again.
type assignCall struct {
	gen    uint64
	done   chan struct{} // closed once assign is set
	assign map[string][]uint64
}

func newCoordinator(cfg Config) *coordinator {
	return &coordinator{
		c: groups.NewWithLimits(groups.Limits{
			SessionTimeoutMs:   cfg.GroupSessionTimeout.Milliseconds(),
			MaxMembersPerGroup: cfg.MaxMembersPerGroup,
			MaxGroups:          cfg.MaxGroups,
			MaxGroupsPerTopic:  cfg.Limits.MaxGroupsPerTopic,
			MaxGroupsPerOwner:  cfg.Limits.MaxGroupsPerUser,
		}),
		inflight: make(map[coordKey]*assignCall),
		genLimit: 1 << genTermShift,
	}
}

// groupOwner is whom a group a member of id creates is charged to:
// administrators, and the node's own calls, are not accounted.
func groupOwner(id Identity) string {
	if IsAdmin(id) {
		return ""
	}
	return id.User
}

// memberAssignment joins or heartbeats a group member and returns its
// ranges (never nil) with the generation they belong to. In a cluster the
// topic's coordinator answers (cluster_groups.go) from its own view of
// the topic's active ranges, and ranges is not used; it also answers the
// group's committed position for the member's ranges as it knows it
// (committed), which a lagging replica here may not have applied yet. On a
// single node committed is nil: the local view is the coordinator's.
func (b *Broker) memberAssignment(topicID uint64, group, member, owner string, ranges []uint64) (a groups.Assignment, committed []cursor.Entry, err error) {
	if b.cluster != nil {
		return b.clusterAssignment(topicID, group, member, owner)
	}
	a, err = b.coord.join(singleNode, topicID, group, member, owner, ranges, b.nowMs())
	return a, nil, b.groupError(err)
}

// join joins or heartbeats a member and answers its ranges (never nil),
// computing a new generation's assignment with no lock held.
func (co *coordinator) join(check leadCheck, topicID uint64, group, member, owner string, ranges []uint64, now int64) (groups.Assignment, error) {
	co.mu.Lock()
	sp, err := check(topicID, now)
	if err != nil {
		co.mu.Unlock()
		return nonNilRanges(groups.Assignment{}), err
	}
	a, plan, err := co.c.Join(topicID, group, member, owner, ranges, now)
	if err != nil || plan == nil {
		defer co.mu.Unlock()
		if err != nil {
			return nonNilRanges(groups.Assignment{}), err
		}
		return co.out(sp, a)
	}
	call, leader := co.startLocked(plan)
	co.mu.Unlock()
	if leader {
		co.assign(plan, call)
	}
	<-call.done
	// Answer as from a cached assignment: the member polled, so the ranges
	// it lost pass to their new owners (see groups' Handoff).
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.out(sp, co.c.Answer(plan, member, call.assign))
}

// out shows an assignment's generation as members see it.
//
// REQUIRES: co.mu held.
func (co *coordinator) out(sp genSpace, a groups.Assignment) (groups.Assignment, error) {
	gen, err := co.show(sp, a.Generation)
	if err != nil {
		return nonNilRanges(groups.Assignment{}), err
	}
	a.Generation = gen
	return nonNilRanges(a), nil
}

// show is the generation members see for the coordinator's gen under
// sp; 0 (no group) stays 0.
//
// REQUIRES: co.mu held.
func (co *coordinator) show(sp genSpace, gen uint64) (uint64, error) {
	if gen == 0 {
		return 0, nil
	}
	co.lastGen = max(co.lastGen, gen)
	low := gen - sp.start
	if sp.limit > 0 && (gen <= sp.start || low >= sp.limit) {
		return 0, errGenerationsExhausted
	}
	return sp.base + low, nil
}

// startLocked returns the computation of plan's assignment to wait for,
// and whether the caller is to run it.
//
// REQUIRES: co.mu held.
func (co *coordinator) startLocked(plan *groups.Plan) (*assignCall, bool) {
	k := coordKey{plan.Topic, plan.Group}
	if call := co.inflight[k]; call != nil && call.gen == plan.Generation {
		return call, false
	}
	call := &assignCall{gen: plan.Generation, done: make(chan struct{})}
	co.inflight[k] = call
	return call, true
}

// assign computes plan with no lock held, installs the result if the
// group is still at its generation, and releases the waiters.
func (co *coordinator) assign(plan *groups.Plan, call *assignCall) {
	if co.beforeAssign != nil {
		co.beforeAssign(plan)
	}
	call.assign = plan.Compute()
	co.mu.Lock()
	co.c.Install(plan, call.assign)
	if k := (coordKey{plan.Topic, plan.Group}); co.inflight[k] == call {
		delete(co.inflight, k)
	}
	co.mu.Unlock()
	close(call.done)
}

// groupError maps the coordinator's refusals to the broker's: a full group
// or node table stays too_many_members (retriable: members come and go);
// the per-topic and per-user limits are quotas.
func (b *Broker) groupError(err error) error {
	switch {
	case errors.Is(err, groups.ErrTooManyMembers) || errors.Is(err, groups.ErrTooManyGroups):
		return ErrTooManyMembers
	case errors.Is(err, groups.ErrTopicGroupLimit):
		return quotaError("the topic has %d consumer groups with live members", b.cfg.Limits.MaxGroupsPerTopic)
	case errors.Is(err, groups.ErrOwnerGroupLimit):
		return quotaError("the user's members created %d consumer groups", b.cfg.Limits.MaxGroupsPerUser)
	}
	return err
}

func nonNilRanges(a groups.Assignment) groups.Assignment {
	if a.Ranges == nil {
		a.Ranges = []uint64{}
	}
	return a
}

// LeaveGroup removes a member so its ranges move to the others now rather
// than after their session timeout.
func (b *Broker) LeaveGroup(topic, group, member string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	if b.cluster != nil {
		return b.clusterLeave(topicID, group, member)
	}
	_, err = b.coord.leave(singleNode, topicID, group, member, b.nowMs())
	return err
}

func (co *coordinator) leave(check leadCheck, topicID uint64, group, member string, now int64) (bool, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	if _, err := check(topicID, now); err != nil {
		return false, err
	}
	return co.c.Leave(topicID, group, member, now), nil
}

// touch records a member alive without a new assignment (MemberHeartbeat).
func (co *coordinator) touch(check leadCheck, topicID uint64, group, member string, now int64) (MemberState, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	sp, err := check(topicID, now)
	if err != nil {
		return MemberState{}, err
	}
	st, err := co.c.Touch(topicID, group, member, now)
	if errors.Is(err, groups.ErrUnknownMember) {
		return MemberState{}, ErrStaleMember
	}
	if err != nil {
		return MemberState{}, err
	}
	st.Generation, err = co.show(sp, st.Generation)
	return st, err
}

// commitRanges checks a member's commit under generation and returns the
// ranges it may advance (see groups.Coordinator.CommitRanges). A
// generation outside the leadership's space was handed out under another
// leadership (or never) and is stale here.
func (co *coordinator) commitRanges(check leadCheck, topicID uint64, group, member string, generation uint64, now int64) ([]uint64, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	sp, err := check(topicID, now)
	if err != nil {
		return nil, err
	}
	gen, ok := sp.inner(generation)
	if !ok {
		return nil, ErrStaleMember
	}
	ranges, err := co.c.CommitRanges(topicID, group, member, gen, now)
	if errors.Is(err, groups.ErrStaleMember) {
		return nil, ErrStaleMember
	}
	return ranges, err
}

// members reports a group's generation, whether it has members, and its
// members.
func (co *coordinator) members(check leadCheck, topicID uint64, group string, now int64) (uint64, bool, []GroupMember, error) {
	// Members may compute a stale assignment in line under the lock; an
	// operator's describe is rare, unlike the polls that assign avoids
	// holding it for.
	co.mu.Lock()
	defer co.mu.Unlock()
	sp, err := check(topicID, now)
	if err != nil {
		return 0, false, nil, err
	}
	gen, live := co.c.Generation(topicID, group)
	var out []GroupMember
	for _, m := range co.c.Members(topicID, group) {
		out = append(out, GroupMember{Name: m.Name, LastSeen: m.LastSeen, Ranges: m.Ranges})
	}
	shown, err := co.show(sp, gen)
	return shown, live, out, err
}

// live names the groups of a topic with members, on a single node.
func (co *coordinator) live(topicID uint64) []string {
	names, _ := co.liveAt(singleNode, topicID, 0)
	return names
}

func (co *coordinator) liveAt(check leadCheck, topicID uint64, now int64) ([]string, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	if _, err := check(topicID, now); err != nil {
		return nil, err
	}
	return co.c.Groups(topicID), nil
}

func (co *coordinator) expire(now int64) {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.c.Expire(now)
}

// expireMembers evicts silent members; groups left empty are forgotten
// (their committed positions stay in the metadata).
func (b *Broker) expireMembers() {
	if b.cluster != nil {
		b.expireClusterMembers()
		return
	}
	b.coord.expire(b.nowMs())
}

// liveGroups names the groups of a topic with members.
func (b *Broker) liveGroups(ctx context.Context, topicID uint64) ([]string, error) {
	if b.cluster != nil {
		return b.clusterLiveGroups(ctx, topicID)
	}
	return b.coord.live(topicID), nil
}
