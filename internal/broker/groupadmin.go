package broker

import (
	"context"
	"errors"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/metadata"
)

// ErrGroupHasMembers: the group has live members, so its committed
// position cannot be reset or deleted under them.
var ErrGroupHasMembers = errors.New("group_has_members")

// SeekGroup replaces a group's committed position with cur, which may be
// behind it: an operator's reset, the one exception to commits never
// moving a group back. It is refused while the group has live members
// (group_has_members): their next commits merge into the stored position
// and would carry it forward again, and their in-flight reads would not
// follow the reset. A member that joins between the check and the reset
// reads from the new position. A nil cur is the start of the topic.
func (b *Broker) SeekGroup(ctx context.Context, topic, group string, cur *string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	var c cursor.Cursor
	if cur != nil {
		if c, err = cursor.Decode(b.secret, topicID, *cur); err != nil {
			return ErrInvalidCursor
		}
	}
	if err := b.refuseLive(ctx, topicID, group); err != nil {
		return err
	}
	_, err = b.apply(ctx, metadata.Command{
		Kind:    metadata.KindSetOffsets,
		Topic:   topic,
		Group:   group,
		Entries: toGroupEntries(c.Entries),
		Quota:   &metadata.Quota{GroupsPerTopic: b.cfg.Limits.MaxGroupsPerTopic},
	})
	if errors.Is(err, ErrQuotaExceeded) {
		return quotaError("the topic has %d consumer groups with a committed position", b.cfg.Limits.MaxGroupsPerTopic)
	}
	return err
}

// DeleteGroup removes a group's committed position on a topic. It is
// refused while the group has live members (group_has_members), and a
// group without a committed position answers not_found.
func (b *Broker) DeleteGroup(ctx context.Context, topic, group string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	if err := b.refuseLive(ctx, topicID, group); err != nil {
		return err
	}
	_, err = b.apply(ctx, metadata.Command{Kind: metadata.KindDeleteGroup, Topic: topic, Group: group})
	return err
}

// GroupMember is one live member of a group and the ranges it reads.
type GroupMember struct {
	Name     string
	LastSeen int64 // unix ms of its last poll or heartbeat
	Ranges   []uint64
}

// GroupMembers reports a group's live members and its generation (0 with
// no members). A group with neither members nor a committed position is
// unknown (not_found), as for DescribeGroup.
func (b *Broker) GroupMembers(topic, group string) (generation uint64, members []GroupMember, err error) {
	topicID, err := b.topicID(topic)
	if err != nil {
		return 0, nil, err
	}
	var committed bool
	_ = b.plane.ViewTopic(topicID, func(st *metadata.State) { committed = containsString(st.Groups(topicID), group) })
	var live bool
	if b.cluster != nil {
		generation, live, members, err = b.clusterMembers(topicID, group)
		if err != nil {
			return 0, nil, err
		}
	} else {
		generation, live, members, err = b.coord.members(singleNode, topicID, group, b.nowMs())
		if err != nil {
			return 0, nil, err
		}
	}
	if !live && !committed {
		return 0, nil, ErrGroupNotFound
	}
	return generation, members, nil
}

// refuseLive answers group_has_members when the group has live members.
func (b *Broker) refuseLive(ctx context.Context, topicID uint64, group string) error {
	live, err := b.liveGroups(ctx, topicID)
	if err != nil {
		return err
	}
	if containsString(live, group) {
		return ErrGroupHasMembers
	}
	return nil
}
