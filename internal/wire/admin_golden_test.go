// Golden frames for keys 17–21 and 64–84, with the optional trailing
// fields of version 2 of keys 67, 70, 82 and 83. These layouts are frozen once shipped,
// like v1: the frames below (also quoted in docs/wire.md) must decode to
// the listed values and the values must encode to the frames, byte for
// byte. A change that breaks this test changes the protocol.
package wire

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

var adminGoldenRequests = []struct {
	frame string
	want  Request
}{
	{"00000006004000000004", &ListTopicsRequest{}},
	{"0000001100410000000501000000066f7264657273", &DescribeTopicRequest{Topic: new("orders")}},
	{"0000001700410000000501000000066f7264657273020000000064", &DescribeTopicRequest{Topic: new("orders"), Flags: FlagPaged, MaxRanges: 100}},
	{"0000001100420000000601000000066f7264657273", &DeleteTopicRequest{Topic: new("orders")}},
	{"0000001600430000000101000000066f72646572731000000004", &CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4}},
	{"0000001700430000000101000000066f7264657273100000000403", &CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Replicas: 3}},
	{"0000001900440000000201000000066f72646572730000000000000003", &SplitRangeRequest{Topic: new("orders"), Range: 3}},
	{"0000002100450000000701000000066f726465727300000000000000050000000000000006", &MergeRangesRequest{Topic: new("orders"), A: 5, B: 6}},
	{"0000001d00460000000301000000066f72646572730100000007776f726b657273", &DescribeGroupRequest{Topic: new("orders"), Group: new("workers")}},
	{"0000001100470000000801000000066f7264657273", &ListGroupsRequest{Topic: new("orders")}},
	{"00000006004800000009", &StatusRequest{}},
	{"00000019004a0000000a01000000066f72646572730000018bcfe56800", &CursorAtTimeRequest{Topic: new("orders"), TimeMs: 1700000000000}},
	{"0000001e004b0000000b01000000066f72646572730100000007776f726b65727300", &GroupSeekRequest{Topic: new("orders"), Group: new("workers")}},
	{"0000001d004c0000000c01000000066f72646572730100000007776f726b657273", &GroupDeleteRequest{Topic: new("orders"), Group: new("workers")}},
	{"0000001d004d0000000d01000000066f72646572730100000007776f726b657273", &DescribeGroupMembersRequest{Topic: new("orders"), Group: new("workers")}},
	{"00000019004e0000000e01000000066f7264657273000000000000000a", &CursorFromEndRequest{Topic: new("orders"), N: 10}},
	{"00000006004f0000000f", &APIVersionsRequest{}},
	{"0000001100500000000f01000000066f7264657273", &TopicRoutesRequest{Topic: new("orders")}},
	{"0000005d00510000000f01000000066f72646572730000000100000000000000050000003c4d01" + zeros58,
		&ProduceBatchesRequest{Topic: new("orders"), Batches: []RangeBatch{{Range: 5, Batch: sampleBatch}}}},
	{"0000002800520000000f01000000066f726465727301000000045131565300000010000000000000000001f4",
		&FetchBatchesRequest{Topic: new("orders"), Cursor: new("Q1VS"), MaxBytes: 1 << 20, WaitMs: 500}},
	{"0000002600530000000f01000000066f72646572730100000007776f726b65727300000003e800100000",
		&SubscribeBatchesRequest{Topic: new("orders"), Group: new("workers"), Window: 1000, MaxBytes: 1 << 20}},
	{"0000002200540000000f01000000046447397201000000036170700100000006617070313233",
		&SessionAuthRequest{Token: new("dG9r"), User: new("app"), Password: new("app123")}},
	{"00000050001100000010010000000573686f72740003010000000a6d61785f6167655f6d7301000000000036ee80" +
		"01000000096d61785f62797465730001000000097370726561645f627902000000047a6f6e65",
		&DefinePolicyRequest{Name: "short", Fields: []PolicyField{
			{Name: "max_age_ms", Value: PolicyValue{Int: 3600000}},
			{Name: "max_bytes", Value: PolicyValue{Off: true}},
			{Name: "spread_by", Value: PolicyValue{Str: "zone", IsStr: true}},
		}}},
	{"00000011001200000010010000000573686f727401", &DeletePolicyRequest{Name: "short", Force: true}},
	{"00000006001300000010", &ListPoliciesRequest{}},
	{"0000001b00140000001001000000066f7264657273010000000573686f7274", &BindTopicPolicyRequest{Topic: "orders", Policy: new("short")}},
	{"0000001200140000001001000000066f726465727300", &BindTopicPolicyRequest{Topic: "orders"}},
	{"0000001100150000001001000000066f7264657273", &GetTopicPolicyRequest{Topic: "orders"}},
	{"0000002100430000001001000000066f7264657273100000000400010000000573686f7274",
		&CreateTopicExRequest{Topic: new("orders"), Bits: 16, Ranges: 4, Policy: "short"}},
	{"0000001e00460000001001000000066f72646572730100000007776f726b65727301",
		&DescribeGroupRequest{Topic: new("orders"), Group: new("workers"), Flags: FlagSkips}},
	{"0000002900520000001001000000066f726465727301000000045131565300000010000000000000000001f401",
		&FetchBatchesRequest{Topic: new("orders"), Cursor: new("Q1VS"), MaxBytes: 1 << 20, WaitMs: 500, Flags: FlagSkips}},
	{"0000002700530000001001000000066f72646572730100000007776f726b65727300000003e80010000001",
		&SubscribeBatchesRequest{Topic: new("orders"), Group: new("workers"), Window: 1000, MaxBytes: 1 << 20, Flags: FlagSkips}},
}

var adminGoldenResponses = []struct {
	frame string
	want  responseDecoder
}{
	{"000000320000000400000000000101000000066f72646572731000000002000000030000000400000000000003e80000000000010000",
		&ListTopicsResponse{Topics: []TopicSummary{{Name: "orders", Bits: 16, ActiveRanges: 2, Ranges: 3, Segments: 4, Records: 1000, Bytes: 65536}}}},
	{"000000b3000000050000000000000000000101000000066f7264657273100000018bcfe568000000000100000000000000010000000000000000" +
		"000000000001000001000000000000018bcfe568000000000000000000000000010000000000000001010000000000000000000000000000000a" +
		"000000000000000a00000000000002800000000101000000026e310000018bcfe5680000000000000000000000000000000000000000010100000007776f726b657273",
		&DescribeTopicResponse{ID: 1, Name: "orders", Bits: 16, CreatedAt: 1700000000000,
			Ranges: []RangeInfo{{ID: 1, Start: 0, End: 65536, Active: true, CreatedAt: 1700000000000,
				Segments: []SegmentInfo{{ID: 1, Active: true, Base: 0, End: 10, Records: 10, Bytes: 640,
					Replicas: []string{"n1"}, OpenedAt: 1700000000000}}}},
			Groups: []string{"workers"}}},
	{"0000001a0000000200000000000200000000000000050000000000000006", &SplitRangeResponse{Children: []uint64{5, 6}}},
	{"0000000e0000000700000000000000000007", &MergeRangesResponse{Child: 7}},
	{"0000003f0000000300000100000007776f726b6572730000000000000000070000000200000000000000050000000000000003" +
		"00000000000000060000000000000004",
		&DescribeGroupResponse{Group: "workers", Lag: 7, Ranges: []RangeLag{{Range: 5, Lag: 3}, {Range: 6, Lag: 4}}}},
	{"0000002000000008000000000002010000000561756469740100000007776f726b657273", &ListGroupsResponse{Groups: []string{"audit", "workers"}}},
	{"0000003d00000009000001000000026e310100000005302e312e3001000000052f64617461000000000000ea600000000100000000000003e80000000000010000",
		&StatusResponse{NodeID: "n1", Version: "0.1.0", DataDir: "/data", UptimeMs: 60000, Topics: 1, Records: 1000, Bytes: 65536}},
	{"000000350000000d000000000000000000020000000101000000026d310000018bcfe568000000000200000000000000050000000000000006",
		&DescribeGroupMembersResponse{Generation: 2, Members: []GroupMember{{Member: "m1", LastSeenMs: 1700000000000, Ranges: []uint64{5, 6}}}}},
	{"0000002c0000000f0000000000020000000100010051000100010100000000100000000100000100000005302e322e30",
		&APIVersionsResponse{Keys: []KeyVersion{{Key: 0, Min: 1, Max: 1}, {Key: 81, Min: 1, Max: 1}}, MaxFrame: 16 << 20,
			MaxBatchBytes: 1 << 20, MaxBatchRecords: 65536, NodeVersion: "0.2.0"}},
	{"0000003b0000000f00001000000002000000000000000500000000000000000000000000008000000000000000000600000000000080000000000000010000",
		&TopicRoutesResponse{Bits: 16, Ranges: []RouteRange{{Range: 5, Start: 0, End: 32768}, {Range: 6, Start: 32768, End: 65536}}}},
	{"0000000e0000000f0000000003e800000001", &ProduceBatchesResponse{Count: 1000, Rerouted: 1}},
	{"0000005b0000000f00000100000004513156530000000100000000000000050000003c4d01" + zeros58,
		&FetchBatchesResponse{NextCursor: new("Q1VS"), Batches: []RangeBatch{{Range: 5, Batch: sampleBatch}}}},
	{"000000180000000f00000100000004644739720000018bcfe5680001",
		&SessionAuthResponse{Token: "dG9r", ExpiresMs: 1700000000000, Resumed: true}},
	{"0000003600000010000000000001010000000573686f72740000018bcfe568000001010000000a6d61785f6167655f6d7301000000000036ee80",
		&ListPoliciesResponse{Policies: []PolicyInfo{{Name: "short", DefinedAt: 1700000000000,
			Fields: []PolicyField{{Name: "max_age_ms", Value: PolicyValue{Int: 3600000}}}}}}},
	{"0000008100000010000001000000066f7264657273010000000573686f727401000000087265736f6c7665640001010000000a6d61785f6167" +
		"655f6d7301000000000036ee800002010000000a6d61785f6167655f6d7301000000000036ee800100000006706f6c69637901000000096d" +
		"61785f6279746573000100000006676c6f62616c",
		&GetTopicPolicyResponse{Topic: "orders", Policy: new("short"), Resolution: "resolved",
			Definition: []PolicyField{{Name: "max_age_ms", Value: PolicyValue{Int: 3600000}}},
			Effective: []EffectiveField{
				{Name: "max_age_ms", Value: PolicyValue{Int: 3600000}, Origin: "policy"},
				{Name: "max_bytes", Value: PolicyValue{Off: true}, Origin: "global"},
			}}},
	{"000000280000001000000100000007776f726b65727300000000000000000700000000000000000000007800",
		&DescribeGroupResponse{Group: "workers", Lag: 7, Skips: Skips{Asked: true, Count: 120}}},
	{"0000001c0000001000000100000004513156530000000000000000000001f401",
		&FetchBatchesResponse{NextCursor: new("Q1VS"), Skips: Skips{Asked: true, Count: 500, Bound: true}}},
}

// hintErrorGolden is a refusal of session_auth with a retry-after hint
// (code 2): rate_limit_exceeded, retry after 1.5 s, correlation id 15.
const hintErrorGolden = "000000220000000f00020100000013726174655f6c696d69745f6578636565646564000005dc"

func TestHintErrorGolden(t *testing.T) {
	frame := mustHex(t, hintErrorGolden)
	corr, code, payload, err := ParseResponse(frame[LenPrefixSize:])
	if err != nil || code != CodeErrorHint || corr != 15 {
		t.Fatalf("corr %d code %d err %v", corr, code, err)
	}
	reason, after, err := DecodeHintError(payload)
	if err != nil || reason != ReasonRateLimitExceeded || after != 1500 {
		t.Fatalf("decoded %q %d %v", reason, after, err)
	}
	if again := AppendHintErrorFrame(nil, 15, ReasonRateLimitExceeded, 1500); !bytes.Equal(again, frame) {
		t.Fatalf("encoded %x, want %x", again, frame)
	}
	if _, _, err := DecodeHintError(payload[:len(payload)-1]); err == nil {
		t.Fatal("a hint cut short decoded")
	}
}

// zeros58 is the hex of the 58 zero bytes that end sampleBatch.
var zeros58 = strings.Repeat("00", 58)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAdminGoldenRequests(t *testing.T) {
	for _, g := range adminGoldenRequests {
		t.Run(KeyName(g.want.APIKey()), func(t *testing.T) {
			frame := mustHex(t, g.frame)
			key, corr, payload, err := ParseRequestHeader(frame[LenPrefixSize:])
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeRequest(key, payload)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, g.want) {
				t.Fatalf("decoded %#v, want %#v", got, g.want)
			}
			if again := AppendRequestFrame(nil, corr, g.want); !bytes.Equal(again, frame) {
				t.Fatalf("encoded %x, want %x", again, frame)
			}
		})
	}
}

func TestAdminGoldenResponses(t *testing.T) {
	for _, g := range adminGoldenResponses {
		t.Run(reflect.TypeOf(g.want).Elem().Name(), func(t *testing.T) {
			frame := mustHex(t, g.frame)
			corr, code, payload, err := ParseResponse(frame[LenPrefixSize:])
			if err != nil || code != CodeOK {
				t.Fatalf("code %d err %v", code, err)
			}
			got := fresh(g.want)
			if err := got.Decode(payload); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, g.want) {
				t.Fatalf("decoded %#v, want %#v", got, g.want)
			}
			if again := AppendOKFrame(nil, corr, g.want); !bytes.Equal(again, frame) {
				t.Fatalf("encoded %x, want %x", again, frame)
			}
		})
	}
}
