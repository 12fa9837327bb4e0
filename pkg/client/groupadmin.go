package client

import (
	"context"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// CursorAt returns a cursor at the first record of each of topic's ranges
// whose timestamp is at or after t, resolved by the broker from batch
// timestamps. Reading from it goes on through the rest of each range's
// history, across splits and merges; a range with nothing that late is
// positioned at its end. A time before the Unix epoch means the start.
// Record timestamps are the producers' (Record.Timestamp), not arrival
// times.
func (c *Client) CursorAt(ctx context.Context, topic string, t time.Time) (string, error) {
	ms := max(t.UnixMilli(), 0)
	req := wire.CursorAtTimeRequest{Topic: &topic, TimeMs: uint64(ms)}
	return c.cursorRequest(ctx, req)
}

// CursorFromEnd returns a cursor n records before the end of each of
// topic's ranges (per range, not in total), so fetching from it returns
// the last n records of every range, or all of a range's records when it
// holds fewer. n = 0 is the end, as EndCursor.
func (c *Client) CursorFromEnd(ctx context.Context, topic string, n uint64) (string, error) {
	return c.cursorRequest(ctx, wire.CursorFromEndRequest{Topic: &topic, N: n})
}

func (c *Client) cursorRequest(ctx context.Context, req wire.Request) (string, error) {
	var resp wire.CursorResponse
	if err := c.do(ctx, request{req: req, resp: &resp, resend: true}); err != nil {
		return "", err
	}
	if resp.Cursor == nil {
		return "", nil
	}
	return *resp.Cursor, nil
}

// SeekGroup sets group's committed position on topic to exactly cursor,
// even behind where it was: a reset, unlike Commit, which never moves a
// group back. Use "" for the start of the topic, or a cursor from
// EndCursor, CursorAt or a fetch. It needs the consume permission on the
// topic and fails with ErrGroupHasMembers while the group has live
// members, and with ErrInvalidCursor for a cursor of another topic.
func (c *Client) SeekGroup(ctx context.Context, topic, group, cursor string) error {
	req := wire.GroupSeekRequest{Topic: &topic, Group: &group}
	if cursor != "" {
		req.Cursor = &cursor
	}
	return c.do(ctx, request{req: req, resend: true})
}

// DeleteGroup removes group's committed position on topic. It needs the
// consume permission on the topic, fails with ErrGroupHasMembers while the
// group has live members and with ErrNotFound when the group has no
// committed position.
func (c *Client) DeleteGroup(ctx context.Context, topic, group string) error {
	req := wire.GroupDeleteRequest{Topic: &topic, Group: &group}
	return c.do(ctx, request{req: req})
}

// GroupMembers is DescribeGroupMembers' answer.
type GroupMembers struct {
	// Generation counts the group's membership changes; 0 without
	// members.
	Generation uint64
	Members    []GroupMember
}

// GroupMember is one live member of a group.
type GroupMember struct {
	Name     string
	LastSeen time.Time // its last fetch, poll or heartbeat
	Ranges   []uint64  // the active ranges it reads, ascending
}

// DescribeGroupMembers returns group's live members on topic, their
// ranges and the group's generation. A group with neither members nor a
// committed position fails with ErrNotFound.
func (c *Client) DescribeGroupMembers(ctx context.Context, topic, group string) (GroupMembers, error) {
	var resp wire.DescribeGroupMembersResponse
	req := wire.DescribeGroupMembersRequest{Topic: &topic, Group: &group}
	if err := c.do(ctx, request{req: req, resp: &resp, resend: true}); err != nil {
		return GroupMembers{}, err
	}
	out := GroupMembers{Generation: resp.Generation, Members: make([]GroupMember, len(resp.Members))}
	for i, m := range resp.Members {
		out.Members[i] = GroupMember{Name: m.Member, LastSeen: msTime(m.LastSeenMs), Ranges: m.Ranges}
	}
	return out, nil
}
