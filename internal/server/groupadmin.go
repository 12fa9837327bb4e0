package server

import (
	"math"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Audit event types of the group administration keys.
const (
	auditGroupSeek    = "group_seek"
	auditGroupDeleted = "group_deleted"
)

func (c *conn) cursorAtTime(id broker.Identity, r *wire.CursorAtTimeRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	// Times past the int64 range are later than any record: the end.
	at := int64(min(r.TimeMs, math.MaxInt64))
	cur, err := c.s.b.CursorAtContext(c.reqCtx, topic, at)
	if err != nil {
		return nil, err
	}
	return &wire.CursorResponse{Cursor: &cur}, nil
}

func (c *conn) cursorFromEnd(id broker.Identity, r *wire.CursorFromEndRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	cur, err := c.s.b.CursorFromEndContext(c.reqCtx, topic, r.N)
	if err != nil {
		return nil, err
	}
	return &wire.CursorResponse{Cursor: &cur}, nil
}

// groupSeek resets a group's position. It needs consume on the topic, as
// a commit does (an admin has it): moving a group is what its consumers
// may do anyway, one commit at a time.
func (c *conn) groupSeek(id broker.Identity, r *wire.GroupSeekRequest) (wire.Response, error) {
	topic, group := deref(r.Topic), deref(r.Group)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	err := c.s.b.SeekGroup(c.reqCtx, topic, group, r.Cursor)
	c.audit(id, auditGroupSeek, topic, map[string]string{"group": group}, err)
	return nil, err
}

func (c *conn) groupDelete(id broker.Identity, r *wire.GroupDeleteRequest) (wire.Response, error) {
	topic, group := deref(r.Topic), deref(r.Group)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	err := c.s.b.DeleteGroup(c.reqCtx, topic, group)
	c.audit(id, auditGroupDeleted, topic, map[string]string{"group": group}, err)
	return nil, err
}

func (c *conn) describeGroupMembers(id broker.Identity, r *wire.DescribeGroupMembersRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	gen, members, err := c.s.b.GroupMembers(topic, deref(r.Group))
	if err != nil {
		return nil, err
	}
	resp := &wire.DescribeGroupMembersResponse{Generation: gen}
	for _, m := range members {
		resp.Members = append(resp.Members, wire.GroupMember{Member: m.Name, LastSeenMs: uint64(max(m.LastSeen, 0)), Ranges: m.Ranges})
	}
	return resp, nil
}
