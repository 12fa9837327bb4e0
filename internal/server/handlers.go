package server

import (
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// handle runs one request that is neither produce nor subscribe.
func (c *conn) handle(req wire.Request) (wire.Response, error) {
	switch r := req.(type) {
	case *wire.CreateTopicRequest:
		return c.createTopic(r.Topic, r.Bits, 1)
	case *wire.CreateTopicExRequest:
		return c.createTopic(r.Topic, r.Bits, int(r.Ranges))
	case *wire.FetchRequest:
		return c.fetch(r)
	case *wire.CommitRequest:
		return c.commit(r)
	case *wire.LeaveGroupRequest:
		return c.leave(r)
	case *wire.ListTopicsRequest:
		return c.listTopics()
	case *wire.DescribeTopicRequest:
		return c.describeTopic(r)
	case *wire.DescribeGroupRequest:
		return c.describeGroup(r)
	case *wire.ListGroupsRequest:
		return c.listGroups(r)
	case *wire.StatusRequest:
		return c.status()
	case *wire.EndCursorRequest:
		return c.endCursor(r)
	}
	if !broker.IsAdmin(c.id) {
		return nil, broker.ErrPermission
	}
	return c.handleAdmin(req)
}

// handleAdmin runs the requests that need the admin permission.
func (c *conn) handleAdmin(req wire.Request) (wire.Response, error) {
	b, ctx := c.s.b, c.reqCtx
	switch r := req.(type) {
	case *wire.CreateUserRequest:
		perms := make([]string, len(r.Perms))
		for i, p := range r.Perms {
			perms[i] = deref(p)
		}
		return nil, b.CreateUser(ctx, deref(r.User), deref(r.Password), perms)
	case *wire.DeleteUserRequest:
		return nil, b.DeleteUser(ctx, deref(r.User))
	case *wire.ChangePasswordRequest:
		return nil, b.ChangePassword(ctx, deref(r.User), deref(r.NewPassword))
	case *wire.ListUsersRequest:
		var resp wire.ListUsersResponse
		for _, u := range b.ListUsers() {
			resp.Users = append(resp.Users, wire.UserEntry{User: u.User, Perms: u.Perms})
		}
		return &resp, nil
	case *wire.GrantACLRequest:
		return nil, b.GrantACL(ctx, deref(r.User), deref(r.Operation), deref(r.Pattern))
	case *wire.RevokeACLRequest:
		return nil, b.RevokeACL(ctx, deref(r.User), deref(r.Operation), deref(r.Pattern))
	case *wire.ListACLsRequest:
		var resp wire.ListACLsResponse
		for _, a := range b.ListACLs(deref(r.User)) {
			resp.ACLs = append(resp.ACLs, wire.ACLEntry{Operation: a.Operation, Resource: a.Resource})
		}
		return &resp, nil
	case *wire.DeleteTopicRequest:
		return nil, b.DeleteTopic(ctx, deref(r.Topic))
	case *wire.SplitRangeRequest:
		children, err := b.SplitRange(ctx, deref(r.Topic), r.Range)
		return &wire.SplitRangeResponse{Children: children}, err
	case *wire.MergeRangesRequest:
		child, err := b.MergeRanges(ctx, deref(r.Topic), r.A, r.B)
		return &wire.MergeRangesResponse{Child: child}, err
	}
	return nil, broker.ErrNotEnabled
}

func (c *conn) createTopic(topic *string, bits uint8, ranges int) (wire.Response, error) {
	name := deref(topic)
	if err := c.s.b.Authorize(c.id, broker.OpProduce, name); err != nil {
		return nil, err
	}
	return nil, c.s.b.CreateTopic(c.reqCtx, name, bits, ranges)
}

func (c *conn) fetch(r *wire.FetchRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(c.id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	wait := min(time.Duration(r.WaitMs)*time.Millisecond, waitCap)
	page, err := c.s.b.Fetch(c.reqCtx, broker.FetchRequest{
		Topic: topic, Cursor: r.Cursor, Group: r.Group, Member: r.Member,
		Max: clamp(r.Max, fetchMaxDefault, fetchMaxCap), Wait: wait,
	})
	if err != nil && c.reqCtx.Err() == nil {
		return nil, err
	}
	return &wire.FetchResponse{Records: toWireRecords(page.Records), NextCursor: page.Cursor}, nil
}

func (c *conn) commit(r *wire.CommitRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(c.id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	if r.Cursor == nil {
		return nil, broker.ErrInvalidCursor
	}
	return nil, c.s.b.Commit(c.reqCtx, topic, deref(r.Group), *r.Cursor)
}

func (c *conn) leave(r *wire.LeaveGroupRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(c.id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	return nil, c.s.b.LeaveGroup(topic, deref(r.Group), deref(r.Member))
}

func (c *conn) listTopics() (wire.Response, error) {
	var resp wire.ListTopicsResponse
	for _, t := range c.s.b.ListTopics() {
		resp.Topics = append(resp.Topics, wire.TopicSummary{
			Name: t.Name, Bits: t.Bits, ActiveRanges: uint32(t.ActiveRanges), Ranges: uint32(t.Ranges),
			Segments: uint32(t.Segments), Records: t.Records, Bytes: t.Bytes,
		})
	}
	return &resp, nil
}

func (c *conn) describeTopic(r *wire.DescribeTopicRequest) (wire.Response, error) {
	if err := c.s.b.Authorize(c.id, broker.OpConsume, deref(r.Topic)); err != nil {
		return nil, err
	}
	d, err := c.s.b.DescribeTopic(deref(r.Topic))
	if err != nil {
		return nil, err
	}
	resp := &wire.DescribeTopicResponse{ID: d.ID, Name: d.Name, Bits: d.Bits, CreatedAt: ms(d.CreatedAt), Groups: d.Groups}
	for _, rg := range d.Ranges {
		ri := wire.RangeInfo{
			ID: rg.ID, Start: rg.Start, End: rg.End, Active: rg.Active, Parents: rg.Parents,
			CreatedAt: ms(rg.CreatedAt), SealedAt: ms(rg.SealedAt),
		}
		for _, s := range rg.Segments {
			ri.Segments = append(ri.Segments, wire.SegmentInfo{
				ID: s.ID, Active: s.Active, Base: s.Base, End: s.End, Records: s.Records, Bytes: s.Bytes,
				Replicas: s.Replicas, OpenedAt: ms(s.OpenedAt), SealedAt: ms(s.SealedAt), MaxExpiry: ms(s.MaxExpiry),
			})
		}
		resp.Ranges = append(resp.Ranges, ri)
	}
	return resp, nil
}

func ms(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixMilli())
}

func (c *conn) describeGroup(r *wire.DescribeGroupRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(c.id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	g, err := c.s.b.DescribeGroup(topic, deref(r.Group))
	if err != nil {
		return nil, err
	}
	resp := &wire.DescribeGroupResponse{Group: g.Group, Cursor: g.Cursor, Lag: g.Lag}
	for _, rl := range g.Ranges {
		resp.Ranges = append(resp.Ranges, wire.RangeLag{Range: rl.Range, Lag: rl.Lag})
	}
	return resp, nil
}

func (c *conn) listGroups(r *wire.ListGroupsRequest) (wire.Response, error) {
	if err := c.s.b.Authorize(c.id, broker.OpConsume, deref(r.Topic)); err != nil {
		return nil, err
	}
	names, err := c.s.b.ListGroups(deref(r.Topic))
	if err != nil {
		return nil, err
	}
	return &wire.ListGroupsResponse{Groups: names}, nil
}

func (c *conn) status() (wire.Response, error) {
	s := c.s.b.Status()
	return &wire.StatusResponse{
		NodeID: s.NodeID, Version: s.Version, DataDir: s.DataDir,
		UptimeMs: uint64(s.Uptime.Milliseconds()), Topics: uint32(s.Topics), Records: s.Records, Bytes: s.Bytes,
	}, nil
}

func (c *conn) endCursor(r *wire.EndCursorRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(c.id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	cur, err := c.s.b.EndCursor(topic)
	if err != nil {
		return nil, err
	}
	return &wire.CursorResponse{Cursor: &cur}, nil
}
