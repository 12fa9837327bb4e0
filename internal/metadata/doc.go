// Package metadata is the control plane's deterministic state machine:
// topics, the ranges that tile each topic's keyspace, the segments that hold
// each range's offsets, consumer-group positions, users, ACLs and the
// cluster secret.
//
// It is pure: no I/O, no goroutines, no clock, no locks, no randomness.
// Commands go in, results come out, and equal states fed equal commands end
// equal, byte for byte (Snapshot). That is what lets the same commands be
// logged on one node (internal/metastore) or replicated by Raft, and what
// lets tests and simulators replay them. Time comes inside each command as
// Command.Now (unix ms).
//
// # Commands
//
// A Command is a flat, versioned struct (V = Version, Kind, and the fields
// the kind reads). An unknown V or Kind answers ErrUnknownCommand, so an old
// replica refuses a newer command instead of half-applying it; malformed
// fields answer ErrInvalidCommand. A refused command changes nothing, and
// Apply never panics on any input.
//
//	create_topic   Topic, Bits, Ranges, Owner, ReplicationFactor, Policy -> TopicID, RangeIDs
//	    name 1..249 bytes of [A-Za-z0-9._-], not "." or ".." (invalid_topic_name);
//	    Bits 1..32, 0 = 16 (invalid_keyspace_bits); Ranges a power of two
//	    <= min(2^Bits, 1024), 0 = 1 (invalid_range_count); already_exists;
//	    quota_exceeded past Quota's topics, ranges or the Owner's share.
//	delete_topic   Topic, TopicID -> TopicID, Deleted (every freed segment, ascending)
//	    no_such_topic, also when TopicID is set and the topic has another id
//	open_segment   Range, Base, Replicas, MinID -> SegmentID (>= MinID)
//	    no_such_range; sealed (range sealed); active_segment_exists;
//	    range_held (Now before the range's HeldUntil: see hold_range);
//	    segment_overlap (Base < the range's NextOffset).
//	seal_segment   Segment, End, Records, Bytes, MaxExpiry, ContentHash, Generation -> Sealed
//	    no_such_segment; already_sealed (with the existing seal in Sealed, so
//	    racing sealers converge); End >= Base and Records <= End-Base.
//	delete_segment Segment, Reason, Expect -> Deleted   no_such_segment; segment_active;
//	    invalid_command (Reason not "", "retention", "ttl" or "lost"); segment_not_first
//	    (a retention or ttl delete of any but the range's first segment);
//	    replicas_changed (a "lost" delete whose segment has no list, or
//	    whose list is not Expect, in order: a copy recorded meanwhile wins).
//	    The range records the span in Deleted (Skip unless "ttl"; a "lost"
//	    segment without a recorded count records End-Base, Bound) and, when
//	    the segment was its first, raises Trimmed; WasDeleted remembers the id,
//	    and WasLost too for a "lost" delete (the last MaxLostIDs, kept apart
//	    so a node finding a file of it sets it aside rather than delete it).
//	set_segment_replicas Segment, Expect, Replicas -> SegmentID
//	    invalid_command (Replicas empty, repeated, a name empty or over 255
//	    bytes, more than MaxReplicas); no_such_segment; segment_active (only
//	    a sealed segment's list changes); replicas_changed (the list is not
//	    Expect, in order); invalid_command (the segment has no list, or the
//	    new one keeps none of its holders whose copy is not damaged).
//	    Healing adds a verified copy, then drops dead or damaged ones, each
//	    conditional on the list it saw; a dropped holder leaves Damaged.
//	mark_copy_damaged Segment, Node -> SegmentID
//	    invalid_command (Node empty); no_such_segment; segment_active;
//	    replicas_changed (Node not in the list). Adds Node to the sealed
//	    segment's Damaged set (sorted; marking twice changes nothing);
//	    delete_segment and delete_topic forget it with the segment.
//	split_range    Range -> RangeIDs [lo, hi]
//	    no_such_range; sealed; cannot_split (size 1); active_segment_exists
//	    (seal first: the caller fences and seals the head before splitting);
//	    quota_exceeded past Quota.Ranges (merges too).
//	merge_ranges   Range, RangeB -> RangeIDs [child]
//	    no_such_range; different_topic; sealed; not_buddies (equal size and
//	    startA XOR size == startB); active_segment_exists.
//	hold_range     Range, Until -> TopicID
//	    no_such_range; sealed; invalid_command (Until < 0 or past
//	    Now+MaxHoldMs). Sets HeldUntil (0 releases): a cluster node about to
//	    split or merge a range holds it before sealing its active segment,
//	    so no node opens a successor in between.
//	commit_offsets Group, Topic, Entries -> TopicID
//	    no_such_topic; merged into the stored position, never moving it back:
//	    an entry implied by another of the same Source (a slice containing
//	    its slice, an Offset at least its Offset) is dropped, whether stored
//	    or new; at most MaxGroupEntries per group and topic; a new group
//	    past Quota.GroupsPerTopic is quota_exceeded.
//	set_offsets    Group, Topic, Entries -> TopicID
//	    as commit_offsets, but replaces the stored position (it may move back):
//	    an operator's reset. Empty Entries is the start of the topic.
//	delete_group   Group, Topic -> TopicID     no_such_topic; not_found
//	create_user    User, PasswordHash, Perms   user_exists; invalid_permissions
//	delete_user    User (and its ACLs)         user_not_found; last_admin when
//	    KeepAdmin is set and the user is the only one with admin
//	set_password   User, PasswordHash          user_not_found
//	grant_acl      User, Operation, Pattern    user_not_found; invalid_operation;
//	    invalid_topic_name for a pattern that is not a topic name, "prefix*" or "*".
//	revoke_acl     User, Operation, Pattern    idempotent
//	init_cluster   ClusterSecret, ClusterID    once; then already_exists
//	define_policy  Policy, PolicyFields        invalid_policy; too_many_policies
//	    (a new name past MaxPolicies). Creates or replaces; DefinedAt = Now.
//	delete_policy  Policy, Force               no_such_policy; policy_in_use
//	    (a topic of this state is bound to it and Force is not set)
//	bind_topic_policy Topic, Policy ("" unbinds) -> TopicID   no_such_topic;
//	    invalid_policy. The policy need not exist here (the root holds them).
//
// commit_offsets also counts, per group, the records deleted (not expired)
// between a stored position and the one an entry advances it to
// (GroupSkipped); a first commit and set_offsets count nothing.
//
// # Quotas
//
// A command may carry a Quota: limits the proposer configured, checked by
// Apply against the state the command meets, so a check and its change are
// one step and a logged command replays to the same result under any later
// configuration. A topic records its Owner (the creating user); the
// per-owner limits count an owner's topics and all their ranges, active and
// sealed, through an index that Restore rebuilds and CheckInvariants
// verifies. Snapshots written before owners existed load with no owners.
//
// # Ranges and lineage
//
// A topic's keyspace [0, 2^bits) is tiled by its active ranges, each a buddy
// block (size a power of two, Start a multiple of it). A split seals a range
// and creates its two halves; a merge seals two buddies and creates their
// union. No data moves: a sealed range keeps its segments, and readers of a
// child first read its ancestors, filtered to the child's slice. That order
// is Range.Lineage: every ancestor, each listed after all of its own
// ancestors (a linear extension of the ancestor relation).
//
// # Offsets
//
// Offsets belong to a range and only grow. A range's segments are opened in
// offset order, never overlap, and at most one (the last) is active.
// Range.NextOffset, the largest End ever sealed, is the floor for the next
// segment's Base; deleting segments does not lower it, so an offset is
// never reused.
//
// # Ids, snapshots, reads
//
// Topic, range and segment ids are counters inside the state, never reused.
// A state made by NewShard (one vnode of a cluster) allocates them in its
// shard's block, shard<<ShardShift | counter, so ids are unique across the
// cluster and ShardOf(id) names the vnode that holds the object; New is
// shard 0, whose ids are the plain counters. The shard travels in the
// snapshot (omitted for shard 0, whose bytes are unchanged). An
// open_segment's MinID must lie in the state's own block (or be 0).
// Snapshot encodes the state deterministically; Restore rebuilds the
// indexes (topic by name, active ranges by Start, segments by range) and
// refuses a state that breaks an invariant (CheckInvariants). Accessors
// return copies; lookups by name or id are O(1), ActiveRangeFor is a binary
// search over the active ranges.
package metadata
