// Allocation tests: a decoder sizes what it allocates by the bytes that
// are actually in the payload, never by a count the payload declares. A
// count is accepted if the remaining bytes could hold that many items of
// the smallest encoding, but a decoded item is larger in memory than its
// smallest encoding (a Header is 48 bytes, its smallest encoding 2), so
// preallocating for the declared count would multiply a frame's size
// before a single item had been read.
package wire

import (
	"bytes"
	"runtime"
	"testing"
)

// declaredCounts are payloads of about 64 KiB that declare as many items
// as the minimum-size check lets through and then fail at the first item,
// so nothing the decoder allocates is backed by a decoded item.
func declaredCounts() []badCase {
	const size = 64 << 10
	filler := func(used int) []byte { return bytes.Repeat([]byte{0xff}, size-used) } // 0xff is no valid str tag
	// most is the largest count of items of min bytes that the check
	// accepts after a prefix of used bytes.
	most := func(used, min int) []byte { return be32(uint32((size - used) / min)) }
	topic := str("t")
	produce := payload(topic, most(len(topic)+4, minRecordLen))
	first := payload(produce, absent(), be32(0), be64(0))
	first = payload(first, most(len(first)+4, minHeaderLen))
	perms := payload(absent(), absent())
	perms = payload(perms, most(len(perms)+4, minStrLen))
	return []badCase{
		{"produce: records and the first record's headers", decodeKey(KeyProduce), payload(first, filler(len(first)))},
		{"produce: records", decodeKey(KeyProduce), payload(produce, filler(len(produce)))},
		{"fetch response: records", func(p []byte) error { return new(FetchResponse).Decode(p) }, payload(most(4, minRecordLen), filler(4))},
		{"create_user: perms", decodeKey(KeyCreateUser), payload(perms, filler(len(perms)))},
		{"list_groups: names", func(p []byte) error { return new(ListGroupsResponse).Decode(p) }, payload(most(4, minPresent), filler(4))},
		{"split_range: children", func(p []byte) error { return new(SplitRangeResponse).Decode(p) }, payload(most(4, minU64Len), filler(4))},
		{"list_users: users", func(p []byte) error { return new(ListUsersResponse).Decode(p) }, payload(most(4, minUserEntryLen), filler(4))},
		{"list_acls: grants", func(p []byte) error { return new(ListACLsResponse).Decode(p) }, payload(most(4, minACLEntryLen), filler(4))},
		{"list_topics: topics", func(p []byte) error { return new(ListTopicsResponse).Decode(p) }, payload(most(4, minTopicSummaryLen), filler(4))},
		{"describe_group: ranges", func(p []byte) error { return new(DescribeGroupResponse).Decode(p) }, payload(str("g"), absent(), be64(0), most(19, minRangeLagLen), filler(19))},
	}
}

// TestDeclaredCountsAllocateByBytesPresent: each payload fails to decode,
// and what the attempt allocated stays within twice the payload's size
// (one preallocation for the list and one for the first record's
// headers, each bounded by the bytes left).
func TestDeclaredCountsAllocateByBytesPresent(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocation")
	}
	for _, tc := range declaredCounts() {
		if err := tc.decode(tc.payload); err == nil {
			t.Fatalf("%s: decoded", tc.name)
		}
		const runs = 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			_ = tc.decode(tc.payload)
		}
		runtime.ReadMemStats(&after)
		perRun := (after.TotalAlloc - before.TotalAlloc) / runs
		if limit := 2*uint64(len(tc.payload)) + 4<<10; perRun > limit {
			t.Errorf("%s: %d bytes allocated for a %d-byte payload (%.1fx); limit %d",
				tc.name, perRun, len(tc.payload), float64(perRun)/float64(len(tc.payload)), limit)
		}
	}
}

// TestManyItemsStillDecode: lists whose items are really there decode
// whole, however far that is beyond the first preallocation.
func TestManyItemsStillDecode(t *testing.T) {
	recs := make([]Record, 5000)
	for i := range recs {
		recs[i] = Record{Value: []byte{byte(i)}, Headers: []Header{{Key: []byte{byte(i >> 8)}}, {}}}
	}
	in := ProduceRequest{Topic: new("t"), Records: recs}
	var out ProduceRequest
	if err := out.Decode(in.AppendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.AppendPayload(nil), in.AppendPayload(nil)) || len(out.Records) != len(recs) {
		t.Fatalf("decoded %d records, want %d, or they re-encode differently", len(out.Records), len(recs))
	}
	for i := range out.Records {
		if h := out.Records[i].Headers; cap(h) != len(h) || len(h) != 2 {
			t.Fatalf("record %d: headers len %d cap %d", i, len(h), cap(h))
		}
	}
	perms := make([]*string, 20000)
	for i := range perms {
		perms[i] = new("p")
	}
	var cu CreateUserRequest
	if err := cu.Decode(CreateUserRequest{Perms: perms}.AppendPayload(nil)); err != nil || len(cu.Perms) != len(perms) {
		t.Fatalf("create_user: %d perms (%v)", len(cu.Perms), err)
	}
}
