package metadata

// Error is the reason a command was refused. Its text is the reason string
// sent on the wire, so the values below are part of the protocol: never
// rename one. Compare with errors.Is or ==.
type Error string

func (e Error) Error() string { return string(e) }

// Reasons a command can be refused. A refused command changes nothing.
const (
	ErrNoSuchTopic         Error = "no_such_topic"
	ErrAlreadyExists       Error = "already_exists"
	ErrInvalidTopicName    Error = "invalid_topic_name"
	ErrInvalidKeyspaceBits Error = "invalid_keyspace_bits"
	ErrInvalidRangeCount   Error = "invalid_range_count"
	ErrNoSuchRange         Error = "no_such_range"
	ErrSealed              Error = "sealed"
	ErrCannotSplit         Error = "cannot_split"
	ErrDifferentTopic      Error = "different_topic"
	ErrNotBuddies          Error = "not_buddies"
	ErrActiveSegmentExists Error = "active_segment_exists"
	ErrSegmentOverlap      Error = "segment_overlap"
	ErrNoSuchSegment       Error = "no_such_segment"
	ErrSegmentActive       Error = "segment_active"
	ErrAlreadySealed       Error = "already_sealed"
	ErrUserExists          Error = "user_exists"
	ErrUserNotFound        Error = "user_not_found"
	ErrInvalidPermissions  Error = "invalid_permissions"
	ErrInvalidOperation    Error = "invalid_operation"
	ErrUnknownCommand      Error = "unknown_command"
	ErrInvalidCommand      Error = "invalid_command"
	// ErrQuotaExceeded: the command would pass a limit its Quota carries.
	ErrQuotaExceeded Error = "quota_exceeded"
	// ErrNotFound: the named object (a consumer group) does not exist.
	ErrNotFound Error = "not_found"
	// ErrLastAdmin: the command would leave no user with the admin
	// permission.
	ErrLastAdmin Error = "last_admin"
	// ErrRangeHeld: open_segment in a range held for a split or merge
	// (hold_range); retriable once the split, the merge or the hold ends.
	ErrRangeHeld Error = "range_held"
	// ErrReplicasChanged: set_segment_replicas named an Expect list that
	// is no longer the segment's; read it again and re-plan.
	ErrReplicasChanged Error = "replicas_changed"
	// ErrInvalidPolicy: a policy name or definition is malformed.
	ErrInvalidPolicy Error = "invalid_policy"
	// ErrNoSuchPolicy: delete_policy of a policy that does not exist.
	ErrNoSuchPolicy Error = "no_such_policy"
	// ErrPolicyInUse: delete_policy without Force while a topic is bound.
	ErrPolicyInUse Error = "policy_in_use"
	// ErrTooManyPolicies: define_policy of a new policy past MaxPolicies.
	ErrTooManyPolicies Error = "too_many_policies"
	// ErrSegmentNotFirst: a retention or ttl delete_segment of a segment
	// that is not the range's first; retention only trims the front.
	ErrSegmentNotFirst Error = "segment_not_first"
)

// Errors lists every reason Apply can answer, for tables of wire reasons.
var Errors = []Error{
	ErrNoSuchTopic, ErrAlreadyExists, ErrInvalidTopicName, ErrInvalidKeyspaceBits,
	ErrInvalidRangeCount, ErrNoSuchRange, ErrSealed, ErrCannotSplit, ErrDifferentTopic,
	ErrNotBuddies, ErrActiveSegmentExists, ErrSegmentOverlap, ErrNoSuchSegment,
	ErrSegmentActive, ErrAlreadySealed, ErrUserExists, ErrUserNotFound,
	ErrInvalidPermissions, ErrInvalidOperation, ErrUnknownCommand, ErrInvalidCommand,
	ErrQuotaExceeded, ErrNotFound, ErrLastAdmin, ErrRangeHeld, ErrReplicasChanged,
	ErrInvalidPolicy, ErrNoSuchPolicy, ErrPolicyInUse, ErrTooManyPolicies, ErrSegmentNotFirst,
}
