package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/groups"
	"github.com/malachi-log/malachi/internal/metadata"
)

// Consumer-group membership in a cluster (docs/architecture.md, "Running
// as a cluster"). The coordinator of a topic's groups is the leader of
// the topic's vnode: every member operation, through whichever node, is
// answered there, so one coordinator sees every member of a group.
//
//   - The node's one coordinator (Broker.coord) serves the topics of every
//     vnode it leads, so the node's group limits (MaxGroups, per topic,
//     per user) hold as on a single node whatever number of vnodes it
//     leads. It records, per vnode, the term it leads in (vnodeLead).
//     Each operation checks, under the coordinator's lock, that the node
//     still leads the topic's vnode in that term; when the term changes
//     or the node no longer leads, the vnode's groups are dropped, and
//     members join the new leader's coordinator on their next poll. A
//     leadership is never replaced by one of a lower term.
//   - Leadership is read from what the raft host publishes each cycle
//     (control.Node.LeaderOf), never under the host's lock, so a raft log
//     stalled in fsync does not hold group requests.
//   - Generations are the term shifted by genTermShift plus the number of
//     generations handed out since the leadership began (genSpace), so a
//     generation handed out under one leadership is below every
//     generation of a later one: a member's commit carrying it is refused
//     (stale_member), never accepted by coincidence. A leadership that
//     has handed out 2^32 refuses rather than overlap the next term's.
//   - Other nodes forward the operation as a dataplane.Group call, at
//     most groupCallsPerNode at once to one node, so group calls never
//     take the data path's handler slots from produces. A node that is
//     not (or no longer) the leader refuses it StatusNotHere with the
//     leader it knows; the forwarding node resolves the leader again and
//     retries until the request's time runs out, then answers
//     metadata_unavailable. Names no coordinator could accept are
//     answered by the forwarding node as the coordinator would, and a
//     message the coordinator cannot decode is refused, not retried.
//   - A join's answer carries the group's committed position for the
//     member's ranges as the coordinator (the vnode's leader) knows it:
//     a range handed over is released only after its previous holder's
//     commit applied there, while this node's replica may lag.
//
// Membership is soft state, as on a single node: a coordinator that
// restarts or moves forgets it, and members join again. A leader cut off
// from the others keeps answering as coordinator until raft's
// CheckQuorum makes it step down (an election timeout), while a new
// leader may already coordinate the same groups: for that moment two
// coordinators may hand out the same range (duplicate deliveries, which
// at-least-once allows; a commit under the other leadership's generation
// is still refused). Closing that window needs a leader lease.

// genTermShift places the term above the coordinator's own generations:
// 2^32 generations per leadership, and terms below 2^21 keep generations
// below 2^53, exact in a JSON number.
const genTermShift = 32

// groupRetryDelay is how long a forwarding node waits before resolving the
// coordinator again after a refusal or an unreachable leader: about an
// election's pace, short against the request's time.
const groupRetryDelay = 50 * time.Millisecond

// errNotCoordinator: this node does not lead the topic's vnode (any
// more). Never answered to a client: the forwarding node retries.
var errNotCoordinator = errors.New("broker: not the coordinator of the topic's groups")

// groupCallsPerNode bounds the group calls this node has in flight to
// one other node: a quarter of the handlers a node runs for one source
// (peer.Config.MaxHandlersPerNode, 64), so members' polls (a join may
// wait on a barrier) never take the handler slots forwarded produces
// need. A call past it is refused too_many_requests (retriable), as is
// one the other node refuses busy.
const groupCallsPerNode = 16

// coordTable bounds the consumer-group calls this node forwards. The
// zero value is ready to use.
type coordTable struct {
	mu      sync.Mutex
	pending map[uint64]int // group calls in flight, by destination node
	refused uint64         // calls refused at the bound, ever
}

// acquire takes one of node's group call slots, if one is free.
func (t *coordTable) acquire(node uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[node] >= groupCallsPerNode {
		t.refused++
		return false
	}
	if t.pending == nil {
		t.pending = make(map[uint64]int)
	}
	t.pending[node]++
	return true
}

func (t *coordTable) release(node uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[node]--; t.pending[node] <= 0 {
		delete(t.pending, node)
	}
}

// vnodeLead is this node's leadership of one vnode, as its coordinator
// knows it.
type vnodeLead struct {
	term    uint64 // the latest term this node has seen of the vnode
	leading bool   // it leads the vnode in term
	start   uint64 // the coordinator's last generation when it began
	// topics are those whose groups the coordinator may hold under this
	// leadership: dropped with it.
	topics map[uint64]struct{}
}

// lead checks that this node leads vnode in term (leads says whether the
// raft host names it the leader) and answers the leadership's generation
// space, recording topicID as coordinated under it. A term above the one
// recorded begins a new leadership: the vnode's groups of the earlier one
// are dropped. A term below it is an out-of-date reading and never
// replaces the newer leadership. errNotCoordinator when the node does not
// lead the vnode; the vnode's groups are dropped then too.
//
// REQUIRES: co.mu held.
func (co *coordinator) lead(vnode, topicID uint64, leads bool, term uint64, now int64) (genSpace, error) {
	if co.vnodes == nil {
		co.vnodes = make(map[uint64]*vnodeLead)
	}
	l := co.vnodes[vnode]
	switch {
	case l != nil && term < l.term:
		return genSpace{}, fmt.Errorf("%w: a reading of term %d after term %d", errNotCoordinator, term, l.term)
	case !leads:
		co.drop(l, term, now)
		return genSpace{}, errNotCoordinator
	case l == nil || term > l.term:
		co.drop(l, term, now)
		l = &vnodeLead{term: term, leading: true, start: co.lastGen, topics: make(map[uint64]struct{})}
		co.vnodes[vnode] = l
	case !l.leading:
		// Raft elects no leader twice in one term, so this node, which
		// stopped leading in this term, cannot lead in it again; a new
		// start would repeat the term's generations.
		return genSpace{}, errNotCoordinator
	}
	l.topics[topicID] = struct{}{}
	return genSpace{base: term << genTermShift, start: l.start, limit: co.genLimit}, nil
}

// drop ends leadership l (nil: none recorded) as of term: every group of
// its topics is forgotten, its members removed as by a leave.
//
// REQUIRES: co.mu held.
func (co *coordinator) drop(l *vnodeLead, term uint64, now int64) {
	if l == nil {
		return
	}
	for topic := range l.topics {
		for _, name := range co.c.Groups(topic) {
			for _, m := range co.c.Members(topic, name) {
				co.c.Leave(topic, name, m.Name, now)
				// Each leave but the last is a new generation: count it,
				// so the next leadership starts above it.
				gen, _ := co.c.Generation(topic, name)
				co.lastGen = max(co.lastGen, gen)
			}
		}
	}
	clear(l.topics)
	l.term, l.leading = max(l.term, term), false
}

// leadsCheck is the leadCheck of a cluster node: the operation runs only
// while this node leads the topic's vnode.
//
// REQUIRES: b.coord.mu held.
func (b *Broker) leadsCheck(topicID uint64, now int64) (genSpace, error) {
	c := b.cluster
	vnode := control.GroupOfID(topicID)
	leader, term, err := c.ctl.LeaderOf(vnode)
	if err != nil {
		return genSpace{}, fmt.Errorf("%w: %v", errNotCoordinator, err)
	}
	return b.coord.lead(vnode, topicID, leader == c.cfg.NodeID, term, now)
}

// expireClusterMembers evicts silent members of the vnodes this node
// leads, and drops the groups of leaderships it lost.
func (b *Broker) expireClusterMembers() {
	c, co, now := b.cluster, b.coord, b.nowMs()
	co.mu.Lock()
	defer co.mu.Unlock()
	for vnode, l := range co.vnodes {
		if !l.leading {
			continue
		}
		leader, term, err := c.ctl.LeaderOf(vnode)
		if err == nil && term < l.term {
			continue // an out-of-date reading never ends a newer leadership
		}
		if err != nil || leader != c.cfg.NodeID || term > l.term {
			co.drop(l, term, now)
		}
	}
	co.c.Expire(now)
	for _, l := range co.vnodes {
		for topic := range l.topics {
			if len(co.c.Groups(topic)) == 0 {
				delete(l.topics, topic)
			}
		}
	}
}

// serveGroup answers another node's group operation for a topic whose
// vnode this node leads. A message it cannot decode is refused
// malformed_request: sending it again cannot help, so the caller must
// not take it for an unreachable coordinator.
func (d *dataPlane) serveGroup(ctx context.Context, req []byte) ([]byte, error) {
	m, err := dataplane.DecodeGroup(req)
	if err != nil {
		r := &dataplane.Refusal{Status: dataplane.StatusRefused, Reason: reasonMalformed.Error(),
			Message: fmt.Sprintf("node-%d: %v", d.self, err)}
		return r.Encode(), nil
	}
	ans, err := d.b.groupOn(ctx, m)
	if errors.Is(err, errNotCoordinator) {
		leader, _, _ := d.b.cluster.ctl.LeaderOf(control.GroupOfID(m.Topic))
		r := &dataplane.Refusal{Status: dataplane.StatusNotHere, Node: leader, Reason: ErrRetry.Error(),
			Message: fmt.Sprintf("node-%d does not lead the vnode of topic %d", d.self, m.Topic)}
		return r.Encode(), nil
	}
	if err != nil {
		r := &dataplane.Refusal{Status: dataplane.StatusRefused, Reason: groupReason(err), Message: err.Error()}
		return r.Encode(), nil
	}
	return ans.Encode(), nil
}

// reasonMalformed is the wire reason of a request that does not decode.
var reasonMalformed = metadata.Error("malformed_request")

// groupOn runs a group operation at this node's coordinator;
// errNotCoordinator when the node does not lead the topic's vnode.
func (b *Broker) groupOn(ctx context.Context, m dataplane.Group) (*dataplane.GroupAnswer, error) {
	if ans, known, err := nameAnswer(m); known {
		return ans, err
	}
	co, check, now := b.coord, b.leadsCheck, b.nowMs()
	ans := &dataplane.GroupAnswer{}
	switch m.Op {
	case dataplane.GroupJoin:
		ranges, err := b.activeRanges(ctx, m.Topic)
		if err != nil {
			return nil, err
		}
		a, err := co.join(check, m.Topic, m.Group, m.Member, m.Owner, ranges, now)
		if err != nil {
			return nil, b.groupError(err)
		}
		ans.Generation, ans.Ranges = a.Generation, a.Ranges
		ans.Committed = b.committedFor(m.Topic, m.Group, a.Ranges)
	case dataplane.GroupTouch:
		st, err := co.touch(check, m.Topic, m.Group, m.Member, now)
		if err != nil {
			return nil, err
		}
		ans.Generation, ans.Held, ans.Count = st.Generation, uint64(st.Ranges), uint64(st.Members)
	case dataplane.GroupCommit:
		ranges, err := co.commitRanges(check, m.Topic, m.Group, m.Member, m.Generation, now)
		if err != nil {
			return nil, err
		}
		ans.Ranges = ranges
	case dataplane.GroupLeave:
		live, err := co.leave(check, m.Topic, m.Group, m.Member, now)
		if err != nil {
			return nil, err
		}
		ans.Live = live
	case dataplane.GroupMembers:
		gen, live, members, err := co.members(check, m.Topic, m.Group, now)
		if err != nil {
			return nil, err
		}
		ans.Generation, ans.Live = gen, live
		for _, x := range members {
			ans.Members = append(ans.Members, dataplane.GroupMember{Name: x.Name, LastSeen: x.LastSeen, Ranges: x.Ranges})
		}
	case dataplane.GroupLive:
		names, err := co.liveAt(check, m.Topic, now)
		if err != nil {
			return nil, err
		}
		ans.Groups = names
	default:
		return nil, fmt.Errorf("broker: group operation %v", m.Op)
	}
	return ans, nil
}

// nameAnswer answers an operation whose group or member name no
// coordinator accepts (empty, or over groups.MaxNameLen bytes) as every
// coordinator would, without asking one: no such group or member can
// exist. A join is refused the name; the others find nothing. known is
// false for an operation with valid names.
func nameAnswer(m dataplane.Group) (ans *dataplane.GroupAnswer, known bool, err error) {
	if m.Op == dataplane.GroupLive || (validGroupName(m.Group) && (validGroupName(m.Member) || m.Op == dataplane.GroupMembers)) {
		return nil, false, nil
	}
	switch m.Op {
	case dataplane.GroupJoin:
		return nil, true, groups.ErrInvalidName
	case dataplane.GroupTouch, dataplane.GroupCommit:
		return nil, true, ErrStaleMember
	}
	return &dataplane.GroupAnswer{}, true, nil // a leave of no member, a group with none
}

func validGroupName(s string) bool { return s != "" && len(s) <= groups.MaxNameLen }

// committedFor is the group's committed position for ranges (and their
// ancestors' entries for the ranges' slices) in this node's view.
func (b *Broker) committedFor(topicID uint64, group string, ranges []uint64) []dataplane.GroupEntry {
	var stored []metadata.GroupEntry
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { stored = st.GroupEntries(group, topicID) })
	entries := b.memberEntries(topicID, ranges, toCursorEntries(stored))
	out := make([]dataplane.GroupEntry, len(entries))
	for i, e := range entries {
		out[i] = dataplane.GroupEntry{Source: e.Source, SliceStart: e.SliceStart, SliceBits: e.SliceBits, Offset: e.Offset}
	}
	return out
}

func fromGroupEntries(g []dataplane.GroupEntry) []cursor.Entry {
	out := make([]cursor.Entry, len(g))
	for i, e := range g {
		out[i] = cursor.Entry{Source: e.Source, SliceStart: e.SliceStart, SliceBits: e.SliceBits, Offset: e.Offset}
	}
	return out
}

// activeRanges is the topic's active ranges as this node, the vnode's
// leader, knows them: every member's assignment is computed from the
// leader's view, never from a lagging replica's. A leader elected a
// moment ago may not have applied the topic's creation yet, so a topic it
// does not know is looked up again after a barrier.
func (b *Broker) activeRanges(ctx context.Context, topicID uint64) ([]uint64, error) {
	ranges, found := b.activeView(topicID)
	if !found {
		if err := b.plane.Barrier(ctx, control.GroupOfID(topicID)); err != nil {
			return nil, metaError(err)
		}
		ranges, found = b.activeView(topicID)
	}
	if !found {
		return nil, metadata.ErrNoSuchTopic
	}
	return ranges, nil
}

func (b *Broker) activeView(topicID uint64) (ranges []uint64, found bool) {
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) {
		if _, found = st.TopicHeaderByID(topicID); found {
			ranges = activeIDs(st, topicID)
		}
	})
	return ranges, found
}

// groupAt runs a group operation at the coordinator of the topic's
// groups, here or forwarded, resolving the coordinator again after a
// refusal or an unreachable leader until ctx or MetadataTimeout ends.
func (b *Broker) groupAt(ctx context.Context, m dataplane.Group) (*dataplane.GroupAnswer, error) {
	if ans, known, err := nameAnswer(m); known {
		return ans, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
	defer cancel()
	vnode := control.GroupOfID(m.Topic)
	var last error
	for {
		ans, err := b.groupOnce(ctx, vnode, m)
		if err == nil || !retryAtCoordinator(err) {
			return ans, err
		}
		last = err
		t := b.cfg.Clock.NewTimer(groupRetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: no coordinator of topic %d's consumer groups answered in time: %v",
				ErrMetadataUnavailable, m.Topic, last)
		case <-t.C():
		}
	}
}

// groupOnce asks the leader this node knows of the topic's vnode once.
func (b *Broker) groupOnce(ctx context.Context, vnode uint64, m dataplane.Group) (*dataplane.GroupAnswer, error) {
	c := b.cluster
	leader, _, err := c.ctl.LeaderOf(vnode)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", errNotCoordinator, err)
	case leader == c.cfg.NodeID:
		return b.groupOn(ctx, m)
	case leader == 0:
		return nil, fmt.Errorf("%w: no leader of the topic's vnode known yet", errNotCoordinator)
	}
	return b.groupCall(ctx, leader, m)
}

// groupCall forwards a group operation to node, within the node's share
// of group calls (groupCallsPerNode).
func (b *Broker) groupCall(ctx context.Context, node uint64, m dataplane.Group) (*dataplane.GroupAnswer, error) {
	if !m.NamesFit() {
		return nil, fmt.Errorf("%w: a name of a consumer-group call exceeds %d bytes", reasonMalformed, dataplane.MaxNameBytes)
	}
	t := &b.cluster.coords
	if !t.acquire(node) {
		return nil, fmt.Errorf("%w: %d consumer-group calls to node-%d already in flight", ErrTooManyRequests, groupCallsPerNode, node)
	}
	defer t.release(node)
	resp, err := b.data.call(untraced(ctx), node, m.Encode())
	if err != nil {
		return nil, err
	}
	ans, err := dataplane.DecodeGroupAnswer(resp)
	var r *dataplane.Refusal
	if errors.As(err, &r) {
		return nil, groupRemoteError(node, r)
	}
	return &ans, err
}

// retryAtCoordinator reports whether a failed group operation may succeed
// at the coordinator found again: leadership moved, the leader is down or
// stopping, or none is known yet.
func retryAtCoordinator(err error) bool {
	return errors.Is(err, errNotCoordinator) || errors.Is(err, ErrUnreachable) || errors.Is(err, ErrShuttingDown)
}

// groupReasons are the answers of a coordinator that a client must see
// exactly as on a single node: the client server matches some of them by
// their text.
var groupReasons = []error{ErrStaleMember, ErrGroupNotFound, ErrTooManyMembers, ErrGroupHasMembers}

// groupReason is the reason a coordinator's refusal carries.
func groupReason(err error) string {
	for _, known := range groupReasons {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	return reasonOf(err)
}

// groupRemoteError turns a coordinator's refusal into the error the
// operation would have met there.
func groupRemoteError(node uint64, r *dataplane.Refusal) error {
	if r.Status == dataplane.StatusNotHere {
		return fmt.Errorf("%w: %s", errNotCoordinator, r.Message)
	}
	for _, known := range groupReasons {
		if r.Reason == known.Error() {
			return known
		}
	}
	return remoteError(node, r)
}

// clusterAssignment joins or polls a member at the coordinator. This and
// the other operations whose callers have no context of their own (a
// fetch's join, a heartbeat, a leave, a describe) run on the node's life,
// bounded by MetadataTimeout in groupAt.
func (b *Broker) clusterAssignment(topicID uint64, group, member, owner string) (groups.Assignment, []cursor.Entry, error) {
	ans, err := b.groupAt(b.life, dataplane.Group{Op: dataplane.GroupJoin, Topic: topicID, Group: group, Member: member, Owner: owner})
	if err != nil {
		return groups.Assignment{Ranges: []uint64{}}, nil, err
	}
	return nonNilRanges(groups.Assignment{Generation: ans.Generation, Ranges: ans.Ranges}), fromGroupEntries(ans.Committed), nil
}

func (b *Broker) clusterTouch(topicID uint64, group, member string) (MemberState, error) {
	ans, err := b.groupAt(b.life, dataplane.Group{Op: dataplane.GroupTouch, Topic: topicID, Group: group, Member: member})
	if err != nil {
		return MemberState{}, err
	}
	return MemberState{Generation: ans.Generation, Ranges: int(ans.Held), Members: int(ans.Count)}, nil
}

func (b *Broker) clusterCommitRanges(ctx context.Context, topicID uint64, group, member string, generation uint64) ([]uint64, error) {
	ans, err := b.groupAt(ctx, dataplane.Group{Op: dataplane.GroupCommit, Topic: topicID, Group: group, Member: member, Generation: generation})
	if err != nil {
		return nil, err
	}
	return ans.Ranges, nil
}

func (b *Broker) clusterLeave(topicID uint64, group, member string) error {
	_, err := b.groupAt(b.life, dataplane.Group{Op: dataplane.GroupLeave, Topic: topicID, Group: group, Member: member})
	return err
}

func (b *Broker) clusterMembers(topicID uint64, group string) (uint64, bool, []GroupMember, error) {
	ans, err := b.groupAt(b.life, dataplane.Group{Op: dataplane.GroupMembers, Topic: topicID, Group: group})
	if err != nil {
		return 0, false, nil, err
	}
	var out []GroupMember
	for _, x := range ans.Members {
		out = append(out, GroupMember{Name: x.Name, LastSeen: x.LastSeen, Ranges: x.Ranges})
	}
	return ans.Generation, ans.Live, out, nil
}

func (b *Broker) clusterLiveGroups(ctx context.Context, topicID uint64) ([]string, error) {
	ans, err := b.groupAt(ctx, dataplane.Group{Op: dataplane.GroupLive, Topic: topicID})
	if err != nil {
		return nil, err
	}
	return ans.Groups, nil
}
