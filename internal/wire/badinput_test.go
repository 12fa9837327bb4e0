// Bad-input tests: every decoder must reject, with an error wrapping
// ErrMalformed, a payload cut short at any byte, a payload with trailing
// bytes, bad tags, and counts or lengths the remaining bytes cannot hold;
// the last must fail without allocating for the count. Unknown api keys
// wrap ErrUnknownAPIKey. Decoded byte slices alias the payload but cannot
// be appended over their neighbours.
package wire

import (
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"testing"
)

// requestPayloads returns (key, payload) for every sample request and
// every request vector.
func requestPayloads(t *testing.T) (keys []uint16, payloads [][]byte) {
	for _, r := range sampleRequests() {
		keys = append(keys, r.APIKey())
		payloads = append(payloads, r.AppendPayload(nil))
	}
	for _, v := range loadVectors(t).Requests {
		key, _, payload, err := ParseRequestHeader(v.frame(t)[LenPrefixSize:])
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		payloads = append(payloads, payload)
	}
	return keys, payloads
}

func fresh(r responseDecoder) responseDecoder {
	return reflect.New(reflect.TypeOf(r).Elem()).Interface().(responseDecoder)
}

func TestTruncatedAndTrailing(t *testing.T) {
	keys, payloads := requestPayloads(t)
	for i, payload := range payloads {
		key := keys[i]
		for n := range len(payload) {
			if _, err := DecodeRequest(key, payload[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s cut to %d of %d bytes: err = %v", KeyName(key), n, len(payload), err)
			}
		}
		if _, err := DecodeRequest(key, append(payload[:len(payload):len(payload)], 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s with a trailing byte: err = %v", KeyName(key), err)
		}
	}
	for _, r := range sampleResponses() {
		payload := r.AppendPayload(nil)
		for n := range len(payload) {
			if err := fresh(r).Decode(payload[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T cut to %d of %d bytes: err = %v", r, n, len(payload), err)
			}
		}
		if err := fresh(r).Decode(append(payload, 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%T with a trailing byte: err = %v", r, err)
		}
	}
}

func TestUnknownAPIKey(t *testing.T) {
	for _, key := range []uint16{22, 63, 90, 0xFFFF} {
		if _, err := DecodeRequest(key, nil); !errors.Is(err, ErrUnknownAPIKey) {
			t.Errorf("key %d: err = %v, want ErrUnknownAPIKey", key, err)
		}
	}
}

// payload concatenates hand-built parts.
func payload(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func be32(v uint32) []byte  { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte  { return binary.BigEndian.AppendUint64(nil, v) }
func str(s string) []byte   { return appendString(nil, s) }
func zeros(n int) []byte    { return make([]byte, n) }
func oneByte(b byte) []byte { return []byte{b} }
func absent() []byte        { return []byte{strAbsent} }
func lots(n uint32) []byte  { return be32(n) }
func emptyList() []byte     { return be32(0) }
func record(key []byte) []byte {
	return payload(key, be32(0), be64(0), emptyList())
}

type badCase struct {
	name    string
	decode  func([]byte) error
	payload []byte
}

func decodeKey(key uint16) func([]byte) error {
	return func(p []byte) error { _, err := DecodeRequest(key, p); return err }
}

func into(r responseDecoder) func([]byte) error { return r.Decode }

func badCases() []badCase {
	const huge = 0xFFFFFFFF
	const big = 100_000 // a naive make() would allocate megabytes
	return []badCase{
		{"produce record count 2^32-1", decodeKey(KeyProduce), payload(str("t"), lots(huge), zeros(10))},
		{"produce record count 100000", decodeKey(KeyProduce), payload(str("t"), lots(big), zeros(10))},
		{"produce header count", decodeKey(KeyProduce), payload(str("t"), be32(1), absent(), be32(0), be64(0), lots(huge), zeros(10))},
		{"produce value length", decodeKey(KeyProduce), payload(str("t"), be32(1), absent(), lots(huge), zeros(10))},
		{"produce key length", decodeKey(KeyProduce), payload(str("t"), be32(1), oneByte(strPresent), lots(huge), zeros(10))},
		{"auth user length", decodeKey(KeyAuth), payload(oneByte(strPresent), lots(huge), zeros(10))},
		{"create_user perm count", decodeKey(KeyCreateUser), payload(absent(), absent(), lots(huge), zeros(10))},
		{"fetch response record count", into(new(FetchResponse)), payload(lots(big), zeros(10))},
		{"list_users response count", into(new(ListUsersResponse)), payload(lots(huge), zeros(10))},
		{"list_users perms count", into(new(ListUsersResponse)), payload(be32(1), str("u"), lots(big), zeros(10))},
		{"list_acls response count", into(new(ListACLsResponse)), payload(lots(big), zeros(10))},
		{"list_topics response count", into(new(ListTopicsResponse)), payload(lots(big), zeros(10))},
		{"describe_topic range count", into(new(DescribeTopicResponse)), payload(be64(1), str("t"), zeros(9), lots(big), zeros(10))},
		{"describe_topic parent count", into(new(DescribeTopicResponse)),
			payload(be64(1), str("t"), zeros(9), be32(1), zeros(25), lots(big), zeros(60))},
		{"split_range children count", into(new(SplitRangeResponse)), payload(lots(big), zeros(10))},
		{"describe_group range count", into(new(DescribeGroupResponse)), payload(str("g"), absent(), be64(0), lots(big), zeros(10))},
		{"list_groups count", into(new(ListGroupsResponse)), payload(lots(huge), zeros(10))},
		{"describe_group_members member count", into(new(DescribeGroupMembersResponse)), payload(be64(1), lots(big), zeros(10))},
		{"describe_group_members range count", into(new(DescribeGroupMembersResponse)),
			payload(be64(1), be32(1), str("m"), be64(0), lots(big), zeros(10))},
		{"absent required member", into(new(DescribeGroupMembersResponse)), payload(be64(1), be32(1), absent(), be64(0), emptyList())},
		{"cluster_status node count", into(new(ClusterStatusResponse)), payload(be64(1), be32(8), lots(big), zeros(10))},
		{"cluster_status attr count", into(new(ClusterStatusResponse)),
			payload(be64(1), be32(8), be32(1), be64(2), oneByte(1), str("alive"), str(""), str(""), str(""), str(""), lots(big), zeros(10))},
		{"cluster_status group count", into(new(ClusterStatusResponse)), payload(be64(1), be32(8), emptyList(), lots(huge), zeros(10))},
		{"cluster_status bool 2", into(new(ClusterStatusResponse)),
			payload(be64(1), be32(8), be32(1), be64(2), oneByte(2), str("alive"), str(""), str(""), str(""), str(""), emptyList(), emptyList(), emptyList())},
		{"cluster_status peer count", into(new(ClusterStatusResponse)), payload(be64(1), be32(8), emptyList(), emptyList(), lots(big), zeros(10))},
		{"cluster_status without peers", into(new(ClusterStatusResponse)), payload(be64(1), be32(8), emptyList(), emptyList())},
		{"cluster_status short peer", into(new(ClusterStatusResponse)), payload(be64(1), be32(8), emptyList(), emptyList(), be32(1), be64(2), oneByte(1), zeros(39))},
		{"cluster_remove short id", decodeKey(KeyClusterRemove), zeros(7)},
		{"cluster_rebalance empty", decodeKey(KeyClusterRebalance), payload()},
		{"cluster_rebalance bool 2", decodeKey(KeyClusterRebalance), oneByte(2)},
		{"cluster_rebalance trailing byte", decodeKey(KeyClusterRebalance), payload(oneByte(1), oneByte(0))},
		{"cluster_rebalance node count", into(new(ClusterRebalanceResponse)), payload(oneByte(1), lots(big), zeros(10))},
		{"cluster_rebalance group count", into(new(ClusterRebalanceResponse)), payload(oneByte(0), emptyList(), lots(huge), zeros(10))},
		{"cluster_rebalance live 2", into(new(ClusterRebalanceResponse)), payload(oneByte(0), be32(1), be64(1), oneByte(2), zeros(16), emptyList())},
		{"cluster_rebalance absent name", into(new(ClusterRebalanceResponse)),
			payload(oneByte(0), emptyList(), be32(1), be64(2), absent(), emptyList(), emptyList(), emptyList(), emptyList(), be64(0), be64(0), str(""))},
		{"group_seek str tag 2", decodeKey(KeyGroupSeek), payload(str("t"), str("g"), oneByte(2))},
		{"cursor_at_time short time", decodeKey(KeyCursorAtTime), payload(str("t"), zeros(7))},
		{"str tag 2", decodeKey(KeyDeleteUser), payload(oneByte(2))},
		{"str tag 0xff", decodeKey(KeyProduce), payload(str("t"), be32(1), oneByte(0xff), be32(0), be64(0), emptyList())},
		{"bool 2 in range", into(new(DescribeTopicResponse)),
			payload(be64(1), str("t"), zeros(9), be32(1), zeros(24), oneByte(2), emptyList(), zeros(16), emptyList(), emptyList())},
		{"absent required token", into(new(TokenResponse)), absent()},
		{"absent required user", into(new(ListUsersResponse)), payload(be32(1), absent(), emptyList())},
		{"absent required group", into(new(ListGroupsResponse)), payload(be32(1), absent())},
		{"absent required reason", func(p []byte) error { _, err := DecodeError(p); return err }, absent()},
		{"empty payload has a byte", decodeKey(KeyListUsers), oneByte(0)},
		{"list_policies count", into(new(ListPoliciesResponse)), payload(lots(huge), zeros(10))},
		{"list_policies field count", into(new(ListPoliciesResponse)), payload(be32(1), str("p"), be64(0), u16(0xFFFF), zeros(10))},
		{"define_policy field count", decodeKey(KeyDefinePolicy), payload(str("p"), u16(0xFFFF), zeros(10))},
		{"define_policy string length", decodeKey(KeyDefinePolicy), payload(str("p"), u16(1), str("f"), oneByte(policyStr), lots(huge), zeros(10))},
		{"define_policy name length", decodeKey(KeyDefinePolicy), payload(oneByte(strPresent), lots(huge), zeros(10))},
		{"get_topic_policy effective count", into(new(GetTopicPolicyResponse)), payload(str("t"), absent(), str("none"), u16(0), u16(0xFFFF), zeros(10))},
		{"get_topic_policy absent resolution", into(new(GetTopicPolicyResponse)), payload(str("t"), absent(), absent(), u16(0), u16(0))},
		{"fetch_batches flags 0", decodeKey(KeyFetchBatches), payload(absent(), absent(), absent(), absent(), zeros(12), oneByte(0))},
		{"fetch_batches response bound 2", into(new(FetchBatchesResponse)), payload(absent(), emptyList(), be64(1), oneByte(2))},
		{"second record truncated", decodeKey(KeyProduce), payload(str("t"), be32(2), record(absent()), zeros(16))},
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.decode(tc.payload); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

// Oversized counts must fail before anything is allocated for them: the
// bytes allocated per rejected decode stay small (error values only).
func TestBadInputAllocatesLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocation")
	}
	for _, tc := range badCases() {
		const runs = 50
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			_ = tc.decode(tc.payload)
		}
		runtime.ReadMemStats(&after)
		if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 4<<10 {
			t.Errorf("%s: %d bytes allocated per rejected decode", tc.name, perRun)
		}
	}
}

// Decoded byte slices alias the payload with capacity capped at their
// length, and each record's headers are capped too, so appends by the
// caller cannot clobber neighbouring fields or records.
func TestDecodedSlicesAliasAndAreCapped(t *testing.T) {
	payload := ProduceRequest{Topic: new("t"), Records: sampleRecords()}.AppendPayload(nil)
	var p ProduceRequest
	if err := p.Decode(payload); err != nil {
		t.Fatal(err)
	}
	k := p.Records[0].Key
	if cap(k) != len(k) {
		t.Fatalf("key cap %d, len %d", cap(k), len(k))
	}
	k[0] = 'U'
	if p.Records[0].Key[0] != 'U' || payload[6+4+5] != 'U' { // after str("t"), the count, the key's tag and length
		t.Fatal("decoded key does not alias the payload")
	}
	h0 := p.Records[0].Headers
	_ = append(h0, Header{Key: []byte("x")})
	if want := sampleRecords()[2].Headers; !reflect.DeepEqual(p.Records[2].Headers, want) {
		t.Fatalf("appending to record 0's headers changed record 2's: %v", p.Records[2].Headers)
	}
}

// Decode into a used ProduceRequest reuses its Records capacity and
// leaves no trace of the previous contents.
func TestProduceDecodeReuse(t *testing.T) {
	var p ProduceRequest
	big := ProduceRequest{Topic: new("a"), Records: sampleRecords()}.AppendPayload(nil)
	small := ProduceRequest{Topic: nil, Records: sampleRecords()[1:2]}.AppendPayload(nil)
	if err := p.Decode(big); err != nil {
		t.Fatal(err)
	}
	backing := &p.Records[:1][0]
	if err := p.Decode(small); err != nil {
		t.Fatal(err)
	}
	if &p.Records[0] != backing {
		t.Fatal("Records capacity was not reused")
	}
	want := ProduceRequest{Topic: nil, Records: sampleRecords()[1:2]}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("after reuse %#v, want %#v", p, want)
	}
}
