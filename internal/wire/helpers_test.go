// Shared fixtures: one hand-written example of every request and response
// type, chosen to exercise absent and empty strs, empty and non-empty
// lists, and large integers. The bad-input and fuzz tests start from them.
package wire

import "math"

// responseDecoder is what the tests need from a response type.
type responseDecoder interface {
	Response
	Decode(payload []byte) error
}

// allKeys lists every api key the package knows.
var allKeys = []uint16{
	KeyAuth, KeyCreateTopic, KeyProduce, KeyFetch, KeyCommit, KeySubscribe, KeyStreamAck,
	KeyLeaveGroup, KeyCreateUser, KeyDeleteUser, KeyChangePassword, KeyListUsers, KeyMTLSAuth,
	KeyTokenAuth, KeyGrantACL, KeyRevokeACL, KeyListACLs,
	KeyDefinePolicy, KeyDeletePolicy, KeyListPolicies, KeyBindTopicPolicy, KeyGetTopicPolicy,
	KeyListTopics, KeyDescribeTopic, KeyDeleteTopic, KeyCreateTopicEx, KeySplitRange,
	KeyMergeRanges, KeyDescribeGroup, KeyListGroups, KeyStatus, KeyEndCursor,
	KeyCursorAtTime, KeyGroupSeek, KeyGroupDelete, KeyDescribeGroupMembers, KeyCursorFromEnd,
	KeyAPIVersions, KeyTopicRoutes, KeyProduceBatches, KeyFetchBatches, KeySubscribeBatches,
	KeySessionAuth, KeyMemberHeartbeat, KeyMemberCommit,
	KeyClusterStatus, KeyClusterRemove, KeyClusterRebalance,
}

// sampleBatch stands for a storage batch: the wire carries it as opaque
// bytes, at least a batch header (56 bytes) long.
var sampleBatch = append([]byte{0x4d, 1}, make([]byte, 58)...)

func sampleRecords() []Record {
	return []Record{
		{Key: []byte("user-42"), Value: []byte("hello"), Timestamp: 1700000000123,
			Headers: []Header{{Key: []byte("source"), Value: []byte("api")}, {Key: []byte{}, Value: nil}}},
		{Key: nil, Value: []byte{}, Timestamp: math.MaxUint64},
		{Key: []byte{}, Value: []byte{0, 1, 2}, Timestamp: 0, Headers: []Header{{Key: nil, Value: []byte{}}}},
	}
}

// sampleRequests returns one example per api key, in allKeys order.
func sampleRequests() []Request {
	return []Request{
		&AuthRequest{User: new("admin"), Password: new("")},
		&CreateTopicRequest{Topic: new("orders"), Bits: 16},
		&ProduceRequest{Topic: new("orders"), Records: sampleRecords()},
		&FetchRequest{Topic: new("orders"), Cursor: nil, Group: new("g"), Member: new(""), Max: 500, WaitMs: 30000},
		&CommitRequest{Topic: new("orders"), Group: new("g"), Cursor: new("Q1VSU09S")},
		&SubscribeRequest{Topic: new("orders"), Group: new("g"), Member: nil, Window: 100, Max: 50},
		&StreamAckRequest{Topic: new("orders"), Group: new("g"), Member: new("m1"), Cursor: nil, Count: 0},
		&LeaveGroupRequest{Topic: new("orders"), Group: new("g"), Member: new("m1")},
		&CreateUserRequest{User: new("alice"), Password: new("pw"), Perms: []*string{new("produce"), nil, new("")}},
		&DeleteUserRequest{User: new("alice")},
		&ChangePasswordRequest{User: new("alice"), NewPassword: new("pw2")},
		&ListUsersRequest{},
		&MTLSAuthRequest{},
		&TokenAuthRequest{JWT: new("eyJ.x.y")},
		&GrantACLRequest{User: new("alice"), Operation: new("consume"), Pattern: new("orders.*")},
		&RevokeACLRequest{User: new("alice"), Operation: nil, Pattern: new("")},
		&ListACLsRequest{User: nil},
		&DefinePolicyRequest{Name: "short", Fields: samplePolicyFields()},
		&DeletePolicyRequest{Name: "short", Force: true},
		&ListPoliciesRequest{},
		&BindTopicPolicyRequest{Topic: "orders", Policy: new("short")},
		&GetTopicPolicyRequest{Topic: "orders"},
		&ListTopicsRequest{},
		&DescribeTopicRequest{Topic: new("orders")},
		&DeleteTopicRequest{Topic: new("")},
		&CreateTopicExRequest{Topic: new("orders"), Bits: 20, Ranges: 8},
		&SplitRangeRequest{Topic: new("orders"), Range: 0},
		&MergeRangesRequest{Topic: new("orders"), A: 7, B: math.MaxUint64},
		&DescribeGroupRequest{Topic: new("orders"), Group: nil},
		&ListGroupsRequest{Topic: new("orders")},
		&StatusRequest{},
		&EndCursorRequest{Topic: new("orders")},
		&CursorAtTimeRequest{Topic: new("orders"), TimeMs: 1_700_000_000_000},
		&GroupSeekRequest{Topic: new("orders"), Group: new("g"), Cursor: new("Q1VSU09S")},
		&GroupDeleteRequest{Topic: new("orders"), Group: new("g")},
		&DescribeGroupMembersRequest{Topic: new("orders"), Group: new("g")},
		&CursorFromEndRequest{Topic: new("orders"), N: 10},
		&APIVersionsRequest{},
		&TopicRoutesRequest{Topic: new("orders")},
		&ProduceBatchesRequest{Topic: new("orders"), Batches: []RangeBatch{{Range: 3, Batch: sampleBatch}, {Range: 4, Batch: sampleBatch[:56]}}},
		&FetchBatchesRequest{Topic: new("orders"), Group: new("g"), Member: new("m1"), MaxBytes: 1 << 20, MaxRecords: 0, WaitMs: 500},
		&SubscribeBatchesRequest{Topic: new("orders"), Group: new("g"), Member: nil, Window: 10000, MaxBytes: 0},
		&SessionAuthRequest{Token: new("dG9r"), User: nil, Password: new("")},
		&MemberHeartbeatRequest{Topic: new("orders"), Group: new("g"), Member: new("m1")},
		&MemberCommitRequest{Topic: new("orders"), Group: new("g"), Member: new("m1"), Generation: math.MaxUint64, Cursor: nil},
		&ClusterStatusRequest{},
		&ClusterRemoveRequest{Node: 3},
		&ClusterRebalanceRequest{Apply: true},
	}
}

// sampleResponses returns one example of every response type.
func sampleResponses() []responseDecoder {
	return []responseDecoder{
		&EmptyResponse{},
		&CursorResponse{Cursor: new("Q1VSU09S")},
		&TokenResponse{Token: "c2Vzc2lvbi10b2tlbg"},
		&CountResponse{Count: 3},
		&FetchResponse{Records: sampleRecords(), NextCursor: new("Q1VSU09S")},
		&ListPoliciesResponse{Policies: []PolicyInfo{
			{Name: "short", DefinedAt: 1_700_000_000_000, Fields: samplePolicyFields()},
			{Name: "", DefinedAt: math.MaxUint64},
		}},
		&GetTopicPolicyResponse{Topic: "orders", Policy: new("short"), Resolution: "resolved",
			Definition: samplePolicyFields(), Effective: []EffectiveField{
				{Name: "max_age_ms", Value: PolicyValue{Int: 60000}, Origin: "policy"},
				{Name: "max_bytes", Value: PolicyValue{Off: true}, Origin: "global"},
				{Name: "spread_by", Value: PolicyValue{Str: "zone", IsStr: true}, Origin: "global"},
			}},
		&ListUsersResponse{Users: []UserEntry{{User: "alice", Perms: []string{"produce", ""}}, {User: "", Perms: nil}}},
		&ListACLsResponse{ACLs: []ACLEntry{{Operation: "consume", Resource: "orders.*"}}},
		&ListTopicsResponse{Topics: []TopicSummary{{Name: "orders", Bits: 16, ActiveRanges: 2, Ranges: 3, Segments: 4, Records: 5, Bytes: 6}}},
		&DescribeTopicResponse{ID: 1, Name: "orders", Bits: 16, CreatedAt: 1700000000000,
			Ranges: []RangeInfo{
				{ID: 1, Start: 0, End: 1 << 16, Active: false, CreatedAt: 1, SealedAt: 2,
					Segments: []SegmentInfo{{ID: 9, Active: false, Base: 0, End: 10, Records: 10, Bytes: 999,
						Replicas: []string{"n1", "n2", "n3"}, OpenedAt: 1, SealedAt: 2, MaxExpiry: 0}}},
				{ID: 2, Start: 0, End: 1 << 15, Active: true, Parents: []uint64{1}, CreatedAt: 2},
			},
			Groups: []string{"g", ""}},
		&SplitRangeResponse{Children: []uint64{2, 3}},
		&MergeRangesResponse{Child: 4},
		&DescribeGroupResponse{Group: "g", Cursor: nil, Lag: 12, Ranges: []RangeLag{{Range: 2, Lag: 5}, {Range: 3, Lag: 7}}},
		&DescribeGroupMembersResponse{Generation: 3, Members: []GroupMember{
			{Member: "m1", LastSeenMs: 1_700_000_000_000, Ranges: []uint64{2}},
			{Member: "m2", LastSeenMs: 1_700_000_000_500, Ranges: []uint64{3, 4}},
		}},
		&ListGroupsResponse{Groups: []string{"a", "b"}},
		&StatusResponse{NodeID: "n1", Version: "0.1.0", DataDir: "/var/lib/malachi", UptimeMs: 1234, Topics: 2, Records: 3, Bytes: 4},
		&APIVersionsResponse{Keys: []KeyVersion{{Key: 0, Min: 1, Max: 1}, {Key: 81, Min: 1, Max: 2}}, MaxFrame: 16 << 20,
			MaxBatchBytes: 1 << 20, MaxBatchRecords: 65536, NodeVersion: "0.2.0"},
		&TopicRoutesResponse{Bits: 16, Ranges: []RouteRange{{Range: 2, Start: 0, End: 1 << 15}, {Range: 3, Start: 1 << 15, End: 1 << 16}}},
		&ProduceBatchesResponse{Count: 1000, Rerouted: 1},
		&FetchBatchesResponse{NextCursor: new("Q1VSU09S"), Batches: []RangeBatch{{Range: 2, Batch: sampleBatch}}},
		&SessionAuthResponse{Token: "dG9r", ExpiresMs: 1700000000000, Resumed: true},
		&MemberStateResponse{Generation: 7, Ranges: 2, Members: 3},
		&ClusterStatusResponse{Node: 1, Vnodes: 8,
			Nodes: []ClusterNode{
				{ID: 1, Registered: true, Liveness: "alive", PeerAddr: "10.0.0.1:4042", GossipAddr: "10.0.0.1:4043",
					ClientAddr: "10.0.0.1:4040", HTTPAddr: "", Attrs: []ClusterAttr{{Key: "rack", Value: "a"}, {Key: "zone", Value: ""}}},
				{ID: math.MaxUint64, Registered: false, Liveness: "unknown"},
			},
			Groups: []ClusterGroup{
				{Group: 1, Name: "root", State: "StateLeader", Leader: 1, Term: 2, Commit: 30, Applied: 30, Voters: []uint64{1, 2, 3}, Placed: []uint64{1, 2, 3}},
				{Group: 2, Name: "vnode-0", State: "StateFollower", Leader: 0, Learners: []uint64{4}},
			},
			Peers: []ClusterPeer{
				{Node: 2, Connected: true, Writes: 10, FramesSent: 30, BytesSent: 4096, FramesReceived: 29, BytesReceived: math.MaxUint64},
				{Node: 3},
			}},
		&ClusterRebalanceResponse{Applied: true,
			Nodes: []RebalanceNode{{ID: 1, Live: true, Voter: 9, VoterAfter: 6, Leads: 9, LeadsAfter: 2}, {ID: 5, Voter: 1, LeadsAfter: math.MaxUint32}},
			Groups: []RebalanceGroup{
				{Group: 2, Name: "vnode-0", Voters: []uint64{1, 2, 3}, Target: []uint64{1, 4, 5}, Add: []uint64{4, 5}, Remove: []uint64{2, 3}, Leader: 1, NewLeader: 4},
				{Group: 3, Name: "vnode-1", Voters: []uint64{1, 2, 3}, Target: []uint64{1, 2, 3}, Leader: 1, Held: "voters [1 2 3] would have no live quorum"},
			}},
	}
}

// samplePolicyFields has a value of every kind, an empty string and the
// extremes of a bound.
func samplePolicyFields() []PolicyField {
	return []PolicyField{
		{Name: "max_age_ms", Value: PolicyValue{Int: 60000}},
		{Name: "max_bytes", Value: PolicyValue{Off: true}},
		{Name: "max_records", Value: PolicyValue{Int: 0}},
		{Name: "segment_max_bytes", Value: PolicyValue{Int: math.MaxInt64}},
		{Name: "default_ttl_ms", Value: PolicyValue{Int: math.MinInt64}},
		{Name: "spread_by", Value: PolicyValue{Str: "zone", IsStr: true}},
		{Name: "placement", Value: PolicyValue{Str: "", IsStr: true}},
	}
}

// extendedRequests are requests in the layouts that grew optional
// trailing fields, with those fields present. They are kept out of
// sampleRequests because a payload cut just before its optional fields is
// a valid shorter request.
func extendedRequests() []Request {
	return []Request{
		&CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Replicas: 3, Policy: "short"},
		&CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Policy: "short"},
		&DescribeGroupRequest{Topic: new("orders"), Group: new("g"), Flags: FlagSkips},
		&FetchBatchesRequest{Topic: new("orders"), Group: new("g"), MaxBytes: 1 << 20, Flags: FlagSkips},
		&SubscribeBatchesRequest{Topic: new("orders"), Group: new("g"), Window: 100, Flags: FlagSkips},
		&BindTopicPolicyRequest{Topic: "orders", Policy: nil},
		&DescribeTopicRequest{Topic: new("orders"), Flags: FlagCopies},
		&ClusterStatusRequest{Flags: FlagRepair},
	}
}

// extendedResponses are answers with their optional skip report.
func extendedResponses() []responseDecoder {
	return []responseDecoder{
		&DescribeGroupResponse{Group: "g", Lag: 1, Skips: Skips{Asked: true, Count: 42, Bound: true}},
		&FetchBatchesResponse{NextCursor: new("Q1VSU09S"), Batches: []RangeBatch{{Range: 2, Batch: sampleBatch}},
			Skips: Skips{Asked: true, Count: math.MaxUint64}},
		&FetchBatchesResponse{NextCursor: new("Q1VSU09S"), Skips: Skips{Asked: true}},
	}
}
