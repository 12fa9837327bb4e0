package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/tracing"
	"github.com/malachi-log/malachi/internal/wire"
	"go.opentelemetry.io/otel/trace"
)

// handle runs one request that is neither produce nor subscribe, as the
// connection's identity when it starts.
func (c *conn) handle(req wire.Request) (wire.Response, error) {
	id := c.identity()
	switch r := req.(type) {
	case *wire.CreateTopicRequest:
		return c.createTopic(id, r.Topic, r.Bits, 1, 0, "")
	case *wire.CreateTopicExRequest:
		return c.createTopic(id, r.Topic, r.Bits, int(r.Ranges), int(r.Replicas), r.Policy)
	case *wire.FetchRequest:
		return c.fetch(id, r)
	case *wire.CommitRequest:
		return c.commit(id, r)
	case *wire.LeaveGroupRequest:
		return c.leave(id, r)
	case *wire.MemberHeartbeatRequest:
		return c.memberHeartbeat(id, r)
	case *wire.MemberCommitRequest:
		return c.memberCommit(id, r)
	case *wire.ListTopicsRequest:
		return c.listTopics(id)
	case *wire.DescribeTopicRequest:
		return c.describeTopic(id, r)
	case *wire.DescribeGroupRequest:
		return c.describeGroup(id, r)
	case *wire.ListGroupsRequest:
		return c.listGroups(id, r)
	case *wire.StatusRequest:
		return c.status(id)
	case *wire.EndCursorRequest:
		return c.endCursor(id, r)
	case *wire.CursorAtTimeRequest:
		return c.cursorAtTime(id, r)
	case *wire.CursorFromEndRequest:
		return c.cursorFromEnd(id, r)
	case *wire.GroupSeekRequest:
		return c.groupSeek(id, r)
	case *wire.GroupDeleteRequest:
		return c.groupDelete(id, r)
	case *wire.DescribeGroupMembersRequest:
		return c.describeGroupMembers(id, r)
	case *wire.APIVersionsRequest:
		return c.s.versions(), nil
	case *wire.TopicRoutesRequest:
		return c.topicRoutes(id, r)
	}
	if err := c.s.b.RequireAdmin(id, wire.KeyName(req.APIKey())); err != nil {
		return nil, err
	}
	return c.handleAdmin(id, req)
}

// handleAdmin runs the requests that need the admin permission; those
// that change something are audited.
func (c *conn) handleAdmin(id broker.Identity, req wire.Request) (wire.Response, error) {
	if resp, handled, err := c.policyAdmin(id, req); handled {
		return resp, err
	}
	switch r := req.(type) {
	case *wire.ListUsersRequest:
		var resp wire.ListUsersResponse
		for _, u := range c.s.b.ListUsers() {
			resp.Users = append(resp.Users, wire.UserEntry{User: u.User, Perms: u.Perms})
		}
		return &resp, nil
	case *wire.ListACLsRequest:
		var resp wire.ListACLsResponse
		for _, a := range c.s.b.ListACLs(deref(r.User)) {
			resp.ACLs = append(resp.ACLs, wire.ACLEntry{Operation: a.Operation, Resource: a.Resource})
		}
		return &resp, nil
	case *wire.ClusterStatusRequest:
		return clusterStatus(c.s.b.ClusterStatus(), r.WantsRepair()), nil
	case *wire.ClusterRebalanceRequest:
		if !r.Apply {
			p, err := c.s.b.Rebalance(c.reqCtx, false)
			if err != nil {
				return nil, err
			}
			return rebalancePlan(p), nil
		}
	}
	return c.adminChange(id, req)
}

// adminChange runs an admin request that changes users, grants or topics,
// and audits it with its outcome. Passwords are never part of the event.
func (c *conn) adminChange(id broker.Identity, req wire.Request) (wire.Response, error) {
	b, ctx := c.s.b, c.reqCtx
	var (
		resp   wire.Response
		err    error
		typ    string
		target string
		detail map[string]string
	)
	switch r := req.(type) {
	case *wire.CreateUserRequest:
		perms := make([]string, len(r.Perms))
		for i, p := range r.Perms {
			perms[i] = deref(p)
		}
		typ, target, detail = audit.UserCreated, deref(r.User), map[string]string{"perms": strings.Join(perms, ",")}
		err = b.CreateUser(ctx, target, deref(r.Password), perms)
	case *wire.DeleteUserRequest:
		typ, target = audit.UserDeleted, deref(r.User)
		err = b.DeleteUser(ctx, target)
	case *wire.ChangePasswordRequest:
		typ, target = audit.PasswordChanged, deref(r.User)
		err = b.ChangePassword(ctx, target, deref(r.NewPassword))
	case *wire.GrantACLRequest:
		typ, target, detail = audit.ACLGranted, deref(r.User), aclDetail(r.Operation, r.Pattern)
		err = b.GrantACL(ctx, target, deref(r.Operation), deref(r.Pattern))
	case *wire.RevokeACLRequest:
		typ, target, detail = audit.ACLRevoked, deref(r.User), aclDetail(r.Operation, r.Pattern)
		err = b.RevokeACL(ctx, target, deref(r.Operation), deref(r.Pattern))
	case *wire.DeleteTopicRequest:
		typ, target = audit.TopicDeleted, deref(r.Topic)
		err = b.DeleteTopic(ctx, target)
	case *wire.SplitRangeRequest:
		typ, target, detail = audit.RangeSplit, deref(r.Topic), map[string]string{"range": fmt.Sprint(r.Range)}
		var children []uint64
		children, err = b.SplitRange(ctx, target, r.Range)
		resp = &wire.SplitRangeResponse{Children: children}
	case *wire.MergeRangesRequest:
		typ, target, detail = audit.RangesMerged, deref(r.Topic), map[string]string{"ranges": fmt.Sprint(r.A, ",", r.B)}
		var child uint64
		child, err = b.MergeRanges(ctx, target, r.A, r.B)
		resp = &wire.MergeRangesResponse{Child: child}
	case *wire.ClusterRemoveRequest:
		typ, target = auditNodeRemoved, fmt.Sprint(r.Node)
		err = b.RemoveNode(ctx, r.Node)
	case *wire.ClusterRebalanceRequest:
		var p broker.RebalancePlan
		typ, target = auditRebalanced, "cluster"
		if p, err = b.Rebalance(ctx, true); err == nil {
			detail, resp = map[string]string{"moves": fmt.Sprint(p.Moves())}, rebalancePlan(p)
		}
	default:
		return nil, broker.ErrNotEnabled
	}
	c.audit(id, typ, target, detail, err)
	return resp, err
}

func aclDetail(op, pattern *string) map[string]string {
	return map[string]string{"operation": deref(op), "pattern": deref(pattern)}
}

// audit records an operation's outcome with the wire reason of a refusal.
func (c *conn) audit(id broker.Identity, typ, target string, detail map[string]string, err error) {
	r := ""
	if err != nil {
		r = reason(err)
	}
	c.s.b.Audit(id, typ, target, detail, r)
}

func (c *conn) createTopic(id broker.Identity, topic *string, bits uint8, ranges, replicas int, policy string) (wire.Response, error) {
	name := deref(topic)
	if err := c.s.b.Authorize(id, broker.OpProduce, name); err != nil {
		return nil, err
	}
	detail := map[string]string{"ranges": fmt.Sprint(max(ranges, 1))}
	var err error
	if policy == "" {
		err = c.s.b.CreateTopicReplicatedAs(c.reqCtx, id, name, bits, ranges, replicas)
	} else {
		// Creating a topic bound to a policy binds it, which is an
		// admin's decision like bind_topic_policy.
		if err := c.s.b.RequireAdmin(id, wire.KeyName(wire.KeyCreateTopicEx)); err != nil {
			return nil, err
		}
		detail["policy"] = policy
		err = c.s.b.CreateTopicWithPolicyAs(c.reqCtx, id, name, bits, ranges, replicas, policy)
	}
	c.audit(id, audit.TopicCreated, name, detail, err)
	return nil, err
}

// startConsumeSpan starts a fetch's span on the connection's context: it
// covers the reads, long poll included. The topic is recorded by
// endConsumeSpan, once the fetch has shown it names one.
func (c *conn) startConsumeSpan() (context.Context, trace.Span) {
	return c.s.b.Tracer().Begin(c.reqCtx, tracing.SpanConsume, trace.SpanKindServer)
}

// endConsumeSpan ends a fetch's span. A client that left while its fetch
// waited is no failure of the fetch: the span ends with an event, not an
// error.
func (c *conn) endConsumeSpan(span trace.Span, topic string, err error) {
	switch {
	case !span.IsRecording():
	case err == nil:
		span.SetAttributes(tracing.AttrTopic.String(topic))
	case c.reqCtx.Err() != nil && errors.Is(err, context.Canceled):
		span.AddEvent(tracing.EventClientGone)
		err = nil
	}
	tracing.End(span, err)
}

func (c *conn) fetch(id broker.Identity, r *wire.FetchRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	wait := min(time.Duration(r.WaitMs)*time.Millisecond, waitCap)
	ctx, span := c.startConsumeSpan()
	page, err := c.s.b.Fetch(ctx, broker.FetchRequest{
		Topic: topic, Cursor: r.Cursor, Group: r.Group, Member: r.Member,
		Max: clamp(r.Max, fetchMaxDefault, fetchMaxCap), Wait: wait, Identity: id,
	})
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrRecords.Int(len(page.Records)))
	}
	c.endConsumeSpan(span, topic, err)
	if err != nil && c.reqCtx.Err() == nil {
		return nil, err
	}
	// A long poll may have waited while its user was deleted or its grant
	// revoked: the records are handed over only if the identity still
	// stands now, as for a subscription's pushes.
	if len(page.Records) > 0 {
		if err := c.s.b.CheckIdentity(id); err != nil {
			return nil, err
		}
		if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
			return nil, err
		}
	}
	return &wire.FetchResponse{Records: toWireRecords(page.Records), NextCursor: page.Cursor}, nil
}

func (c *conn) commit(id broker.Identity, r *wire.CommitRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	if r.Cursor == nil {
		return nil, broker.ErrInvalidCursor
	}
	return nil, c.s.b.Commit(c.reqCtx, topic, deref(r.Group), *r.Cursor)
}

func (c *conn) leave(id broker.Identity, r *wire.LeaveGroupRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	return nil, c.s.b.LeaveGroup(topic, deref(r.Group), deref(r.Member))
}

// listTopics lists the topics; in strict ACL mode a non-admin sees only
// those it may produce to or consume from.
func (c *conn) listTopics(id broker.Identity) (wire.Response, error) {
	visible := c.s.b.TopicFilter(id)
	var resp wire.ListTopicsResponse
	for _, t := range c.s.b.ListTopics() {
		if visible != nil && !visible(t.Name) {
			continue
		}
		resp.Topics = append(resp.Topics, wire.TopicSummary{
			Name: t.Name, Bits: t.Bits, ActiveRanges: uint32(t.ActiveRanges), Ranges: uint32(t.Ranges),
			Segments: uint32(t.Segments), Records: t.Records, Bytes: t.Bytes,
		})
	}
	return &resp, nil
}

func (c *conn) describeTopic(id broker.Identity, r *wire.DescribeTopicRequest) (wire.Response, error) {
	if err := c.s.b.Authorize(id, broker.OpConsume, deref(r.Topic)); err != nil {
		return nil, err
	}
	if r.Paged() {
		return c.describeTopicPage(r)
	}
	// The whole topic in one answer (versions 1 and 2).
	room := int(c.s.cfg.MaxFrame) - frameSlack
	if err := c.wholeFits(deref(r.Topic), room); err != nil {
		return nil, err
	}
	describe := c.s.b.DescribeTopic
	if r.WantsCopies() {
		describe = c.s.b.DescribeTopicCopies
	}
	d, err := describe(deref(r.Topic))
	if err != nil {
		return nil, err
	}
	resp := &wire.DescribeTopicResponse{ID: d.ID, Name: d.Name, Bits: d.Bits, CreatedAt: ms(d.CreatedAt), Groups: d.Groups, Copies: r.WantsCopies()}
	resp.Ranges = make([]wire.RangeInfo, 0, len(d.Ranges))
	for i := range d.Ranges {
		resp.Ranges = append(resp.Ranges, rangeInfo(&d.Ranges[i]))
	}
	if wire.DescribeTopicSize(resp) > room {
		return nil, errDescribeTooLarge
	}
	if resp.Copies {
		capCopies(resp, c.s.cfg.MaxFrame)
	}
	return resp, nil
}

func ms(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixMilli())
}

func (c *conn) describeGroup(id broker.Identity, r *wire.DescribeGroupRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	g, err := c.s.b.DescribeGroup(topic, deref(r.Group))
	if err != nil {
		return nil, err
	}
	resp := &wire.DescribeGroupResponse{Group: g.Group, Cursor: g.Cursor, Lag: g.Lag}
	if r.WantsSkips() {
		resp.Skips = wire.Skips{Asked: true, Count: g.Skipped, Bound: g.SkippedBound}
	}
	for _, rl := range g.Ranges {
		resp.Ranges = append(resp.Ranges, wire.RangeLag{Range: rl.Range, Lag: rl.Lag})
	}
	return resp, nil
}

func (c *conn) listGroups(id broker.Identity, r *wire.ListGroupsRequest) (wire.Response, error) {
	if err := c.s.b.Authorize(id, broker.OpConsume, deref(r.Topic)); err != nil {
		return nil, err
	}
	names, err := c.s.b.ListGroups(deref(r.Topic))
	if err != nil {
		return nil, err
	}
	return &wire.ListGroupsResponse{Groups: names}, nil
}

// status reports the node; in strict ACL mode a non-admin's totals count
// only the topics it may see, and the data directory is not shown.
func (c *conn) status(id broker.Identity) (wire.Response, error) {
	s := c.s.b.Status()
	if visible := c.s.b.TopicFilter(id); visible != nil {
		s.DataDir, s.Topics, s.Records, s.Bytes = "", 0, 0, 0
		for _, t := range c.s.b.ListTopics() {
			if visible(t.Name) {
				s.Topics++
				s.Records += t.Records
				s.Bytes += t.Bytes
			}
		}
	}
	return &wire.StatusResponse{
		NodeID: s.NodeID, Version: s.Version, DataDir: s.DataDir,
		UptimeMs: uint64(s.Uptime.Milliseconds()), Topics: uint32(s.Topics), Records: s.Records, Bytes: s.Bytes,
	}, nil
}

func (c *conn) endCursor(id broker.Identity, r *wire.EndCursorRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	cur, err := c.s.b.EndCursorContext(c.reqCtx, topic)
	if err != nil {
		return nil, err
	}
	return &wire.CursorResponse{Cursor: &cur}, nil
}
