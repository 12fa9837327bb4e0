package wire

import "fmt"

// API keys. Keys 0–16 are wire v1 and frozen byte for byte; 17–21 are the
// storage policy keys, numbered as the original protocol numbers them;
// 22–63 are reserved; 64 and up are this broker's own, laid out in
// docs/wire.md.
const (
	KeyAuth           uint16 = 0
	KeyCreateTopic    uint16 = 1
	KeyProduce        uint16 = 2
	KeyFetch          uint16 = 3
	KeyCommit         uint16 = 4
	KeySubscribe      uint16 = 5
	KeyStreamAck      uint16 = 6
	KeyLeaveGroup     uint16 = 7
	KeyCreateUser     uint16 = 8
	KeyDeleteUser     uint16 = 9
	KeyChangePassword uint16 = 10
	KeyListUsers      uint16 = 11
	KeyMTLSAuth       uint16 = 12
	KeyTokenAuth      uint16 = 13
	KeyGrantACL       uint16 = 14
	KeyRevokeACL      uint16 = 15
	KeyListACLs       uint16 = 16

	KeyDefinePolicy    uint16 = 17
	KeyDeletePolicy    uint16 = 18
	KeyListPolicies    uint16 = 19
	KeyBindTopicPolicy uint16 = 20
	KeyGetTopicPolicy  uint16 = 21

	KeyListTopics    uint16 = 64
	KeyDescribeTopic uint16 = 65
	KeyDeleteTopic   uint16 = 66
	KeyCreateTopicEx uint16 = 67
	KeySplitRange    uint16 = 68
	KeyMergeRanges   uint16 = 69
	KeyDescribeGroup uint16 = 70
	KeyListGroups    uint16 = 71
	KeyStatus        uint16 = 72
	KeyEndCursor     uint16 = 73

	KeyCursorAtTime         uint16 = 74
	KeyGroupSeek            uint16 = 75
	KeyGroupDelete          uint16 = 76
	KeyDescribeGroupMembers uint16 = 77
	KeyCursorFromEnd        uint16 = 78

	KeyAPIVersions      uint16 = 79
	KeyTopicRoutes      uint16 = 80
	KeyProduceBatches   uint16 = 81
	KeyFetchBatches     uint16 = 82
	KeySubscribeBatches uint16 = 83
	KeySessionAuth      uint16 = 84

	KeyMemberHeartbeat uint16 = 85
	KeyMemberCommit    uint16 = 86

	KeyClusterStatus uint16 = 87
	KeyClusterRemove uint16 = 88
	// KeyClusterRebalance shows or commits the metadata groups' rebalance.
	KeyClusterRebalance uint16 = 89
)

var keyNames = map[uint16]string{
	KeyAuth: "auth", KeyCreateTopic: "create_topic", KeyProduce: "produce", KeyFetch: "fetch",
	KeyCommit: "commit", KeySubscribe: "subscribe", KeyStreamAck: "stream_ack",
	KeyLeaveGroup: "leave_group", KeyCreateUser: "create_user", KeyDeleteUser: "delete_user",
	KeyChangePassword: "change_password", KeyListUsers: "list_users", KeyMTLSAuth: "mtls_auth",
	KeyTokenAuth: "token_auth", KeyGrantACL: "grant_acl", KeyRevokeACL: "revoke_acl",
	KeyListACLs:     "list_acls",
	KeyDefinePolicy: "define_policy", KeyDeletePolicy: "delete_policy", KeyListPolicies: "list_policies",
	KeyBindTopicPolicy: "bind_topic_policy", KeyGetTopicPolicy: "get_topic_policy",
	KeyListTopics: "list_topics", KeyDescribeTopic: "describe_topic", KeyDeleteTopic: "delete_topic",
	KeyCreateTopicEx: "create_topic_ex", KeySplitRange: "split_range", KeyMergeRanges: "merge_ranges",
	KeyDescribeGroup: "describe_group", KeyListGroups: "list_groups", KeyStatus: "status", KeyEndCursor: "end_cursor",
	KeyCursorAtTime: "cursor_at_time", KeyGroupSeek: "group_seek", KeyGroupDelete: "group_delete",
	KeyDescribeGroupMembers: "describe_group_members", KeyCursorFromEnd: "cursor_from_end",
	KeyAPIVersions: "api_versions", KeyTopicRoutes: "topic_routes", KeyProduceBatches: "produce_batches",
	KeyFetchBatches: "fetch_batches", KeySubscribeBatches: "subscribe_batches", KeySessionAuth: "session_auth",
	KeyMemberHeartbeat: "member_heartbeat", KeyMemberCommit: "member_commit",
	KeyClusterStatus: "cluster_status", KeyClusterRemove: "cluster_remove",
	KeyClusterRebalance: "cluster_rebalance",
}

// KeyName returns the snake_case name of an api key ("produce"), or
// "key_<n>" for a key this package does not know. Suitable for logs and
// metric labels.
func KeyName(key uint16) string {
	if name, ok := keyNames[key]; ok {
		return name
	}
	return fmt.Sprintf("key_%d", key)
}

// Request is a request payload. Every request type implements it with
// value receivers (so both T and *T are Requests) and also has a pointer
// method Decode(payload []byte) error that decodes exactly.
type Request interface {
	// APIKey returns the key that identifies the payload's shape.
	APIKey() uint16
	// AppendPayload appends the payload (without frame or header) to dst.
	AppendPayload(dst []byte) []byte
}

// requestDecoder is what DecodeRequest needs from a request type.
type requestDecoder interface {
	Request
	Decode(payload []byte) error
}

// newRequest returns a zero request of key's type, or nil.
func newRequest(key uint16) requestDecoder {
	switch key {
	case KeyAuth:
		return new(AuthRequest)
	case KeyCreateTopic:
		return new(CreateTopicRequest)
	case KeyProduce:
		return new(ProduceRequest)
	case KeyFetch:
		return new(FetchRequest)
	case KeyCommit:
		return new(CommitRequest)
	case KeySubscribe:
		return new(SubscribeRequest)
	case KeyStreamAck:
		return new(StreamAckRequest)
	case KeyLeaveGroup:
		return new(LeaveGroupRequest)
	case KeyCreateUser:
		return new(CreateUserRequest)
	case KeyDeleteUser:
		return new(DeleteUserRequest)
	case KeyChangePassword:
		return new(ChangePasswordRequest)
	case KeyListUsers:
		return new(ListUsersRequest)
	case KeyMTLSAuth:
		return new(MTLSAuthRequest)
	case KeyTokenAuth:
		return new(TokenAuthRequest)
	case KeyGrantACL:
		return new(GrantACLRequest)
	case KeyRevokeACL:
		return new(RevokeACLRequest)
	case KeyListACLs:
		return new(ListACLsRequest)
	}
	return newPolicyRequest(key)
}

// DecodeRequest decodes the payload of a request with the given api key.
// It returns a pointer to the key's request type (*ProduceRequest for
// KeyProduce, and so on). An unknown key returns an error wrapping
// ErrUnknownAPIKey; a payload that does not decode exactly, one wrapping
// ErrMalformed. Byte slices in the result alias payload.
func DecodeRequest(key uint16, payload []byte) (Request, error) {
	req := newRequest(key)
	if req == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownAPIKey, key)
	}
	if err := req.Decode(payload); err != nil {
		return nil, err
	}
	return req, nil
}

// AuthRequest (key 0) authenticates with a password: str(user) str(password).
type AuthRequest struct{ User, Password *string }

func (AuthRequest) APIKey() uint16 { return KeyAuth }

func (r AuthRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(dst, r.User), r.Password)
}

func (r *AuthRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = AuthRequest{User: d.nstr(), Password: d.nstr()}
	return d.finish("auth")
}

// CreateTopicRequest (key 1): str(topic) keyspace_bits:u8.
type CreateTopicRequest struct {
	Topic *string
	Bits  uint8
}

func (CreateTopicRequest) APIKey() uint16 { return KeyCreateTopic }

func (r CreateTopicRequest) AppendPayload(dst []byte) []byte {
	return appendU8(appendNStr(dst, r.Topic), r.Bits)
}

func (r *CreateTopicRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CreateTopicRequest{Topic: d.nstr(), Bits: d.u8()}
	return d.finish("create_topic")
}

// ProduceRequest (key 2): str(topic) list(record).
type ProduceRequest struct {
	Topic   *string
	Records []Record
}

func (ProduceRequest) APIKey() uint16 { return KeyProduce }

func (r ProduceRequest) AppendPayload(dst []byte) []byte {
	return AppendRecords(appendNStr(dst, r.Topic), r.Records)
}

// Decode decodes a produce payload. It reuses the capacity of r.Records,
// so a connection can decode into one ProduceRequest again and again; the
// records' byte slices alias payload.
func (r *ProduceRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	r.Topic = d.nstr()
	r.Records = d.records(r.Records)
	return d.finish("produce")
}

// FetchRequest (key 3):
// str(topic) str(cursor) str(group) str(member) max:u32 wait_ms:u32.
type FetchRequest struct {
	Topic, Cursor, Group, Member *string
	Max, WaitMs                  uint32
}

func (FetchRequest) APIKey() uint16 { return KeyFetch }

func (r FetchRequest) AppendPayload(dst []byte) []byte {
	dst = appendNStr(appendNStr(dst, r.Topic), r.Cursor)
	dst = appendNStr(appendNStr(dst, r.Group), r.Member)
	return appendU32(appendU32(dst, r.Max), r.WaitMs)
}

func (r *FetchRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = FetchRequest{
		Topic: d.nstr(), Cursor: d.nstr(), Group: d.nstr(), Member: d.nstr(),
		Max: d.u32(), WaitMs: d.u32(),
	}
	return d.finish("fetch")
}

// CommitRequest (key 4): str(topic) str(group) str(cursor).
type CommitRequest struct{ Topic, Group, Cursor *string }

func (CommitRequest) APIKey() uint16 { return KeyCommit }

func (r CommitRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Cursor)
}

func (r *CommitRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CommitRequest{Topic: d.nstr(), Group: d.nstr(), Cursor: d.nstr()}
	return d.finish("commit")
}

// SubscribeRequest (key 5): str(topic) str(group) str(member) window:u32
// max:u32. It has no reply; pushes shaped like FetchResponse follow on its
// correlation id.
type SubscribeRequest struct {
	Topic, Group, Member *string
	Window, Max          uint32
}

func (SubscribeRequest) APIKey() uint16 { return KeySubscribe }

func (r SubscribeRequest) AppendPayload(dst []byte) []byte {
	dst = appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Member)
	return appendU32(appendU32(dst, r.Window), r.Max)
}

func (r *SubscribeRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = SubscribeRequest{
		Topic: d.nstr(), Group: d.nstr(), Member: d.nstr(),
		Window: d.u32(), Max: d.u32(),
	}
	return d.finish("subscribe")
}

// StreamAckRequest (key 6): str(topic) str(group) str(member) str(cursor)
// count:u32. Fire and forget; a nil cursor with count 0 is a heartbeat.
type StreamAckRequest struct {
	Topic, Group, Member, Cursor *string
	Count                        uint32
}

func (StreamAckRequest) APIKey() uint16 { return KeyStreamAck }

func (r StreamAckRequest) AppendPayload(dst []byte) []byte {
	dst = appendNStr(appendNStr(dst, r.Topic), r.Group)
	dst = appendNStr(appendNStr(dst, r.Member), r.Cursor)
	return appendU32(dst, r.Count)
}

func (r *StreamAckRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = StreamAckRequest{
		Topic: d.nstr(), Group: d.nstr(), Member: d.nstr(), Cursor: d.nstr(),
		Count: d.u32(),
	}
	return d.finish("stream_ack")
}

// LeaveGroupRequest (key 7): str(topic) str(group) str(member).
type LeaveGroupRequest struct{ Topic, Group, Member *string }

func (LeaveGroupRequest) APIKey() uint16 { return KeyLeaveGroup }

func (r LeaveGroupRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.Topic), r.Group), r.Member)
}

func (r *LeaveGroupRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = LeaveGroupRequest{Topic: d.nstr(), Group: d.nstr(), Member: d.nstr()}
	return d.finish("leave_group")
}

// CreateUserRequest (key 8): str(user) str(password) list(str perm).
type CreateUserRequest struct {
	User, Password *string
	Perms          []*string
}

func (CreateUserRequest) APIKey() uint16 { return KeyCreateUser }

func (r CreateUserRequest) AppendPayload(dst []byte) []byte {
	return appendNStrs(appendNStr(appendNStr(dst, r.User), r.Password), r.Perms)
}

func (r *CreateUserRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CreateUserRequest{User: d.nstr(), Password: d.nstr(), Perms: d.nstrs()}
	return d.finish("create_user")
}

// DeleteUserRequest (key 9): str(user).
type DeleteUserRequest struct{ User *string }

func (DeleteUserRequest) APIKey() uint16 { return KeyDeleteUser }

func (r DeleteUserRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.User) }

func (r *DeleteUserRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = DeleteUserRequest{User: d.nstr()}
	return d.finish("delete_user")
}

// ChangePasswordRequest (key 10): str(user) str(new_password).
type ChangePasswordRequest struct{ User, NewPassword *string }

func (ChangePasswordRequest) APIKey() uint16 { return KeyChangePassword }

func (r ChangePasswordRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(dst, r.User), r.NewPassword)
}

func (r *ChangePasswordRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ChangePasswordRequest{User: d.nstr(), NewPassword: d.nstr()}
	return d.finish("change_password")
}

// ListUsersRequest (key 11) has an empty payload.
type ListUsersRequest struct{}

func (ListUsersRequest) APIKey() uint16                  { return KeyListUsers }
func (ListUsersRequest) AppendPayload(dst []byte) []byte { return dst }
func (*ListUsersRequest) Decode(payload []byte) error    { return decodeEmpty(payload, "list_users") }

// MTLSAuthRequest (key 12) has an empty payload: the identity comes from
// the verified client certificate.
type MTLSAuthRequest struct{}

func (MTLSAuthRequest) APIKey() uint16                  { return KeyMTLSAuth }
func (MTLSAuthRequest) AppendPayload(dst []byte) []byte { return dst }
func (*MTLSAuthRequest) Decode(payload []byte) error    { return decodeEmpty(payload, "mtls_auth") }

// TokenAuthRequest (key 13): str(jwt).
type TokenAuthRequest struct{ JWT *string }

func (TokenAuthRequest) APIKey() uint16 { return KeyTokenAuth }

func (r TokenAuthRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.JWT) }

func (r *TokenAuthRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = TokenAuthRequest{JWT: d.nstr()}
	return d.finish("token_auth")
}

// GrantACLRequest (key 14): str(user) str(operation) str(pattern).
type GrantACLRequest struct{ User, Operation, Pattern *string }

func (GrantACLRequest) APIKey() uint16 { return KeyGrantACL }

func (r GrantACLRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.User), r.Operation), r.Pattern)
}

func (r *GrantACLRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = GrantACLRequest{User: d.nstr(), Operation: d.nstr(), Pattern: d.nstr()}
	return d.finish("grant_acl")
}

// RevokeACLRequest (key 15) has the layout of GrantACLRequest.
type RevokeACLRequest struct{ User, Operation, Pattern *string }

func (RevokeACLRequest) APIKey() uint16 { return KeyRevokeACL }

func (r RevokeACLRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.User), r.Operation), r.Pattern)
}

func (r *RevokeACLRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = RevokeACLRequest{User: d.nstr(), Operation: d.nstr(), Pattern: d.nstr()}
	return d.finish("revoke_acl")
}

// ListACLsRequest (key 16): str(user).
type ListACLsRequest struct{ User *string }

func (ListACLsRequest) APIKey() uint16 { return KeyListACLs }

func (r ListACLsRequest) AppendPayload(dst []byte) []byte { return appendNStr(dst, r.User) }

func (r *ListACLsRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListACLsRequest{User: d.nstr()}
	return d.finish("list_acls")
}

// decodeEmpty accepts only an empty payload.
func decodeEmpty(payload []byte, what string) error {
	d := decoder{b: payload}
	return d.finish(what)
}
