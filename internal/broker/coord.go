package broker

import (
	"errors"
	"sync"

	"github.com/malachi-log/malachi/internal/groups"
)

// coordinator is the node's consumer-group coordinator behind its own
// lock, so that group work never waits on, or holds up, the write heads
// and watches under Broker.mu. The lock covers only membership
// bookkeeping; an assignment, O(members × ranges), is computed with no
// lock held (see assign).
type coordinator struct {
	mu       sync.Mutex
	c        *groups.Coordinator
	inflight map[coordKey]*assignCall // assignments being computed

	// beforeAssign, when set (tests), runs where an assignment is
	// computed, so a test can check which locks are held there.
	beforeAssign func(*groups.Plan)
}

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
// ranges (never nil) with the generation they belong to.
func (b *Broker) memberAssignment(topicID uint64, group, member, owner string, ranges []uint64) (groups.Assignment, error) {
	co := b.coord
	co.mu.Lock()
	a, plan, err := co.c.Join(topicID, group, member, owner, ranges, b.nowMs())
	if err != nil || plan == nil {
		co.mu.Unlock()
		return nonNilRanges(a), b.groupError(err)
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
	a = co.c.Answer(plan, member, call.assign)
	co.mu.Unlock()
	return nonNilRanges(a), nil
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
	b.coord.mu.Lock()
	defer b.coord.mu.Unlock()
	b.coord.c.Leave(topicID, group, member, b.nowMs())
	return nil
}

// expireMembers evicts silent members; groups left empty are forgotten
// (their committed positions stay in the metadata).
func (b *Broker) expireMembers() {
	b.coord.mu.Lock()
	defer b.coord.mu.Unlock()
	b.coord.c.Expire(b.nowMs())
}

// liveGroups names the groups of a topic with members.
func (b *Broker) liveGroups(topicID uint64) []string {
	b.coord.mu.Lock()
	defer b.coord.mu.Unlock()
	return b.coord.c.Groups(topicID)
}
