package broker

import (
	"context"
	"errors"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/groups"
)

// ErrStaleMember refuses member_heartbeat and member_commit from a member
// that is not in the group under the membership the request stands for:
// it never joined, left, was evicted, or joined again since (see
// groups.Coordinator.CommitRanges). Its next fetch joins it again. The
// reason is not retriable: sending the same request again cannot help.
var ErrStaleMember = errors.New("stale_member")

// MemberState is what MemberHeartbeat tells a member.
type MemberState = groups.MemberState

// MemberHeartbeat keeps a fetching member alive while it works through
// what it read. It hands out nothing: the member keeps the ranges it was
// last handed, so they do not pass to another member meanwhile.
func (b *Broker) MemberHeartbeat(topic, group, member string) (MemberState, error) {
	topicID, err := b.topicID(topic)
	if err != nil {
		return MemberState{}, err
	}
	if b.cluster != nil {
		return b.clusterTouch(topicID, group, member)
	}
	return b.coord.touch(singleNode, topicID, group, member, b.nowMs())
}

// MemberCommit is Commit for a member that fetches: it commits the
// cursor's entries for the ranges the member reads now (those it was
// last handed), and only while the member is in the group under the
// membership that read them (generation: see CommitRanges). A stale
// member's commit is refused whole, so records handed to another member
// since are never committed by the one that lost them.
func (b *Broker) MemberCommit(ctx context.Context, topic, group, member string, generation uint64, cur string) error {
	topicID, err := b.topicID(topic)
	if err != nil {
		return err
	}
	c, err := cursor.Decode(b.secret, topicID, cur)
	if err != nil {
		return ErrInvalidCursor
	}
	var ranges []uint64
	if b.cluster != nil {
		ranges, err = b.clusterCommitRanges(ctx, topicID, group, member, generation)
	} else {
		ranges, err = b.coord.commitRanges(singleNode, topicID, group, member, generation, b.nowMs())
	}
	if err != nil {
		return err
	}
	// The member may be evicted between the check and the commit; its
	// ranges' new owner then reads from before the commit and delivers
	// those records again, which at-least-once allows, but never skips one.
	err = b.commitEntries(ctx, topic, topicID, group, b.memberEntries(topicID, ranges, c.Entries))
	if err != nil && ctx.Err() != nil {
		// The request ended under the commit: the node is shutting down,
		// or the client has gone. Whether the commit applied is unknown;
		// a member commits again, which is harmless.
		return ErrShuttingDown
	}
	return err
}
