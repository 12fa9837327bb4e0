package wire

// Reason strings: the payload of an error response. They are part of the
// protocol; clients match on them, so a shipped reason never changes
// meaning. Reasons holds the retriable flag and a description of each.
const (
	// Framing and protocol.
	ReasonFrameTooLarge    = "frame_too_large"
	ReasonMalformedRequest = "malformed_request"
	ReasonUnknownAPIKey    = "unknown_api_key"
	ReasonAuthRequired     = "auth_required"
	ReasonUnexpectedFrame  = "unexpected_frame"
	ReasonTLSRequired      = "tls_required"

	// Authentication, authorisation and admission.
	ReasonInvalidCredentials      = "invalid_credentials"
	ReasonAccountLocked           = "account_locked"
	ReasonRateLimitExceeded       = "rate_limit_exceeded"
	ReasonConnectionLimitExceeded = "connection_limit_exceeded"
	ReasonGlobalLimitExceeded     = "global_limit_exceeded"
	ReasonTooManyRequests         = "too_many_requests"
	ReasonTooManyRecords          = "too_many_records"
	ReasonTooManyMembers          = "too_many_members"
	ReasonQuotaExceeded           = "quota_exceeded"
	ReasonPermissionDenied        = "permission_denied"
	ReasonMTLSAuthDisabled        = "mtls_auth_disabled"
	ReasonMTLSAuthUnavailable     = "mtls_auth_unavailable"
	ReasonNoPeerCertificate       = "no_peer_certificate"
	ReasonOIDCAuthDisabled        = "oidc_auth_disabled"
	ReasonOIDCMisconfigured       = "oidc_misconfigured"
	ReasonNotEnabled              = "not_enabled"
	ReasonInvalidSession          = "invalid_session"
	ReasonSessionExpired          = "session_expired"
	ReasonSessionRevoked          = "session_revoked"

	// Transient conditions of the cluster.
	ReasonRetry               = "retry"
	ReasonTimeout             = "timeout"
	ReasonShuttingDown        = "shutting_down"
	ReasonMigrating           = "migrating"
	ReasonNotOwner            = "not_owner"
	ReasonNoQuorum            = "no_quorum"
	ReasonMetadataUnavailable = "metadata_unavailable"
	ReasonUnreachable         = "unreachable"
	ReasonNotPrimary          = "not_primary"
	ReasonOffsetMismatch      = "offset_mismatch"
	ReasonSegmentExists       = "segment_exists"
	ReasonSealed              = "sealed"
	ReasonSegmentOverlap      = "segment_overlap"
	ReasonActiveSegmentExists = "active_segment_exists"
	ReasonUnknownMember       = "unknown_member"
	ReasonPersistFailed       = "persist_failed"

	// Requests the server refuses as they stand.
	ReasonNoSuchTopic         = "no_such_topic"
	ReasonStaleMember         = "stale_member"
	ReasonNoSuchRange         = "no_such_range"
	ReasonNoSuchSegment       = "no_such_segment"
	ReasonNotFound            = "not_found"
	ReasonAlreadyExists       = "already_exists"
	ReasonInvalidTopicName    = "invalid_topic_name"
	ReasonInvalidKeyspaceBits = "invalid_keyspace_bits"
	ReasonInvalidRangeCount   = "invalid_range_count"
	ReasonInvalidCursor       = "invalid_cursor"
	ReasonInvalidPageToken    = "invalid_page_token"
	ReasonDescribeTooLarge    = "describe_too_large"
	ReasonInvalidRecord       = "invalid_record"
	ReasonInvalidBatch        = "invalid_batch"
	ReasonCannotSplit         = "cannot_split"
	ReasonDifferentTopic      = "different_topic"
	ReasonNotBuddies          = "not_buddies"
	ReasonSegmentActive       = "segment_active"
	ReasonAlreadySealed       = "already_sealed"
	ReasonUserExists          = "user_exists"
	ReasonUserNotFound        = "user_not_found"
	ReasonLastAdmin           = "last_admin"
	ReasonGroupHasMembers     = "group_has_members"
	ReasonInvalidPermissions  = "invalid_permissions"
	ReasonInvalidPassword     = "invalid_password"
	ReasonInvalidOperation    = "invalid_operation"
	ReasonUnknownCommand      = "unknown_command"
	ReasonInvalidCommand      = "invalid_command"
	ReasonUnroutable          = "unroutable"
	ReasonInsufficientDomains = "insufficient_domains"
	ReasonInternalError       = "internal_error"

	// Storage policies and retention.
	ReasonInvalidPolicy   = "invalid_policy"
	ReasonNoSuchPolicy    = "no_such_policy"
	ReasonPolicyInUse     = "policy_in_use"
	ReasonTooManyPolicies = "too_many_policies"
	ReasonSegmentNotFirst = "segment_not_first"
)

// ReasonInfo describes one reason.
type ReasonInfo struct {
	// Retriable means the same request, sent again after a short back-off,
	// may succeed with no change by the client or an operator, and that
	// retrying is safe: at worst it duplicates records, which at-least-once
	// delivery allows.
	Retriable bool
	// Description says when the server sends the reason, for client
	// authors and operators.
	Description string
}

// Reasons is the one table of every reason the server sends. docs/wire.md
// renders the same table for client authors; a test keeps them in step.
var Reasons = map[string]ReasonInfo{
	ReasonFrameTooLarge:    {false, "The frame's length prefix exceeded the server's limit: 16 MiB by default, and 8 KiB until the connection has authenticated. Sent with correlation id 0; the connection is closed."},
	ReasonMalformedRequest: {false, "The request did not decode exactly (short, trailing bytes, bad tag). A body shorter than the request header is answered on correlation id 0. The connection keeps serving."},
	ReasonUnknownAPIKey:    {false, "The server does not know the request's api key."},
	ReasonAuthRequired:     {false, "The first frame of a connection was not auth, mtls_auth or token_auth, or did not arrive in time. The connection is closed."},
	ReasonUnexpectedFrame:  {false, "A frame other than stream_ack arrived on a connection in stream mode. The stream continues."},
	ReasonTLSRequired:      {false, "The port accepts only TLS and the connection did not start a TLS handshake. Sent in the clear with correlation id 0; the connection is closed. Connect with TLS."},

	ReasonInvalidCredentials:      {false, "Unknown user or wrong password (the same answer for both), or a certificate or token that did not verify or names no user. On an authenticated connection: its user was deleted, its password changed, or its certificate or token expired; the connection is closed."},
	ReasonAccountLocked:           {false, "Too many failed logins: the account is locked for a while; wait, or ask an administrator."},
	ReasonRateLimitExceeded:       {true, "Too many failed logins lately from this address or against this user, or too many logins waiting to be checked at once; back off."},
	ReasonConnectionLimitExceeded: {true, "Too many connections from this address. Sent with correlation id 0, then the connection is closed; reconnect after a back-off."},
	ReasonGlobalLimitExceeded:     {true, "The server is at its connection limit. Sent with correlation id 0, then the connection is closed; reconnect after a back-off."},
	ReasonTooManyRequests:         {true, "A per-connection or per-user request limit was hit; back off."},
	ReasonTooManyRecords:          {false, "A produce request carried more records than one request may; split it."},
	ReasonTooManyMembers:          {true, "The consumer group (or the node's group table) is full; retry later or use fewer members."},
	ReasonQuotaExceeded:           {false, "The request would pass a configured limit of the node or of the user (topics, ranges, initial ranges per topic, consumer groups); nothing changed. Delete something, or ask an operator to raise the limit."},
	ReasonPermissionDenied:        {false, "The identity lacks the role or ACL the operation needs."},
	ReasonMTLSAuthDisabled:        {false, "mtls_auth is not enabled on this server."},
	ReasonMTLSAuthUnavailable:     {false, "mtls_auth needs a TLS listener that verifies client certificates; this one does not."},
	ReasonNoPeerCertificate:       {false, "mtls_auth on a connection that presented no client certificate."},
	ReasonOIDCAuthDisabled:        {false, "token_auth is not enabled on this server."},
	ReasonOIDCMisconfigured:       {false, "token_auth is enabled but its issuer or keys are misconfigured."},
	ReasonNotEnabled:              {false, "The operation depends on a feature this server has disabled."},
	ReasonInvalidSession:          {false, "session_auth with a session token this node did not issue: malformed, altered or signed with another cluster's secret. (A token issued over TLS and sent in the clear is refused with tls_required and never resumes again.) Log in with a password (or certificate or JWT) instead."},
	ReasonSessionExpired:          {false, "session_auth with a session token past its expiry (or past the most a login session may be renewed). Log in again; it is not a failed login."},
	ReasonSessionRevoked:          {false, "session_auth with a session token whose user was deleted or whose password changed since it was issued. Log in again with the current password."},

	ReasonRetry:               {true, "A transient condition; retry after a short back-off."},
	ReasonTimeout:             {true, "The server gave up waiting on an internal step (quorum, metadata); the request may or may not have taken effect. Retrying is safe under at-least-once delivery."},
	ReasonShuttingDown:        {true, "The node is draining for shutdown; retry, possibly on another node."},
	ReasonMigrating:           {true, "The topic's metadata is moving between shards; retry after a short back-off."},
	ReasonNotOwner:            {true, "The request reached a node that does not own what it acts on. In a cluster: a split or merge of a range sent to a node other than the one writing it; the message names that node and its client address, where the request succeeds. Otherwise retry after about 200 ms."},
	ReasonNoQuorum:            {true, "Fewer than a quorum of replicas made the write durable in time; no record of the request is visible. Retry."},
	ReasonMetadataUnavailable: {true, "The metadata shard has no leader or is recovering; retry."},
	ReasonUnreachable:         {true, "The node that must serve the request is unreachable; retry after failover."},
	ReasonNotPrimary:          {true, "The request reached a replica that is not the segment's primary (stale view); retry."},
	ReasonOffsetMismatch:      {true, "A replica's offsets disagreed with the primary's (stale view); retry after the heal."},
	ReasonSegmentExists:       {true, "A segment roll raced with another; retry."},
	ReasonSealed:              {false, "The range or segment is sealed: it was split, merged or deleted. Produces re-route inside the broker, so a client sees this only for an operation on a sealed range."},
	ReasonSegmentOverlap:      {true, "A segment roll raced with another; retry."},
	ReasonActiveSegmentExists: {true, "A segment roll raced with another; retry."},
	ReasonUnknownMember:       {true, "The group member was evicted (session timeout or rebalance); retry, which rejoins."},
	ReasonPersistFailed:       {true, "The server could not make the change durable; nothing changed. Retry."},

	ReasonNoSuchTopic:         {false, "The topic does not exist."},
	ReasonStaleMember:         {false, "A member_heartbeat or member_commit from a member that is not in the group, or a commit from before it last joined: it left, was evicted, or the node restarted. Nothing was done; records it did not commit go to the group's current reader. Fetch again as a member to join."},
	ReasonNoSuchRange:         {false, "The range does not exist in the topic."},
	ReasonNoSuchSegment:       {false, "The segment does not exist."},
	ReasonNotFound:            {false, "The named object does not exist."},
	ReasonAlreadyExists:       {false, "A topic with that name already exists."},
	ReasonInvalidTopicName:    {false, "Topic names match [A-Za-z0-9._-]+ and are not \".\" or \"..\"."},
	ReasonInvalidKeyspaceBits: {false, "Keyspace bits must be between 1 and 32."},
	ReasonInvalidRangeCount:   {false, "The initial range count must be a power of two no larger than the keyspace."},
	ReasonInvalidCursor:       {false, "The cursor is forged, truncated, from another topic or too large. Nothing changed; restart from the group or the start."},
	ReasonInvalidPageToken:    {false, "A describe_topic page token the node did not mint, or one from another topic (or from a topic deleted and created again). Nothing changed; describe from the first page."},
	ReasonDescribeTooLarge:    {false, "describe_topic without paging on a topic whose description does not fit one frame. Nothing changed; describe it by pages (version 3 of describe_topic: a page token and a page size)."},
	ReasonInvalidRecord:       {false, "A record is not acceptable (for example, too large)."},
	ReasonInvalidBatch:        {false, "A batch of produce_batches is not acceptable: its framing, CRC, counts, offsets, timestamps or sizes are wrong, its records section does not decompress to its declared length, or it is over a limit api_versions reports. Nothing of the request was stored."},
	ReasonCannotSplit:         {false, "The range cannot be split (it is a single keyspace position, or not active)."},
	ReasonDifferentTopic:      {false, "The ranges to merge belong to different topics."},
	ReasonNotBuddies:          {false, "The ranges to merge are not two active halves of one block."},
	ReasonSegmentActive:       {false, "The segment is still active."},
	ReasonAlreadySealed:       {false, "The segment is already sealed."},
	ReasonUserExists:          {false, "A user with that name already exists."},
	ReasonUserNotFound:        {false, "The user does not exist."},
	ReasonLastAdmin:           {false, "The user is the only one with the admin permission; deleting it would leave the node without an administrator. Create or promote another admin first, or reset a password offline on a stopped node (malachi admin reset-password)."},
	ReasonGroupHasMembers:     {false, "The consumer group has live members on the topic; stop them (or wait for their session to expire) and try again."},
	ReasonInvalidPermissions:  {false, "Permissions are \"admin\", \"produce\" or \"consume\"."},
	ReasonInvalidPassword:     {false, "A new password must be 1 to 1024 bytes."},
	ReasonInvalidOperation:    {false, "ACL operations are \"produce\" or \"consume\"."},
	ReasonUnknownCommand:      {false, "The control plane does not know the command (a node older than the cluster)."},
	ReasonInvalidCommand:      {false, "The control plane rejected the command's fields."},
	ReasonUnroutable:          {false, "No active range covers the record's key. A server bug; report it."},
	ReasonInsufficientDomains: {false, "Placement cannot satisfy the topic's failure-domain constraints; an operator must add capacity or relax them."},
	ReasonInternalError:       {false, "An unexpected server error; the request may or may not have taken effect."},

	ReasonInvalidPolicy:   {false, "A policy definition is not acceptable: an unknown field name, a value of the wrong kind, a negative or out-of-range bound, off for replicas, min_domains or placement, a field named twice, more than 32 fields, or a name that is not a valid name. Nothing changed."},
	ReasonNoSuchPolicy:    {false, "No policy of that name is defined (delete_policy, or binding a topic to an undefined name)."},
	ReasonPolicyInUse:     {false, "delete_policy without force of a policy still bound to a topic. Unbind the topics, or delete with force: bound topics then expire nothing until bound again."},
	ReasonTooManyPolicies: {false, "The cluster already holds the most policies it may (1,024); delete one first."},
	ReasonSegmentNotFirst: {false, "A deletion by retention or TTL named a segment that is not the first sealed segment of its range: retention removes data only from the front. Nothing changed; the next sweep sees the current segments."},
}

// IsRetriable reports whether a client should retry a request that failed
// with reason. Unknown reasons are not retriable.
func IsRetriable(reason string) bool { return Reasons[reason].Retriable }
