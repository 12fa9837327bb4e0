package control

import (
	"fmt"
	"math"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/placement"
)

// Group numbering. The root group is 1; vnode v is group v+2. A vnode's
// metadata.State is sharded by its group id, so the shard of any topic,
// range or segment id (metadata.ShardOf) is the group that holds it.
const (
	// RootGroup holds users, ACLs, the cluster id and secret, and the
	// cluster registry.
	RootGroup       uint64 = 1
	firstVnodeGroup        = 2
	// MaxVnodes is the most vnodes a cluster may have: every vnode group
	// id must be a metadata shard.
	MaxVnodes = metadata.MaxShard - firstVnodeGroup + 1
	// rootKey ranks nodes for the root group's voters; the ring's vnodes
	// never reach it.
	rootKey = math.MaxUint32
)

// VnodeGroup is the Raft group of vnode v.
func VnodeGroup(v uint32) uint64 { return uint64(v) + firstVnodeGroup }

// groupVnode returns the vnode of a vnode group.
func groupVnode(group uint64) uint32 { return uint32(group - firstVnodeGroup) }

// GroupOfID is the group holding a topic, range or segment id: the id's
// shard. It may name a group the cluster does not have (an id of a
// single-node state, or a forged one); callers check.
func GroupOfID(id uint64) uint64 { return uint64(metadata.ShardOf(id)) }

// isVnodeGroup reports whether group is a vnode of a ring of n vnodes.
func isVnodeGroup(group uint64, n int) bool {
	return group >= firstVnodeGroup && group < firstVnodeGroup+uint64(n)
}

// groupName is a group's name in logs and status: "root" or "vnode-3".
func groupName(group uint64) string {
	if group == RootGroup {
		return "root"
	}
	return fmt.Sprintf("vnode-%d", groupVnode(group))
}

// routing says where a metadata command goes.
type routing struct {
	group uint64
	// refused, when not nil, answers the command without proposing it:
	// it names an object no group can hold.
	refused error
}

// route picks the group of a command: users, ACLs, the cluster id and
// storage policies go to the root; topic commands (a topic's policy
// binding too) by name to the topic's vnode on the ring; range and
// segment commands to the shard of their id.
func route(cmd *metadata.Command, ring placement.Ring) routing {
	switch cmd.Kind {
	case metadata.KindCreateUser, metadata.KindDeleteUser, metadata.KindSetPassword,
		metadata.KindGrantACL, metadata.KindRevokeACL, metadata.KindInitCluster,
		metadata.KindDefinePolicy, metadata.KindDeletePolicy:
		return routing{group: RootGroup}
	case metadata.KindCreateTopic, metadata.KindDeleteTopic, metadata.KindCommitOffsets,
		metadata.KindSetOffsets, metadata.KindDeleteGroup, metadata.KindBindTopicPolicy:
		return routing{group: VnodeGroup(ring.VnodeOf(cmd.Topic))}
	case metadata.KindOpenSegment, metadata.KindSplitRange, metadata.KindMergeRanges, metadata.KindHoldRange:
		return byID(cmd.Range, ring, metadata.ErrNoSuchRange)
	case metadata.KindSealSegment, metadata.KindDeleteSegment, metadata.KindSetSegmentReplicas, metadata.KindMarkCopyDamaged,
		metadata.KindRecordSealContent:
		return byID(cmd.Segment, ring, metadata.ErrNoSuchSegment)
	}
	return routing{refused: metadata.ErrUnknownCommand}
}

func byID(id uint64, ring placement.Ring, missing metadata.Error) routing {
	g := GroupOfID(id)
	if !isVnodeGroup(g, ring.Count()) {
		return routing{refused: missing}
	}
	return routing{group: g}
}

// rootKinds are the metadata commands the root group applies; a vnode
// group applies every other kind. The state machines refuse commands of
// the wrong kind, so a misrouted command never lands in the wrong shard.
var rootKinds = map[string]bool{
	metadata.KindCreateUser: true, metadata.KindDeleteUser: true, metadata.KindSetPassword: true,
	metadata.KindGrantACL: true, metadata.KindRevokeACL: true, metadata.KindInitCluster: true,
	metadata.KindDefinePolicy: true, metadata.KindDeletePolicy: true,
}
