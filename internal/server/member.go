package server

import (
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// memberHeartbeat keeps a fetching group member alive (key 85).
func (c *conn) memberHeartbeat(id broker.Identity, r *wire.MemberHeartbeatRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	st, err := c.s.b.MemberHeartbeat(topic, deref(r.Group), deref(r.Member))
	if err != nil {
		return nil, err
	}
	return &wire.MemberStateResponse{
		Generation: st.Generation, Ranges: uint32(st.Ranges), Members: uint32(st.Members),
	}, nil
}

// memberCommit commits a fetching group member's position (key 86).
func (c *conn) memberCommit(id broker.Identity, r *wire.MemberCommitRequest) (wire.Response, error) {
	topic := deref(r.Topic)
	if err := c.s.b.Authorize(id, broker.OpConsume, topic); err != nil {
		return nil, err
	}
	if r.Cursor == nil {
		return nil, broker.ErrInvalidCursor
	}
	return nil, c.s.b.MemberCommit(c.reqCtx, topic, deref(r.Group), deref(r.Member), r.Generation, *r.Cursor)
}
