// Round-trip properties: for random values of every request and response
// type, decode(encode(x)) == x, with nil and empty strings, byte slices
// and lists drawn separately so the nil/empty distinction is exercised.
// Requests also go through a whole frame: AppendRequestFrame, ReadFrame
// and ParseRequestHeader. Generators never draw a nil record Value (the
// wire cannot carry one); TestNilValueEncodesEmpty covers that case.
package wire

import (
	"bytes"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

var (
	genNStr   = rapid.Ptr(rapid.String(), true)
	genString = rapid.String()
	genU8     = rapid.Uint8()
	genU32    = rapid.Uint32()
	genU64    = rapid.Uint64()
	genBool   = rapid.Bool()
)

// genBytes draws a nullable byte string: nil, empty or not.
var genBytes = rapid.Custom(func(t *rapid.T) []byte {
	if rapid.Bool().Draw(t, "absent") {
		return nil
	}
	return nonNil(rapid.SliceOfN(rapid.Byte(), 0, 16).Draw(t, "bytes"))
})

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// listOf draws up to max items; an empty list is nil, as decoders return.
func listOf[E any](t *rapid.T, label string, gen *rapid.Generator[E]) []E {
	list := rapid.SliceOfN(gen, 0, 4).Draw(t, label)
	if len(list) == 0 {
		return nil
	}
	return list
}

var genRecord = rapid.Custom(func(t *rapid.T) Record {
	return Record{
		Key:       genBytes.Draw(t, "key"),
		Value:     nonNil(rapid.SliceOfN(rapid.Byte(), 0, 32).Draw(t, "value")),
		Timestamp: genU64.Draw(t, "timestamp"),
		Headers: listOf(t, "headers", rapid.Custom(func(t *rapid.T) Header {
			return Header{Key: genBytes.Draw(t, "hkey"), Value: genBytes.Draw(t, "hvalue")}
		})),
	}
})

// requestGens has a generator for every api key.
var requestGens = map[uint16]*rapid.Generator[Request]{
	KeyAuth: req(func(t *rapid.T) Request {
		return &AuthRequest{User: genNStr.Draw(t, "user"), Password: genNStr.Draw(t, "password")}
	}),
	KeyCreateTopic: req(func(t *rapid.T) Request {
		return &CreateTopicRequest{Topic: genNStr.Draw(t, "topic"), Bits: genU8.Draw(t, "bits")}
	}),
	KeyProduce: req(func(t *rapid.T) Request {
		return &ProduceRequest{Topic: genNStr.Draw(t, "topic"), Records: listOf(t, "records", genRecord)}
	}),
	KeyFetch: req(func(t *rapid.T) Request {
		return &FetchRequest{
			Topic: genNStr.Draw(t, "topic"), Cursor: genNStr.Draw(t, "cursor"),
			Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member"),
			Max: genU32.Draw(t, "max"), WaitMs: genU32.Draw(t, "wait"),
		}
	}),
	KeyCommit: req(func(t *rapid.T) Request {
		return &CommitRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Cursor: genNStr.Draw(t, "cursor")}
	}),
	KeySubscribe: req(func(t *rapid.T) Request {
		return &SubscribeRequest{
			Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member"),
			Window: genU32.Draw(t, "window"), Max: genU32.Draw(t, "max"),
		}
	}),
	KeyStreamAck: req(func(t *rapid.T) Request {
		return &StreamAckRequest{
			Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member"),
			Cursor: genNStr.Draw(t, "cursor"), Count: genU32.Draw(t, "count"),
		}
	}),
	KeyLeaveGroup: req(func(t *rapid.T) Request {
		return &LeaveGroupRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member")}
	}),
	KeyCreateUser: req(func(t *rapid.T) Request {
		return &CreateUserRequest{User: genNStr.Draw(t, "user"), Password: genNStr.Draw(t, "password"), Perms: listOf(t, "perms", genNStr)}
	}),
	KeyDeleteUser: req(func(t *rapid.T) Request { return &DeleteUserRequest{User: genNStr.Draw(t, "user")} }),
	KeyChangePassword: req(func(t *rapid.T) Request {
		return &ChangePasswordRequest{User: genNStr.Draw(t, "user"), NewPassword: genNStr.Draw(t, "password")}
	}),
	KeyListUsers: rapid.Just[Request](&ListUsersRequest{}),
	KeyMTLSAuth:  rapid.Just[Request](&MTLSAuthRequest{}),
	KeyTokenAuth: req(func(t *rapid.T) Request { return &TokenAuthRequest{JWT: genNStr.Draw(t, "jwt")} }),
	KeyGrantACL:  req(func(t *rapid.T) Request { g := genACL(t); return (*GrantACLRequest)(&g) }),
	KeyRevokeACL: req(func(t *rapid.T) Request { g := genACL(t); return (*RevokeACLRequest)(&g) }),
	KeyListACLs:  req(func(t *rapid.T) Request { return &ListACLsRequest{User: genNStr.Draw(t, "user")} }),
	KeyDefinePolicy: req(func(t *rapid.T) Request {
		return &DefinePolicyRequest{Name: genName.Draw(t, "name"), Fields: genPolicyFields(t)}
	}),
	KeyDeletePolicy: req(func(t *rapid.T) Request {
		return &DeletePolicyRequest{Name: genName.Draw(t, "name"), Force: genBool.Draw(t, "force")}
	}),
	KeyListPolicies: rapid.Just[Request](&ListPoliciesRequest{}),
	KeyBindTopicPolicy: req(func(t *rapid.T) Request {
		return &BindTopicPolicyRequest{Topic: genString.Draw(t, "topic"), Policy: rapid.Ptr(genName.Filter(func(s string) bool { return s != "" }), true).Draw(t, "policy")}
	}),
	KeyGetTopicPolicy: req(func(t *rapid.T) Request { return &GetTopicPolicyRequest{Topic: genString.Draw(t, "topic")} }),
	KeyListTopics:     rapid.Just[Request](&ListTopicsRequest{}),
	KeyDescribeTopic: req(func(t *rapid.T) Request {
		r := &DescribeTopicRequest{Topic: genNStr.Draw(t, "topic"), Flags: rapid.SampledFrom([]uint8{
			0, FlagCopies, FlagPaged, FlagPaged | FlagActiveOnly, FlagPaged | FlagCopies | FlagActiveOnly}).Draw(t, "flags")}
		if r.Paged() {
			r.PageToken = rapid.Ptr(rapid.StringN(1, MaxPageTokenLen, MaxPageTokenLen), true).Draw(t, "token")
			r.MaxRanges = rapid.Uint32Min(1).Draw(t, "max_ranges")
		}
		return r
	}),
	KeyDeleteTopic: req(func(t *rapid.T) Request { return &DeleteTopicRequest{Topic: genNStr.Draw(t, "topic")} }),
	KeyCreateTopicEx: req(func(t *rapid.T) Request {
		return &CreateTopicExRequest{Topic: genNStr.Draw(t, "topic"), Bits: genU8.Draw(t, "bits"), Ranges: genU32.Draw(t, "ranges"),
			Replicas: genU8.Draw(t, "replicas"), Policy: genOptName.Draw(t, "policy")}
	}),
	KeySplitRange: req(func(t *rapid.T) Request {
		return &SplitRangeRequest{Topic: genNStr.Draw(t, "topic"), Range: genU64.Draw(t, "range")}
	}),
	KeyMergeRanges: req(func(t *rapid.T) Request {
		return &MergeRangesRequest{Topic: genNStr.Draw(t, "topic"), A: genU64.Draw(t, "a"), B: genU64.Draw(t, "b")}
	}),
	KeyDescribeGroup: req(func(t *rapid.T) Request {
		return &DescribeGroupRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Flags: genFlags.Draw(t, "flags")}
	}),
	KeyListGroups: req(func(t *rapid.T) Request { return &ListGroupsRequest{Topic: genNStr.Draw(t, "topic")} }),
	KeyStatus:     rapid.Just[Request](&StatusRequest{}),
	KeyEndCursor:  req(func(t *rapid.T) Request { return &EndCursorRequest{Topic: genNStr.Draw(t, "topic")} }),
	KeyCursorAtTime: req(func(t *rapid.T) Request {
		return &CursorAtTimeRequest{Topic: genNStr.Draw(t, "topic"), TimeMs: genU64.Draw(t, "time")}
	}),
	KeyCursorFromEnd: req(func(t *rapid.T) Request {
		return &CursorFromEndRequest{Topic: genNStr.Draw(t, "topic"), N: genU64.Draw(t, "n")}
	}),
	KeyGroupSeek: req(func(t *rapid.T) Request {
		return &GroupSeekRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Cursor: genNStr.Draw(t, "cursor")}
	}),
	KeyGroupDelete: req(func(t *rapid.T) Request {
		return &GroupDeleteRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group")}
	}),
	KeyDescribeGroupMembers: req(func(t *rapid.T) Request {
		return &DescribeGroupMembersRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group")}
	}),
	KeyAPIVersions: rapid.Just[Request](&APIVersionsRequest{}),
	KeyTopicRoutes: req(func(t *rapid.T) Request { return &TopicRoutesRequest{Topic: genNStr.Draw(t, "topic")} }),
	KeyProduceBatches: req(func(t *rapid.T) Request {
		return &ProduceBatchesRequest{Topic: genNStr.Draw(t, "topic"), Batches: listOf(t, "batches", genRangeBatch)}
	}),
	KeyFetchBatches: req(func(t *rapid.T) Request {
		return &FetchBatchesRequest{
			Topic: genNStr.Draw(t, "topic"), Cursor: genNStr.Draw(t, "cursor"), Group: genNStr.Draw(t, "group"),
			Member: genNStr.Draw(t, "member"), MaxBytes: genU32.Draw(t, "bytes"), MaxRecords: genU32.Draw(t, "records"),
			WaitMs: genU32.Draw(t, "wait"), Flags: genFlags.Draw(t, "flags"),
		}
	}),
	KeySessionAuth: req(func(t *rapid.T) Request {
		return &SessionAuthRequest{Token: genNStr.Draw(t, "token"), User: genNStr.Draw(t, "user"), Password: genNStr.Draw(t, "password")}
	}),
	KeyMemberHeartbeat: req(func(t *rapid.T) Request {
		return &MemberHeartbeatRequest{Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member")}
	}),
	KeyMemberCommit: req(func(t *rapid.T) Request {
		return &MemberCommitRequest{
			Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member"),
			Generation: genU64.Draw(t, "generation"), Cursor: genNStr.Draw(t, "cursor"),
		}
	}),
	KeySubscribeBatches: req(func(t *rapid.T) Request {
		return &SubscribeBatchesRequest{
			Topic: genNStr.Draw(t, "topic"), Group: genNStr.Draw(t, "group"), Member: genNStr.Draw(t, "member"),
			Window: genU32.Draw(t, "window"), MaxBytes: genU32.Draw(t, "bytes"), Flags: genFlags.Draw(t, "flags"),
		}
	}),
	KeyClusterStatus: req(func(t *rapid.T) Request {
		return &ClusterStatusRequest{Flags: rapid.SampledFrom([]uint8{0, FlagRepair}).Draw(t, "flags")}
	}),
	KeyClusterRemove: req(func(t *rapid.T) Request { return &ClusterRemoveRequest{Node: genU64.Draw(t, "node")} }),
	KeyClusterRebalance: req(func(t *rapid.T) Request {
		return &ClusterRebalanceRequest{Apply: genBool.Draw(t, "apply")}
	}),
}

// Policy generators draw only what the decoders accept: names up to
// MaxPolicyNameLen bytes, string values up to MaxPolicyStringLen, at most
// MaxPolicyFields fields, and values in their canonical form.
var (
	genName    = rapid.StringOfN(rapid.Rune(), 0, 40, MaxPolicyNameLen)
	genOptName = rapid.OneOf(rapid.Just(""), rapid.StringOfN(rapid.Rune(), 1, 40, MaxPolicyNameLen))
	genFlags   = rapid.SampledFrom([]uint8{0, FlagSkips})
	genSkips   = rapid.Custom(func(t *rapid.T) Skips {
		if !genBool.Draw(t, "asked") {
			return Skips{}
		}
		return Skips{Asked: true, Count: genU64.Draw(t, "count"), Bound: genBool.Draw(t, "bound")}
	})
	genPolicyValue = rapid.Custom(func(t *rapid.T) PolicyValue {
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			return PolicyValue{Off: true}
		case 1:
			return PolicyValue{Int: rapid.Int64().Draw(t, "int")}
		default:
			return PolicyValue{Str: rapid.StringOfN(rapid.Rune(), 0, 40, MaxPolicyStringLen).Draw(t, "str"), IsStr: true}
		}
	})
)

func genPolicyFields(t *rapid.T) []PolicyField {
	fs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) PolicyField {
		return PolicyField{Name: genName.Draw(t, "field"), Value: genPolicyValue.Draw(t, "value")}
	}), 0, MaxPolicyFields).Draw(t, "fields")
	if len(fs) == 0 {
		return nil
	}
	return fs
}

var genRangeBatch = rapid.Custom(func(t *rapid.T) RangeBatch {
	return RangeBatch{Range: genU64.Draw(t, "range"), Batch: rapid.SliceOfN(rapid.Byte(), minBatchLen, 200).Draw(t, "batch")}
})

func req(fn func(*rapid.T) Request) *rapid.Generator[Request] { return rapid.Custom(fn) }

func genACL(t *rapid.T) GrantACLRequest {
	return GrantACLRequest{User: genNStr.Draw(t, "user"), Operation: genNStr.Draw(t, "op"), Pattern: genNStr.Draw(t, "pattern")}
}

func resp(fn func(*rapid.T) responseDecoder) *rapid.Generator[responseDecoder] {
	return rapid.Custom(fn)
}

var genSegmentInfo = rapid.Custom(func(t *rapid.T) SegmentInfo {
	return SegmentInfo{
		ID: genU64.Draw(t, "id"), Active: genBool.Draw(t, "active"),
		Base: genU64.Draw(t, "base"), End: genU64.Draw(t, "end"),
		Records: genU64.Draw(t, "records"), Bytes: genU64.Draw(t, "bytes"),
		Replicas: listOf(t, "replicas", genString),
		OpenedAt: genU64.Draw(t, "opened"), SealedAt: genU64.Draw(t, "sealed"), MaxExpiry: genU64.Draw(t, "expiry"),
	}
})

var genRangeInfo = rapid.Custom(func(t *rapid.T) RangeInfo {
	return RangeInfo{
		ID: genU64.Draw(t, "id"), Start: genU64.Draw(t, "start"), End: genU64.Draw(t, "end"),
		Active: genBool.Draw(t, "active"), Parents: listOf(t, "parents", genU64),
		CreatedAt: genU64.Draw(t, "created"), SealedAt: genU64.Draw(t, "sealed"),
		Segments: listOf(t, "segments", genSegmentInfo),
	}
})

// responseGens has a generator for every response type.
var responseGens = []*rapid.Generator[responseDecoder]{
	rapid.Just[responseDecoder](&EmptyResponse{}),
	resp(func(t *rapid.T) responseDecoder {
		r := &ClusterStatusResponse{
			Node: genU64.Draw(t, "node"), Vnodes: genU32.Draw(t, "vnodes"),
			Nodes: listOf(t, "nodes", rapid.Custom(func(t *rapid.T) ClusterNode {
				return ClusterNode{
					ID: genU64.Draw(t, "id"), Registered: genBool.Draw(t, "registered"), Liveness: genString.Draw(t, "liveness"),
					PeerAddr: genString.Draw(t, "peer"), GossipAddr: genString.Draw(t, "gossip"),
					ClientAddr: genString.Draw(t, "client"), HTTPAddr: genString.Draw(t, "http"),
					Attrs: listOf(t, "attrs", rapid.Custom(func(t *rapid.T) ClusterAttr {
						return ClusterAttr{Key: genString.Draw(t, "key"), Value: genString.Draw(t, "value")}
					})),
				}
			})),
			Groups: listOf(t, "groups", rapid.Custom(func(t *rapid.T) ClusterGroup {
				return ClusterGroup{
					Group: genU64.Draw(t, "group"), Name: genString.Draw(t, "name"), State: genString.Draw(t, "state"),
					Leader: genU64.Draw(t, "leader"), Term: genU64.Draw(t, "term"), Commit: genU64.Draw(t, "commit"),
					Applied: genU64.Draw(t, "applied"), Voters: listOf(t, "voters", genU64),
					Learners: listOf(t, "learners", genU64), Placed: listOf(t, "placed", genU64),
				}
			})),
			Peers: listOf(t, "peers", rapid.Custom(func(t *rapid.T) ClusterPeer {
				return ClusterPeer{
					Node: genU64.Draw(t, "node"), Connected: genBool.Draw(t, "connected"), Writes: genU64.Draw(t, "writes"),
					FramesSent: genU64.Draw(t, "frames_sent"), BytesSent: genU64.Draw(t, "bytes_sent"),
					FramesReceived: genU64.Draw(t, "frames_received"), BytesReceived: genU64.Draw(t, "bytes_received"),
				}
			})),
		}
		if genBool.Draw(t, "repair") {
			r.Repair = genClusterRepair.Draw(t, "repair")
			for i := range r.Nodes {
				r.Nodes[i].Disk = genString.Draw(t, "disk")
			}
		}
		return r
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &ClusterRebalanceResponse{
			Applied: genBool.Draw(t, "applied"),
			Nodes: listOf(t, "nodes", rapid.Custom(func(t *rapid.T) RebalanceNode {
				return RebalanceNode{
					ID: genU64.Draw(t, "id"), Live: genBool.Draw(t, "live"), Voter: genU32.Draw(t, "voter"),
					VoterAfter: genU32.Draw(t, "voter_after"), Leads: genU32.Draw(t, "leads"), LeadsAfter: genU32.Draw(t, "leads_after"),
				}
			})),
			Groups: listOf(t, "groups", rapid.Custom(func(t *rapid.T) RebalanceGroup {
				return RebalanceGroup{
					Group: genU64.Draw(t, "group"), Name: genString.Draw(t, "name"), Voters: listOf(t, "voters", genU64),
					Target: listOf(t, "target", genU64), Add: listOf(t, "add", genU64), Remove: listOf(t, "remove", genU64),
					Leader: genU64.Draw(t, "leader"), NewLeader: genU64.Draw(t, "new_leader"), Held: genString.Draw(t, "held"),
				}
			})),
		}
	}),
	resp(func(t *rapid.T) responseDecoder { return &TokenResponse{Token: genString.Draw(t, "token")} }),
	resp(func(t *rapid.T) responseDecoder {
		return &SessionAuthResponse{Token: genString.Draw(t, "token"), ExpiresMs: genU64.Draw(t, "expires"), Resumed: rapid.Bool().Draw(t, "resumed")}
	}),
	resp(func(t *rapid.T) responseDecoder { return &CountResponse{Count: genU32.Draw(t, "count")} }),
	resp(func(t *rapid.T) responseDecoder {
		return &MemberStateResponse{Generation: genU64.Draw(t, "generation"), Ranges: genU32.Draw(t, "ranges"), Members: genU32.Draw(t, "members")}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &FetchResponse{Records: listOf(t, "records", genRecord), NextCursor: genNStr.Draw(t, "cursor")}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &ListUsersResponse{Users: listOf(t, "users", rapid.Custom(func(t *rapid.T) UserEntry {
			return UserEntry{User: genString.Draw(t, "user"), Perms: listOf(t, "perms", genString)}
		}))}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &ListACLsResponse{ACLs: listOf(t, "acls", rapid.Custom(func(t *rapid.T) ACLEntry {
			return ACLEntry{Operation: genString.Draw(t, "op"), Resource: genString.Draw(t, "resource")}
		}))}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &ListTopicsResponse{Topics: listOf(t, "topics", rapid.Custom(func(t *rapid.T) TopicSummary {
			return TopicSummary{
				Name: genString.Draw(t, "name"), Bits: genU8.Draw(t, "bits"),
				ActiveRanges: genU32.Draw(t, "active"), Ranges: genU32.Draw(t, "ranges"), Segments: genU32.Draw(t, "segments"),
				Records: genU64.Draw(t, "records"), Bytes: genU64.Draw(t, "bytes"),
			}
		}))}
	}),
	resp(func(t *rapid.T) responseDecoder {
		r := &DescribeTopicResponse{
			ID: genU64.Draw(t, "id"), Name: genString.Draw(t, "name"), Bits: genU8.Draw(t, "bits"),
			CreatedAt: genU64.Draw(t, "created"), Ranges: listOf(t, "ranges", genRangeInfo),
			Groups: listOf(t, "groups", genString), Copies: genBool.Draw(t, "copies"),
		}
		if !r.Copies {
			return r
		}
		segments := 0
		for i := range r.Ranges {
			segments += len(r.Ranges[i].Segments)
		}
		r.CopiesOmitted = rapid.IntRange(0, segments).Draw(t, "omitted")
		listed := segments - r.CopiesOmitted
		for i := range r.Ranges {
			for j := range r.Ranges[i].Segments {
				if listed == 0 {
					return r
				}
				listed--
				r.Ranges[i].Segments[j].Copies = listOf(t, "copies", rapid.Custom(func(t *rapid.T) SegmentCopy {
					return SegmentCopy{Node: genU64.Draw(t, "node"), State: CopyState(rapid.IntRange(0, int(copyStates)-1).Draw(t, "state"))}
				}))
			}
		}
		return r
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &SplitRangeResponse{Children: listOf(t, "children", genU64)}
	}),
	resp(func(t *rapid.T) responseDecoder { return &MergeRangesResponse{Child: genU64.Draw(t, "child")} }),
	resp(func(t *rapid.T) responseDecoder {
		return &DescribeGroupResponse{
			Group: genString.Draw(t, "group"), Cursor: genNStr.Draw(t, "cursor"), Lag: genU64.Draw(t, "lag"),
			Ranges: listOf(t, "ranges", rapid.Custom(func(t *rapid.T) RangeLag {
				return RangeLag{Range: genU64.Draw(t, "range"), Lag: genU64.Draw(t, "lag")}
			})),
			Skips: genSkips.Draw(t, "skips"),
		}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &ListGroupsResponse{Groups: listOf(t, "groups", genString)}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &DescribeGroupMembersResponse{
			Generation: genU64.Draw(t, "generation"),
			Members: listOf(t, "members", rapid.Custom(func(t *rapid.T) GroupMember {
				return GroupMember{Member: genString.Draw(t, "member"), LastSeenMs: genU64.Draw(t, "seen"), Ranges: listOf(t, "ranges", genU64)}
			})),
		}
	}),
	resp(func(t *rapid.T) responseDecoder { return &CursorResponse{Cursor: genNStr.Draw(t, "cursor")} }),
	resp(func(t *rapid.T) responseDecoder {
		return &ListPoliciesResponse{Policies: listOf(t, "policies", rapid.Custom(func(t *rapid.T) PolicyInfo {
			return PolicyInfo{Name: genName.Draw(t, "name"), DefinedAt: genU64.Draw(t, "at"), Fields: genPolicyFields(t)}
		}))}
	}),
	resp(func(t *rapid.T) responseDecoder {
		eff := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) EffectiveField {
			return EffectiveField{Name: genName.Draw(t, "name"), Value: genPolicyValue.Draw(t, "value"), Origin: genName.Draw(t, "origin")}
		}), 0, MaxPolicyFields).Draw(t, "effective")
		if len(eff) == 0 {
			eff = nil
		}
		return &GetTopicPolicyResponse{Topic: genString.Draw(t, "topic"), Policy: rapid.Ptr(genName, true).Draw(t, "policy"),
			Resolution: genName.Draw(t, "resolution"), Definition: genPolicyFields(t), Effective: eff}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &APIVersionsResponse{
			Keys: listOf(t, "keys", rapid.Custom(func(t *rapid.T) KeyVersion {
				return KeyVersion{Key: rapid.Uint16().Draw(t, "key"), Min: rapid.Uint16().Draw(t, "min"), Max: rapid.Uint16().Draw(t, "max")}
			})),
			MaxFrame: genU32.Draw(t, "frame"), MaxBatchBytes: genU32.Draw(t, "bytes"),
			MaxBatchRecords: genU32.Draw(t, "records"), NodeVersion: genString.Draw(t, "version"),
		}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &TopicRoutesResponse{Bits: genU8.Draw(t, "bits"), Ranges: listOf(t, "ranges", rapid.Custom(func(t *rapid.T) RouteRange {
			return RouteRange{Range: genU64.Draw(t, "range"), Start: genU64.Draw(t, "start"), End: genU64.Draw(t, "end")}
		}))}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &ProduceBatchesResponse{Count: genU32.Draw(t, "count"), Rerouted: genU32.Draw(t, "rerouted")}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &FetchBatchesResponse{NextCursor: genNStr.Draw(t, "cursor"), Batches: listOf(t, "batches", genRangeBatch), Skips: genSkips.Draw(t, "skips")}
	}),
	resp(func(t *rapid.T) responseDecoder {
		return &StatusResponse{
			NodeID: genString.Draw(t, "node"), Version: genString.Draw(t, "version"), DataDir: genString.Draw(t, "dir"),
			UptimeMs: genU64.Draw(t, "uptime"), Topics: genU32.Draw(t, "topics"),
			Records: genU64.Draw(t, "records"), Bytes: genU64.Draw(t, "bytes"),
		}
	}),
}

func TestRequestRoundTrip(t *testing.T) {
	for _, key := range allKeys {
		gen, ok := requestGens[key]
		if !ok {
			t.Fatalf("no generator for key %d", key)
		}
		t.Run(KeyName(key), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				want := gen.Draw(t, "request")
				if want.APIKey() != key {
					t.Fatalf("generator for key %d made key %d", key, want.APIKey())
				}
				corr := genU32.Draw(t, "corr")
				frame := AppendRequestFrame(nil, corr, want)
				body, err := ReadFrame(bytes.NewReader(frame), uint32(len(frame)), nil)
				if err != nil {
					t.Fatal(err)
				}
				gotKey, gotCorr, payload, err := ParseRequestHeader(body)
				if err != nil || gotKey != key || gotCorr != corr {
					t.Fatalf("header: key %d corr %d err %v", gotKey, gotCorr, err)
				}
				got, err := DecodeRequest(key, payload)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("decoded %#v, want %#v", got, want)
				}
			})
		})
	}
	if len(requestGens) != len(allKeys) {
		t.Fatalf("%d generators for %d keys", len(requestGens), len(allKeys))
	}
}

func TestResponseRoundTrip(t *testing.T) {
	covered := map[reflect.Type]bool{}
	for _, gen := range responseGens {
		typ := reflect.TypeOf(gen.Example(0))
		covered[typ] = true
		t.Run(typ.Elem().Name(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				want := gen.Draw(t, "response")
				corr := genU32.Draw(t, "corr")
				frame := AppendOKFrame(nil, corr, want)
				body, err := ReadFrame(bytes.NewReader(frame), uint32(len(frame)), nil)
				if err != nil {
					t.Fatal(err)
				}
				gotCorr, code, payload, err := ParseResponse(body)
				if err != nil || gotCorr != corr || code != CodeOK {
					t.Fatalf("header: corr %d code %d err %v", gotCorr, code, err)
				}
				got := reflect.New(typ.Elem()).Interface().(responseDecoder)
				if err := got.Decode(payload); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("decoded %#v, want %#v", got, want)
				}
			})
		})
	}
	for _, r := range sampleResponses() {
		if !covered[reflect.TypeOf(r)] {
			t.Errorf("no generator for %T", r)
		}
	}
}

func TestErrorFrameRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reason := genString.Draw(t, "reason")
		corr := genU32.Draw(t, "corr")
		body, err := ReadFrame(bytes.NewReader(AppendErrorFrame(nil, corr, reason)), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		gotCorr, code, payload, err := ParseResponse(body)
		if err != nil || gotCorr != corr || code != CodeError {
			t.Fatalf("header: corr %d code %d err %v", gotCorr, code, err)
		}
		got, err := DecodeError(payload)
		if err != nil || got != reason {
			t.Fatalf("DecodeError = %q, %v; want %q", got, err, reason)
		}
	})
}

// A nil Value has no wire form of its own: it is sent as an empty value and
// comes back as a non-nil empty slice.
func TestNilValueEncodesEmpty(t *testing.T) {
	nilValue := AppendRecord(nil, Record{Key: []byte("k"), Value: nil})
	emptyValue := AppendRecord(nil, Record{Key: []byte("k"), Value: []byte{}})
	if !bytes.Equal(nilValue, emptyValue) {
		t.Fatalf("nil value %x, empty value %x", nilValue, emptyValue)
	}
	var p ProduceRequest
	if err := p.Decode(ProduceRequest{Records: []Record{{}}}.AppendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	if v := p.Records[0].Value; v == nil || len(v) != 0 {
		t.Fatalf("decoded value %#v, want non-nil empty", v)
	}
}

// Record.Size must match what AppendRecord appends.
func TestRecordSize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := genRecord.Draw(t, "record")
		if got, want := rec.Size(), len(AppendRecord(nil, rec)); got != want {
			t.Fatalf("Size = %d, encoded %d bytes", got, want)
		}
	})
}

// Both a request value and a pointer to it satisfy Request and encode the
// same bytes; DecodeRequest returns the pointer form.
func TestValueAndPointerEncodeAlike(t *testing.T) {
	v := FetchRequest{Topic: new("t"), Max: 1}
	if !bytes.Equal(AppendRequestFrame(nil, 1, v), AppendRequestFrame(nil, 1, &v)) {
		t.Fatal("value and pointer encode differently")
	}
	if !bytes.Equal(AppendOKFrame(nil, 1, CountResponse{Count: 2}), AppendOKFrame(nil, 1, &CountResponse{Count: 2})) {
		t.Fatal("value and pointer responses encode differently")
	}
}
