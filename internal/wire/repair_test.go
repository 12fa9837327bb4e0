package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

var genClusterRepair = rapid.Custom(func(t *rapid.T) *ClusterRepair {
	r := genRepairLists.Draw(t, "lists")
	// Each total counts at least its list.
	extra := func(label string) uint32 { return rapid.Uint32Range(0, math.MaxUint32/2).Draw(t, label) }
	r.UnderReplicatedTotal = uint32(len(r.UnderReplicatedSegments)) + extra("urtotal")
	r.HealingTotal = uint32(len(r.Healing)) + extra("healingtotal")
	r.DamagedTotal = uint32(len(r.Damaged)) + extra("damagedtotal")
	r.ProblemsTotal = uint32(len(r.Problems)) + extra("problemstotal")
	return r
})

var genRepairLists = rapid.Custom(func(t *rapid.T) *ClusterRepair {
	return &ClusterRepair{
		UnderReplicated: listOf(t, "ur", rapid.Custom(func(t *rapid.T) UnderReplicatedTopic {
			return UnderReplicatedTopic{Topic: genString.Draw(t, "topic"), Segments: genU32.Draw(t, "segments")}
		})),
		UnderReplicatedSegments: listOf(t, "urs", rapid.Custom(func(t *rapid.T) UnderReplicatedSegment {
			return UnderReplicatedSegment{
				Topic: genString.Draw(t, "topic"), Range: genU64.Draw(t, "range"), Segment: genU64.Draw(t, "segment"),
				Active: genBool.Draw(t, "active"), Replicas: listOf(t, "replicas", genString),
				Live: genU32.Draw(t, "live"), Factor: genU32.Draw(t, "factor"),
			}
		})),
		Healing: listOf(t, "healing", rapid.Custom(func(t *rapid.T) HealingCopy {
			return HealingCopy{Segment: genU64.Draw(t, "segment"), Source: genU64.Draw(t, "source"),
				Target: genU64.Draw(t, "target"), Bytes: genU64.Draw(t, "bytes")}
		})),
		Damaged: listOf(t, "damaged", rapid.Custom(func(t *rapid.T) DamagedCopy {
			return DamagedCopy{Segment: genU64.Draw(t, "segment"), Node: genU64.Draw(t, "node")}
		})),
		Problems: listOf(t, "problems", rapid.Custom(func(t *rapid.T) HealProblem {
			return HealProblem{Segment: genU64.Draw(t, "segment"), Problem: genString.Draw(t, "problem"), Detail: genString.Draw(t, "detail")}
		})),
		ScrubCopies: genU32.Draw(t, "copies"), ScrubBehind: genBool.Draw(t, "behind"),
	}
})

// sampleStatusWithRepair has every list of the repair section filled.
func sampleStatusWithRepair() *ClusterStatusResponse {
	return &ClusterStatusResponse{Node: 1, Vnodes: 8,
		Nodes: []ClusterNode{
			{ID: 1, Registered: true, Liveness: "alive", Disk: "ok"},
			{ID: 2, Registered: true, Liveness: "alive", Disk: "full", Attrs: []ClusterAttr{{Key: "malachi.disk", Value: "full"}}},
			{ID: 3, Registered: true, Liveness: "dead"},
		},
		Peers: []ClusterPeer{{Node: 2, Connected: true}},
		Repair: &ClusterRepair{
			UnderReplicated: []UnderReplicatedTopic{{Topic: "orders", Segments: 250}},
			UnderReplicatedSegments: []UnderReplicatedSegment{
				{Topic: "orders", Range: 1, Segment: 7, Replicas: []string{"node-1", "node-3"}, Live: 1, Factor: 2},
				{Topic: "orders", Range: 1, Segment: 9, Active: true, Replicas: []string{"node-3"}, Live: 0, Factor: 2},
			},
			UnderReplicatedTotal: 250,
			Healing:              []HealingCopy{{Segment: 7, Source: 1, Target: 2, Bytes: 4096}},
			HealingTotal:         1,
			Damaged:              []DamagedCopy{{Segment: 5, Node: 2}, {Segment: 6, Node: math.MaxUint64}},
			DamagedTotal:         5000,
			Problems:             []HealProblem{{Segment: 11, Problem: "no_source", Detail: "every copy is damaged"}},
			ProblemsTotal:        math.MaxUint32,
			ScrubCopies:          40, ScrubBehind: true,
		},
	}
}

func TestClusterStatusRepairRoundTrip(t *testing.T) {
	want := sampleStatusWithRepair()
	var got ClusterStatusResponse
	if err := got.Decode(want.AppendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, *want)
	}
	if got.Nodes[2].Disk != "" || got.Nodes[1].Disk != "full" {
		t.Fatalf("disks %+v", got.Nodes)
	}
}

// Without the repair section the answer is the older layout byte for
// byte, which decodes with no repair and no disks.
func TestClusterStatusWithoutRepairIsTheOlderLayout(t *testing.T) {
	with := sampleStatusWithRepair()
	without := *with
	without.Repair = nil
	old := without.AppendPayload(nil)
	// The older layout, written out: node vnodes, 3 nodes, no groups, one peer.
	var want []byte
	want = appendU32(appendU64(want, 1), 8)
	want = appendU32(want, 3)
	for _, n := range with.Nodes {
		want = appendBool(appendU64(want, n.ID), n.Registered)
		for _, s := range []string{n.Liveness, "", "", "", ""} {
			want = appendString(want, s)
		}
		want = appendU32(want, uint32(len(n.Attrs)))
		for _, a := range n.Attrs {
			want = appendString(appendString(want, a.Key), a.Value)
		}
	}
	want = appendU32(want, 0)
	want = appendU32(want, 1)
	want = appendBool(appendU64(want, 2), true)
	want = append(want, make([]byte, 5*8)...)
	if !bytes.Equal(old, want) {
		t.Fatalf("encoding without repair\n%x\nwant the older layout\n%x", old, want)
	}
	var got ClusterStatusResponse
	if err := got.Decode(old); err != nil {
		t.Fatal(err)
	}
	if got.Repair != nil {
		t.Fatalf("repair %+v decoded from the older layout", got.Repair)
	}
	for _, n := range got.Nodes {
		if n.Disk != "" {
			t.Fatalf("node %d disk %q from the older layout", n.ID, n.Disk)
		}
	}
	full := with.AppendPayload(nil)
	if !bytes.HasPrefix(full, old) {
		t.Fatal("the repair section does not trail the older layout")
	}
}

// A repair section cut anywhere is malformed, as is a byte after it or
// a disk count other than the node count.
func TestClusterStatusRepairCutShort(t *testing.T) {
	r := sampleStatusWithRepair()
	full := r.AppendPayload(nil)
	r.Repair = nil
	base := len(r.AppendPayload(nil))
	for n := base + 1; n < len(full); n++ {
		if err := new(ClusterStatusResponse).Decode(full[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut at %d of %d (section from %d): %v", n, len(full), base, err)
		}
	}
	if err := new(ClusterStatusResponse).Decode(append(bytes.Clone(full), 0)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a byte after the section: %v", err)
	}
	// The disks end the section: 3 disks "ok" "full" "" as a count and
	// three strings. Claim two.
	disks := 4 + (1 + 4 + 2) + (1 + 4 + 4) + (1 + 4)
	bad := bytes.Clone(full)
	copy(bad[len(bad)-disks:], be32(2))
	if err := new(ClusterStatusResponse).Decode(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("two disks for three nodes: %v", err)
	}
}

func TestClusterStatusRequestFlags(t *testing.T) {
	var r ClusterStatusRequest
	if err := r.Decode(nil); err != nil || r.WantsRepair() {
		t.Fatalf("empty payload: %+v %v", r, err)
	}
	if p := (ClusterStatusRequest{}).AppendPayload(nil); len(p) != 0 {
		t.Fatalf("a request without flags encodes %x", p)
	}
	if err := r.Decode([]byte{FlagRepair}); err != nil || !r.WantsRepair() {
		t.Fatalf("flag: %+v %v", r, err)
	}
	for _, bad := range [][]byte{{0}, {0x80}, {FlagRepair, 0}} {
		if err := r.Decode(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

func sampleDescribeWithCopies() *DescribeTopicResponse {
	return &DescribeTopicResponse{ID: 1, Name: "orders", Bits: 16, CreatedAt: 1700000000000, Copies: true,
		Ranges: []RangeInfo{
			{ID: 1, End: 1 << 16, Segments: []SegmentInfo{
				{ID: 4, Replicas: []string{"node-1", "node-2"}, Copies: []SegmentCopy{{1, CopyUnchecked}, {2, CopyDamaged}, {3, CopyHealing}}},
				{ID: 8, Active: true, Replicas: []string{"node-2"}, Copies: []SegmentCopy{{math.MaxUint64, CopyMissing}}},
			}},
			{ID: 2, Segments: []SegmentInfo{{ID: 9}}},
			{ID: 3},
		},
		Groups: []string{"g"},
	}
}

func TestDescribeTopicCopiesRoundTrip(t *testing.T) {
	want := sampleDescribeWithCopies()
	var got DescribeTopicResponse
	if err := got.Decode(want.AppendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, *want)
	}
}

func TestDescribeTopicWithoutCopiesIsTheOlderLayout(t *testing.T) {
	with := sampleDescribeWithCopies()
	full := with.AppendPayload(nil)
	without := *with
	without.Copies = false
	old := without.AppendPayload(nil)
	if !bytes.HasPrefix(full, old) || len(full) == len(old) {
		t.Fatal("the copies section does not trail the older layout")
	}
	var got DescribeTopicResponse
	if err := got.Decode(old); err != nil {
		t.Fatal(err)
	}
	if got.Copies || got.Ranges[0].Segments[0].Copies != nil {
		t.Fatalf("copies decoded from the older layout: %+v", got)
	}
	for n := len(old) + 1; n < len(full); n++ {
		if err := new(DescribeTopicResponse).Decode(full[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut at %d of %d: %v", n, len(full), err)
		}
	}
	// The section's count names three segments: claim two, then four.
	for _, n := range []uint32{2, 4} {
		bad := bytes.Clone(full)
		copy(bad[len(old):], be32(n))
		if err := new(DescribeTopicResponse).Decode(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("copies for %d of 3 segments: %v", n, err)
		}
	}
	var req DescribeTopicRequest
	if err := req.Decode(DescribeTopicRequest{Topic: new("orders"), Flags: FlagCopies}.AppendPayload(nil)); err != nil || !req.WantsCopies() {
		t.Fatalf("request with FlagCopies: %+v %v", req, err)
	}
	if err := req.Decode(DescribeTopicRequest{Topic: new("orders")}.AppendPayload(nil)); err != nil || req.WantsCopies() {
		t.Fatalf("request without flags: %+v %v", req, err)
	}
}

func TestVersion2OfRepairViews(t *testing.T) {
	got := map[uint16]KeyVersion{}
	for _, kv := range Versions() {
		got[kv.Key] = kv
	}
	if kv := got[KeyClusterStatus]; kv.Min != 1 || kv.Max != 2 {
		t.Errorf("cluster_status: %+v, want versions 1 to 2", kv)
	}
	// Version 3 of describe_topic describes by pages (describepage.go).
	if kv := got[KeyDescribeTopic]; kv.Min != 1 || kv.Max != 3 {
		t.Errorf("describe_topic: %+v, want versions 1 to 3", kv)
	}
}

// A total below the length of its list is malformed: the count must
// cover what the answer lists.
func TestClusterRepairTotalBelowItsList(t *testing.T) {
	for name, cut := range map[string]func(r *ClusterRepair){
		"under-replicated": func(r *ClusterRepair) { r.UnderReplicatedTotal = 1 },
		"healing":          func(r *ClusterRepair) { r.HealingTotal = 0 },
		"damaged":          func(r *ClusterRepair) { r.DamagedTotal = 1 },
		"problems":         func(r *ClusterRepair) { r.ProblemsTotal = 0 },
	} {
		r := sampleStatusWithRepair()
		cut(r.Repair)
		if err := new(ClusterStatusResponse).Decode(r.AppendPayload(nil)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s total below its list: %v", name, err)
		}
	}
}

// A copies section with fewer lists than the answer has segments covers
// the first ones; the rest are counted as omitted.
func TestDescribeTopicCopiesOmitted(t *testing.T) {
	want := sampleDescribeWithCopies()
	want.Ranges[0].Segments[1].Copies = nil
	want.CopiesOmitted = 2 // segments 8 and 9
	var got DescribeTopicResponse
	if err := got.Decode(want.AppendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, *want)
	}
	full := *sampleDescribeWithCopies()
	if a, b := len(want.AppendPayload(nil)), len(full.AppendPayload(nil)); a != b-CopiesSize(full.Ranges[0].Segments[1].Copies)-CopiesSize(nil) {
		t.Fatalf("with two segments omitted %d bytes, all listed %d", a, b)
	}
	var bad SegmentCopy
	bad.State = copyStates
	full.Ranges[0].Segments[0].Copies[0] = bad
	if err := new(DescribeTopicResponse).Decode(full.AppendPayload(nil)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("copy state %d: %v", bad.State, err)
	}
}

// Each key accepts its own flag bits only: a bit added for one key is
// malformed for every other.
func TestFlagsArePerKey(t *testing.T) {
	requests := []Request{
		&FetchBatchesRequest{Topic: new("t")},
		&SubscribeBatchesRequest{Topic: new("t")},
		&DescribeGroupRequest{Topic: new("t"), Group: new("g")},
		&DescribeTopicRequest{Topic: new("t")},
		&ClusterStatusRequest{},
	}
	const newBit = 1 << 7
	for _, owner := range requests {
		saved := knownFlags[owner.APIKey()]
		knownFlags[owner.APIKey()] = saved | newBit
		for _, r := range requests {
			payload := append(r.AppendPayload(nil), newBit)
			_, err := DecodeRequest(r.APIKey(), payload)
			if r.APIKey() == owner.APIKey() && err != nil {
				t.Errorf("%s: its own new bit: %v", KeyName(r.APIKey()), err)
			}
			if r.APIKey() != owner.APIKey() && !errors.Is(err, ErrMalformed) {
				t.Errorf("%s took the bit added for %s: %v", KeyName(r.APIKey()), KeyName(owner.APIKey()), err)
			}
		}
		knownFlags[owner.APIKey()] = saved
	}
	// Today's bits, each on its own key.
	for _, c := range []struct {
		r    Request
		flag uint8
	}{
		{&DescribeTopicRequest{Topic: new("t")}, FlagCopies},
		{&ClusterStatusRequest{}, FlagRepair},
		{&FetchBatchesRequest{Topic: new("t")}, FlagSkips},
	} {
		if _, err := DecodeRequest(c.r.APIKey(), append(c.r.AppendPayload(nil), c.flag)); err != nil {
			t.Errorf("%s with 0x%02x: %v", KeyName(c.r.APIKey()), c.flag, err)
		}
	}
	if _, ok := knownFlags[KeyListTopics]; ok {
		t.Error("list_topics takes no flags")
	}
}
