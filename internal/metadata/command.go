package metadata

// Version is the command format this state machine understands. A command
// with another V is refused with ErrUnknownCommand, so an old replica never
// half-understands a newer command and diverges.
const Version = 1

// Command kinds (Command.Kind).
const (
	KindCreateTopic   = "create_topic"
	KindDeleteTopic   = "delete_topic"
	KindOpenSegment   = "open_segment"
	KindSealSegment   = "seal_segment"
	KindDeleteSegment = "delete_segment"
	KindSplitRange    = "split_range"
	KindMergeRanges   = "merge_ranges"
	KindHoldRange     = "hold_range"
	KindCommitOffsets = "commit_offsets"
	KindSetOffsets    = "set_offsets"
	KindDeleteGroup   = "delete_group"
	KindCreateUser    = "create_user"
	KindDeleteUser    = "delete_user"
	KindSetPassword   = "set_password"
	KindGrantACL      = "grant_acl"
	KindRevokeACL     = "revoke_acl"
	KindInitCluster   = "init_cluster"
	// KindSetSegmentReplicas replaces a sealed segment's replica list
	// (healing: a verified copy added, then dead or damaged ones
	// dropped), only if the list is still Expect.
	KindSetSegmentReplicas = "set_segment_replicas"
	// KindMarkCopyDamaged records that Node's copy of a sealed segment is
	// damaged or missing: planners count it out and heal around it.
	KindMarkCopyDamaged = "mark_copy_damaged"
	// KindDefinePolicy creates or replaces a storage policy (root group).
	KindDefinePolicy = "define_policy"
	// KindDeletePolicy removes a storage policy (root group).
	KindDeletePolicy = "delete_policy"
	// KindBindTopicPolicy binds a topic to a policy by name, or unbinds
	// it (the topic's vnode).
	KindBindTopicPolicy = "bind_topic_policy"
	// KindRecordSealContent fills in a sealed segment's records, bytes,
	// expiry, content hash and generation when its seal recorded only the
	// end (a failover seal: no copy was cut to the end yet when it was
	// decided). The first copy sealed at that end supplies them.
	KindRecordSealContent = "record_seal_content"
)

// Limits checked by Apply.
const (
	DefaultBits      = 16     // keyspace bits when a create_topic leaves Bits at 0
	MaxBits          = 32     // largest keyspace: [0, 2^32)
	MaxInitialRanges = 1024   // most ranges a create_topic may ask for
	MaxTopicNameLen  = 249    // bytes
	MaxNameLen       = 255    // bytes of a user, group, replica or cluster id
	MaxGroupEntries  = 131072 // stored entries per (group, topic); equals cursor.MaxEntries (checked by a broker test)
	MaxReplicas      = 16     // replicas per segment
	MinSecretLen     = 16     // bytes of a cluster secret
	MaxSecretLen     = 1024
	// MaxHoldMs bounds how far past its own time a hold_range may hold a
	// range: a node that holds a range and dies leaves it unwritable for
	// no longer than this.
	MaxHoldMs = 60_000
)

// Permissions a user may hold, and ACL operations.
const (
	PermAdmin   = "admin"
	PermProduce = "produce"
	PermConsume = "consume"

	OpProduce = "produce"
	OpConsume = "consume"
)

// Command is one input of the state machine. It is a flat, versioned,
// JSON-serialisable struct: each Kind reads the fields it needs and ignores
// the rest. It is what the command log and Raft entries carry, so the JSON
// tags are frozen. Time comes in as Now (unix ms) because Apply never reads a
// clock.
type Command struct {
	V    int    `json:"v"`   // format version, currently 1
	Kind string `json:"k"`   // one of the Kind* constants
	Now  int64  `json:"now"` // unix ms, stamped by the proposer

	Topic  string `json:"topic,omitempty"`  // topic name: create/delete_topic, commit_offsets
	Owner  string `json:"owner,omitempty"`  // create_topic: the user creating it ("" = the node itself)
	Bits   uint8  `json:"bits,omitempty"`   // create_topic: keyspace bits, 0 = DefaultBits
	Ranges int    `json:"ranges,omitempty"` // create_topic: initial range count, 0 = 1
	// ReplicationFactor (create_topic) is the replicas per segment of the
	// topic, 0 for the cluster's default; at most MaxReplicas.
	ReplicationFactor int    `json:"replication_factor,omitempty"`
	Range             uint64 `json:"range,omitempty"`   // open_segment, split_range, merge_ranges
	RangeB            uint64 `json:"range_b,omitempty"` // merge_ranges: the other buddy
	// TopicID (delete_topic), when not 0, is the id the named topic must
	// have: a node deleting a topic it looked up by name never deletes
	// another topic of that name created elsewhere since.
	TopicID uint64 `json:"topic_id,omitempty"`
	// Until (hold_range) is the unix ms before which no segment may open
	// in the range; 0 releases a hold.
	Until int64 `json:"until,omitempty"`

	Segment     uint64   `json:"segment,omitempty"`      // seal_segment, delete_segment, set_segment_replicas, mark_copy_damaged
	Base        uint64   `json:"base,omitempty"`         // open_segment: first offset
	End         uint64   `json:"end,omitempty"`          // seal_segment: offset after the last record
	Records     uint64   `json:"records,omitempty"`      // seal_segment
	Bytes       int64    `json:"bytes,omitempty"`        // seal_segment
	MaxExpiry   int64    `json:"max_expiry,omitempty"`   // seal_segment: unix ms, 0 = none
	ContentHash uint64   `json:"content_hash,omitempty"` // seal_segment: footer hash
	Generation  uint32   `json:"generation,omitempty"`   // seal_segment: compaction generation
	Replicas    []string `json:"replicas,omitempty"`     // open_segment, set_segment_replicas: primary first
	// Expect (set_segment_replicas, and delete_segment with ReasonLost)
	// is the replica list the proposer saw; the command is refused unless the segment still has it, so a
	// heal planned on an old view never undoes a change made since.
	Expect []string `json:"expect,omitempty"`
	// Node (mark_copy_damaged) is the replica whose copy is damaged.
	Node string `json:"node,omitempty"`
	// MinID (open_segment) is the lowest id the new segment may take. A
	// node passes one past the highest segment id its store has ever held,
	// so an id that a command lost in a crash handed out is never handed
	// out again while its file still exists. In a sharded state (NewShard)
	// the floor must lie in the state's own block: the node passes one
	// past the highest id of that shard it has held.
	MinID uint64 `json:"min_id,omitempty"`

	Group   string       `json:"group,omitempty"`   // commit_offsets, set_offsets, delete_group
	Entries []GroupEntry `json:"entries,omitempty"` // commit_offsets, set_offsets

	User         string   `json:"user,omitempty"`          // user and ACL commands
	PasswordHash string   `json:"password_hash,omitempty"` // create_user, set_password (opaque)
	Perms        []string `json:"perms,omitempty"`         // create_user
	// KeepAdmin (delete_user) refuses to delete the last user holding the
	// admin permission. It travels in the command, like Quota, so a
	// delete_user logged before the rule existed replays as it applied.
	KeepAdmin bool   `json:"keep_admin,omitempty"`
	Operation string `json:"operation,omitempty"` // grant_acl, revoke_acl
	Pattern   string `json:"pattern,omitempty"`   // grant_acl, revoke_acl

	ClusterID     string `json:"cluster_id,omitempty"`     // init_cluster (optional)
	ClusterSecret []byte `json:"cluster_secret,omitempty"` // init_cluster

	// Quota (create_topic, split_range, merge_ranges, commit_offsets) is
	// the limits the proposer asks Apply to hold this command to; nil sets
	// none. See Quota for why limits travel in the command.
	Quota *Quota `json:"quota,omitempty"`

	// Policy names a storage policy: define_policy, delete_policy,
	// bind_topic_policy ("" unbinds), create_topic (optional).
	Policy string `json:"policy,omitempty"`
	// PolicyFields (define_policy) is the policy's definition.
	PolicyFields map[string]PolicyValue `json:"policy_fields,omitempty"`
	// Force (delete_policy) deletes a policy topics are still bound to.
	Force bool `json:"force,omitempty"`
	// Reason (delete_segment) is why: ReasonOperator, ReasonRetention or
	// ReasonTTL. The last two delete only the range's first segment.
	Reason string `json:"reason,omitempty"`
}

// Result is the output of Apply. Err is nil when the command took effect;
// otherwise it is an Error and the state is unchanged (already_sealed also
// fills SegmentID and Sealed). Only the fields a kind produces are set.
type Result struct {
	Err error
	// TopicID: create_topic, delete_topic, split_range, merge_ranges,
	// commit_offsets.
	TopicID uint64
	// RangeIDs: create_topic, the initial ranges by Start; split_range,
	// [lo, hi]; merge_ranges, [child].
	RangeIDs []uint64
	// SegmentID: open_segment, seal_segment, delete_segment,
	// set_segment_replicas.
	SegmentID uint64
	// Sealed: seal_segment, the segment as sealed (a copy).
	Sealed *Segment
	// Deleted: segment ids whose files may go: delete_topic (ascending,
	// active ones included), delete_segment.
	Deleted []uint64
}

func failed(err Error) Result { return Result{Err: err} }
