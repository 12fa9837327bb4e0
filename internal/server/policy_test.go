package server

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/wire"
)

// rawRequest is a request frame with any payload, for payloads no encoder
// would write.
type rawRequest struct {
	key     uint16
	payload []byte
}

func (r rawRequest) APIKey() uint16                  { return r.key }
func (r rawRequest) AppendPayload(dst []byte) []byte { return append(dst, r.payload...) }

func intValue(n int64) wire.PolicyValue { return wire.PolicyValue{Int: n} }

var offValue = wire.PolicyValue{Off: true}

func listPoliciesOver(t *testing.T, c *rawClient, corr uint32) []wire.PolicyInfo {
	t.Helper()
	var resp wire.ListPoliciesResponse
	if err := resp.Decode(c.ok(corr, &wire.ListPoliciesRequest{})); err != nil {
		t.Fatal(err)
	}
	return resp.Policies
}

func topicPolicyOver(t *testing.T, c *rawClient, corr uint32, topic string) wire.GetTopicPolicyResponse {
	t.Helper()
	var resp wire.GetTopicPolicyResponse
	if err := resp.Decode(c.ok(corr, &wire.GetTopicPolicyRequest{Topic: topic})); err != nil {
		t.Fatal(err)
	}
	return resp
}

func effectiveField(t *testing.T, tp wire.GetTopicPolicyResponse, name string) wire.EffectiveField {
	t.Helper()
	for _, f := range tp.Effective {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no effective field %q in %+v", name, tp.Effective)
	return wire.EffectiveField{}
}

// Keys 17–21 define, list, bind, get and delete policies; off, 0 and a
// field left out are three different answers.
func TestPolicyKeysOverTheWire(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	admin.ok(3, &wire.DefinePolicyRequest{Name: "short", Fields: []wire.PolicyField{
		{Name: "retention.max_age_ms", Value: intValue(0)},
		{Name: "max_bytes", Value: offValue},
		{Name: "placement", Value: wire.PolicyValue{Str: "soft", IsStr: true}},
	}})
	ps := listPoliciesOver(t, admin, 4)
	if len(ps) != 1 || ps[0].Name != "short" || ps[0].DefinedAt == 0 {
		t.Fatalf("list %+v", ps)
	}
	want := []wire.PolicyField{
		{Name: "max_age_ms", Value: intValue(0)},
		{Name: "max_bytes", Value: offValue},
		{Name: "placement", Value: wire.PolicyValue{Str: "soft", IsStr: true}},
	}
	if len(ps[0].Fields) != len(want) {
		t.Fatalf("fields %+v, want %+v", ps[0].Fields, want)
	}
	for i := range want {
		if ps[0].Fields[i] != want[i] {
			t.Fatalf("field %d: %+v, want %+v", i, ps[0].Fields[i], want[i])
		}
	}

	tp := topicPolicyOver(t, admin, 5, "t")
	if tp.Topic != "t" || tp.Policy != nil || tp.Resolution != "none" || len(tp.Definition) != 0 {
		t.Fatalf("unbound topic %+v", tp)
	}
	if f := effectiveField(t, tp, "max_age_ms"); f.Origin != "global" {
		t.Fatalf("unbound max_age_ms %+v", f)
	}

	admin.ok(6, &wire.BindTopicPolicyRequest{Topic: "t", Policy: str("short")})
	tp = topicPolicyOver(t, admin, 7, "t")
	if tp.Policy == nil || *tp.Policy != "short" || tp.Resolution != "resolved" || len(tp.Definition) != 3 {
		t.Fatalf("bound topic %+v", tp)
	}
	if f := effectiveField(t, tp, "max_age_ms"); f.Origin != "policy" || f.Value != intValue(0) {
		t.Fatalf("max_age_ms 0 from the policy: %+v", f)
	}
	if f := effectiveField(t, tp, "max_bytes"); f.Origin != "policy" || !f.Value.Off {
		t.Fatalf("max_bytes off from the policy: %+v", f)
	}
	if f := effectiveField(t, tp, "max_records"); f.Origin != "global" {
		t.Fatalf("max_records inherited: %+v", f)
	}

	admin.refused(8, &wire.DeletePolicyRequest{Name: "short"}, wire.ReasonPolicyInUse)
	admin.refused(9, &wire.BindTopicPolicyRequest{Topic: "t", Policy: str("undefined")}, wire.ReasonNoSuchPolicy)
	admin.refused(10, &wire.BindTopicPolicyRequest{Topic: "nope", Policy: str("short")}, wire.ReasonNoSuchTopic)
	admin.refused(11, &wire.GetTopicPolicyRequest{Topic: "nope"}, wire.ReasonNoSuchTopic)
	admin.ok(12, &wire.BindTopicPolicyRequest{Topic: "t"})
	if tp = topicPolicyOver(t, admin, 13, "t"); tp.Policy != nil || tp.Resolution != "none" {
		t.Fatalf("unbound again %+v", tp)
	}
	admin.ok(14, &wire.DeletePolicyRequest{Name: "short"})
	admin.refused(15, &wire.DeletePolicyRequest{Name: "short"}, wire.ReasonNoSuchPolicy)
	if ps := listPoliciesOver(t, admin, 16); len(ps) != 0 {
		t.Fatalf("after delete %+v", ps)
	}
}

// A forced delete removes a policy still bound: the topic then resolves
// to nothing and its retention fields are off, "unresolved".
func TestPolicyForcedDeleteLeavesTopicUnresolved(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.DefinePolicyRequest{Name: "p", Fields: []wire.PolicyField{{Name: "max_records", Value: intValue(10)}}})
	admin.ok(3, &wire.CreateTopicExRequest{Topic: str("t"), Bits: 8, Ranges: 1, Policy: "p"})
	if tp := topicPolicyOver(t, admin, 4, "t"); tp.Policy == nil || *tp.Policy != "p" || tp.Resolution != "resolved" {
		t.Fatalf("created bound %+v", tp)
	}
	admin.refused(5, &wire.CreateTopicExRequest{Topic: str("u"), Bits: 8, Ranges: 1, Policy: "undefined"}, wire.ReasonNoSuchPolicy)
	admin.ok(6, &wire.DeletePolicyRequest{Name: "p", Force: true})
	tp := topicPolicyOver(t, admin, 7, "t")
	if tp.Policy == nil || *tp.Policy != "p" || tp.Resolution != "unresolved" || len(tp.Definition) != 0 {
		t.Fatalf("after a forced delete %+v", tp)
	}
	if f := effectiveField(t, tp, "max_records"); !f.Value.Off || f.Origin != "unresolved" {
		t.Fatalf("max_records %+v", f)
	}
	var topics wire.ListTopicsResponse
	if err := topics.Decode(admin.ok(8, &wire.ListTopicsRequest{})); err != nil || len(topics.Topics) != 1 {
		t.Fatalf("the refused create made a topic: %+v %v", topics, err)
	}
}

// Definitions the metadata cannot take are refused invalid_policy, and
// nothing is defined.
func TestPolicyInvalidDefinitionsRefused(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	for i, fs := range [][]wire.PolicyField{
		{{Name: "max_wisdom", Value: intValue(1)}},
		{{Name: "max_bytes", Value: intValue(-1)}},
		{{Name: "max_bytes", Value: wire.PolicyValue{Str: "big", IsStr: true}}},
		{{Name: "replicas", Value: offValue}},
		{{Name: "replicas", Value: intValue(17)}},
		{{Name: "segment_max_bytes", Value: intValue(100)}},
		{{Name: "placement", Value: wire.PolicyValue{Str: "anywhere", IsStr: true}}},
		{{Name: "max_records", Value: intValue(1)}, {Name: "max_records", Value: intValue(2)}},
		{{Name: "max_age_ms", Value: intValue(1)}, {Name: "retention.max_age_ms", Value: intValue(2)}},
	} {
		admin.refused(uint32(10+i), &wire.DefinePolicyRequest{Name: "p", Fields: fs}, wire.ReasonInvalidPolicy)
	}
	if ps := listPoliciesOver(t, admin, 99); len(ps) != 0 {
		t.Fatalf("a refused definition was stored: %+v", ps)
	}
}

// The policy keys are the admin's: anyone else is refused, the refusal
// is audited, and nothing changes.
func TestPolicyKeysNeedAdmin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{Audit: audit.Config{Path: path}}}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	admin.ok(3, &wire.DefinePolicyRequest{Name: "keep", Fields: []wire.PolicyField{{Name: "max_records", Value: intValue(5)}}})

	user := n.login(t, "producer", "producer123")
	for i, req := range []wire.Request{
		&wire.CreateTopicExRequest{Topic: str("u"), Bits: 8, Ranges: 1, Policy: "keep"},
		&wire.DefinePolicyRequest{Name: "mine", Fields: []wire.PolicyField{{Name: "max_bytes", Value: intValue(1)}}},
		&wire.DeletePolicyRequest{Name: "keep", Force: true},
		&wire.ListPoliciesRequest{},
		&wire.BindTopicPolicyRequest{Topic: "t", Policy: str("keep")},
		&wire.GetTopicPolicyRequest{Topic: "t"},
	} {
		user.refused(uint32(2+i), req, wire.ReasonPermissionDenied)
	}
	ps := listPoliciesOver(t, admin, 4)
	if len(ps) != 1 || ps[0].Name != "keep" {
		t.Fatalf("policies changed: %+v", ps)
	}
	if tp := topicPolicyOver(t, admin, 5, "t"); tp.Policy != nil {
		t.Fatalf("topic bound by a non-admin: %+v", tp)
	}
	admin.refused(6, &wire.GetTopicPolicyRequest{Topic: "u"}, wire.ReasonNoSuchTopic)
	// Without a policy, creating is the producer's as before.
	user.ok(20, &wire.CreateTopicExRequest{Topic: str("u"), Bits: 8, Ranges: 2})
	n.s.Shutdown(t.Context())
	n.b.Close() // flushes the audit log
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, want := range []string{
		`"type":"policy_defined","result":"ok","user":"admin"`,
		`"type":"permission_denied","result":"refused","user":"producer"`,
		`"operation":"define_policy"`,
		`"operation":"create_topic_ex"`,
		`"operation":"bind_topic_policy"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// Payloads the codecs cannot read are answered malformed_request, and the
// connection goes on.
func TestPolicyMalformedPayloads(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	good := func(req wire.Request) []byte { return req.AppendPayload(nil) }
	define := good(wire.DefinePolicyRequest{Name: "p", Fields: []wire.PolicyField{{Name: "max_bytes", Value: intValue(1)}}})
	fetch := good(wire.FetchBatchesRequest{Topic: str("t")})
	describe := good(wire.DescribeGroupRequest{Topic: str("t"), Group: str("g")})
	for i, req := range []rawRequest{
		{wire.KeyDefinePolicy, define[:len(define)-3]},                                            // truncated bound
		{wire.KeyDefinePolicy, append(bytes.Clone(define), 0)},                                    // trailing byte
		{wire.KeyDefinePolicy, append(good(wire.DefinePolicyRequest{Name: "p"})[:6], 0xff, 0xff)}, // field count past the payload
		{wire.KeyDeletePolicy, good(wire.ListPoliciesRequest{})},                                  // no name
		{wire.KeyListPolicies, []byte{0}},                                                         // not empty
		{wire.KeyBindTopicPolicy, good(wire.GetTopicPolicyRequest{Topic: "t"})[:3]},
		{wire.KeyGetTopicPolicy, nil},
		{wire.KeyFetchBatches, append(bytes.Clone(fetch), 0)},    // flags present and zero
		{wire.KeyFetchBatches, append(bytes.Clone(fetch), 0x80)}, // an unknown flag
		{wire.KeyDescribeGroup, append(bytes.Clone(describe), 0)},
		{wire.KeyCreateTopicEx, append(good(wire.CreateTopicExRequest{Topic: str("u"), Bits: 8, Ranges: 1}), 0)}, // replicas present and zero
	} {
		admin.refused(uint32(10+i), req, wire.ReasonMalformedRequest)
	}
	if ps := listPoliciesOver(t, admin, 50); len(ps) != 0 {
		t.Fatalf("a malformed define stored %+v", ps)
	}
}

// produceOver stores values in topic t through produce_batches.
func produceOver(t *testing.T, c *rawClient, corr uint32, values ...string) {
	t.Helper()
	var recs []segment.Record
	for _, v := range values {
		recs = append(recs, segment.Record{Key: []byte(v), Value: []byte(v), Timestamp: 7})
	}
	batch, err := segment.EncodeBatch(nil, 0, recs, segment.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	var routes wire.TopicRoutesResponse
	if err := routes.Decode(c.ok(corr, &wire.TopicRoutesRequest{Topic: str("t")})); err != nil {
		t.Fatal(err)
	}
	c.ok(corr+1, &wire.ProduceBatchesRequest{Topic: str("t"), Batches: []wire.RangeBatch{{Range: routes.Ranges[0].Range, Batch: batch}}})
}

// A request without the flags byte is answered as before the byte
// existed; with it, the same answer plus a skip report at the end.
func TestSkipReportOnlyWhenAsked(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	produceOver(t, admin, 3, "a", "b", "c")

	old := admin.ok(5, &wire.FetchBatchesRequest{Topic: str("t")})
	var page wire.FetchBatchesResponse
	if err := page.Decode(old); err != nil || page.Skips.Asked || len(page.Batches) != 1 {
		t.Fatalf("old fetch_batches: %+v %v", page, err)
	}
	if want := (wire.FetchBatchesResponse{NextCursor: page.NextCursor, Batches: page.Batches}).AppendPayload(nil); !bytes.Equal(old, want) {
		t.Fatalf("old answer\n%x\nwant\n%x", old, want)
	}
	asked := admin.ok(6, &wire.FetchBatchesRequest{Topic: str("t"), Flags: wire.FlagSkips})
	checkSkipTail(t, "fetch_batches", old, asked)

	admin.ok(7, &wire.CommitRequest{Topic: str("t"), Group: str("g"), Cursor: page.NextCursor})
	oldGroup := admin.ok(8, &wire.DescribeGroupRequest{Topic: str("t"), Group: str("g")})
	var g wire.DescribeGroupResponse
	if err := g.Decode(oldGroup); err != nil || g.Skips.Asked || g.Cursor == nil {
		t.Fatalf("old describe_group: %+v %v", g, err)
	}
	if want := (wire.DescribeGroupResponse{Group: g.Group, Cursor: g.Cursor, Lag: g.Lag, Ranges: g.Ranges}).AppendPayload(nil); !bytes.Equal(oldGroup, want) {
		t.Fatalf("old describe_group answer\n%x\nwant\n%x", oldGroup, want)
	}
	checkSkipTail(t, "describe_group", oldGroup, admin.ok(9, &wire.DescribeGroupRequest{Topic: str("t"), Group: str("g"), Flags: wire.FlagSkips}))

	// Two subscriptions from the start, one asking for skips: their
	// first pushes differ by the report alone.
	plain := n.login(t, "admin", "admin123")
	plain.send(2, &wire.SubscribeBatchesRequest{Topic: str("t"), Window: 10})
	skips := n.login(t, "admin", "admin123")
	skips.send(2, &wire.SubscribeBatchesRequest{Topic: str("t"), Window: 10, Flags: wire.FlagSkips})
	checkSkipTail(t, "subscribe_batches", pushOf(t, plain, 2), pushOf(t, skips, 2))
}

func pushOf(t *testing.T, c *rawClient, corr uint32) []byte {
	t.Helper()
	got, payload, reason, err := c.recv()
	if got != corr || reason != "" || err != nil {
		t.Fatalf("push: corr %d reason %q err %v", got, reason, err)
	}
	return payload
}

// skipsLen is the encoded size of a skip report: skipped:u64 bound:u8.
const skipsLen = 8 + 1

// checkSkipTail wants asked to be old followed by a skip report of no
// records, and the connection still in step after it.
func checkSkipTail(t *testing.T, what string, old, asked []byte) {
	t.Helper()
	if len(asked) != len(old)+skipsLen || !bytes.Equal(asked[:len(old)], old) {
		t.Fatalf("%s with skips\n%x\nwithout\n%x", what, asked, old)
	}
	if tail := asked[len(old):]; !bytes.Equal(tail, make([]byte, skipsLen)) {
		t.Fatalf("%s: skip report %x, want none skipped", what, tail)
	}
}

// The vectored frame of a fetch_batches answer with a skip report is
// byte for byte the frame the codec writes, large batches and all, and
// its release gives the page's buffers back.
func TestBatchesFrameWithSkipsMatchesCodec(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 10<<10)
	small := []byte{1, 2, 3}
	for _, skips := range []wire.Skips{{}, {Asked: true, Count: 1<<40 + 3, Bound: true}, {Asked: true}} {
		cur := "Q1VS"
		released := 0
		frame := batchesFrame(42, &cur, []broker.RangeBatch{{Range: 1, Batch: big}, {Range: 2, Batch: small}}, skips, func() { released++ })
		var got []byte
		for _, p := range frame.pieces {
			got = append(got, p...)
		}
		want := wire.AppendOKFrame(nil, 42, &wire.FetchBatchesResponse{
			NextCursor: &cur, Batches: []wire.RangeBatch{{Range: 1, Batch: big}, {Range: 2, Batch: small}}, Skips: skips,
		})
		if !bytes.Equal(got, want) || frame.n != int64(len(want)) {
			t.Fatalf("skips %+v: frame of %d bytes (n %d), codec %d bytes", skips, len(got), frame.n, len(want))
		}
		// The writer's release gives back the framing's buffer and the
		// page's read buffers, once.
		frame.release()
		if released != 1 {
			t.Fatalf("skips %+v: the page's release ran %d times", skips, released)
		}
	}
}

// api_versions lists the policy keys and version 2 of the keys that grew.
func TestAPIVersionsListsPolicyKeys(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	c := n.login(t, "admin", "admin123")
	var v wire.APIVersionsResponse
	if err := v.Decode(c.ok(2, &wire.APIVersionsRequest{})); err != nil {
		t.Fatal(err)
	}
	for key := wire.KeyDefinePolicy; key <= wire.KeyGetTopicPolicy; key++ {
		if !v.Serves(key, 1) {
			t.Errorf("key %d not listed", key)
		}
	}
	for _, key := range []uint16{wire.KeyCreateTopicEx, wire.KeyDescribeGroup, wire.KeyFetchBatches, wire.KeySubscribeBatches} {
		if !v.Serves(key, 2) || !v.Serves(key, 1) {
			t.Errorf("key %d: versions 1 and 2 not both listed: %+v", key, v.Keys)
		}
	}
}

// describeSegments returns the segments of topic t's only range.
func describeSegments(t *testing.T, c *rawClient, corr uint32) []wire.SegmentInfo {
	t.Helper()
	var d wire.DescribeTopicResponse
	if err := d.Decode(c.ok(corr, &wire.DescribeTopicRequest{Topic: str("t")})); err != nil {
		t.Fatal(err)
	}
	if len(d.Ranges) != 1 {
		t.Fatalf("ranges %+v", d.Ranges)
	}
	return d.Ranges[0].Segments
}

// A reader whose unread records retention deleted is told how many, on
// the page that passes them and on its group's description after the
// commit; a reader that did not ask is told nothing.
func TestSkipReportCountsDeletedRecords(t *testing.T) {
	n := startAuthNode(t, broker.Config{SegmentMaxBytes: 1 << 10, RetentionInterval: time.Second}, Config{})
	admin := n.login(t, "admin", "admin123")
	admin.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 8})
	value := strings.Repeat("x", 300)
	for i := range 6 {
		produceOver(t, admin, uint32(10+2*i), value+"a", value+"b", value+"c", value+"d")
	}
	// A small last record, so the active segment is not full: a full one
	// would roll, and the sweep would then take every record.
	produceOver(t, admin, 28, "z")
	before := describeSegments(t, admin, 30)
	if len(before) < 3 {
		t.Fatalf("want several segments to expire, have %d", len(before))
	}
	// A group that has read one record.
	var first wire.FetchBatchesResponse
	if err := first.Decode(admin.ok(31, &wire.FetchBatchesRequest{Topic: str("t"), MaxRecords: 1})); err != nil || first.NextCursor == nil {
		t.Fatalf("first page %+v %v", first, err)
	}
	admin.ok(32, &wire.CommitRequest{Topic: str("t"), Group: str("g"), Cursor: first.NextCursor})

	// Keep no sealed record; never roll the quiet active segment, so
	// records remain to read after the hole.
	admin.ok(33, &wire.DefinePolicyRequest{Name: "none", Fields: []wire.PolicyField{
		{Name: "max_records", Value: intValue(0)}, {Name: "segment_max_age_ms", Value: offValue},
	}})
	admin.ok(34, &wire.BindTopicPolicyRequest{Topic: "t", Policy: str("none")})
	var after []wire.SegmentInfo
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for corr := uint32(100); ; corr++ {
		// Every sealed segment goes (max_records 0): wait for the whole
		// sweep, so nothing read below is deleted after it was read.
		if after = describeSegments(t, admin, corr); len(after) == 1 && after[0].Active {
			break
		}
		select {
		case <-tick.C:
			n.clock.Advance(time.Second)
		case <-deadline:
			t.Fatalf("sealed segments remain: %+v", after)
		}
	}
	var deleted uint64
	for _, s := range before {
		if !slices.ContainsFunc(after, func(a wire.SegmentInfo) bool { return a.ID == s.ID }) {
			deleted += s.Records
		}
	}
	want := deleted - 1 // the one record the group read

	var plain wire.FetchBatchesResponse
	if err := plain.Decode(admin.ok(40, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: first.NextCursor})); err != nil || plain.Skips.Asked {
		t.Fatalf("without the flag: %+v %v", plain.Skips, err)
	}
	var page wire.FetchBatchesResponse
	if err := page.Decode(admin.ok(41, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: first.NextCursor, Flags: wire.FlagSkips})); err != nil {
		t.Fatal(err)
	}
	if !page.Skips.Asked || page.Skips.Count != want || page.Skips.Bound {
		t.Fatalf("skips %+v, want %d exact (%d records deleted, 1 read)", page.Skips, want, deleted)
	}
	// Reported once: the page's cursor has passed the hole.
	var next wire.FetchBatchesResponse
	if err := next.Decode(admin.ok(42, &wire.FetchBatchesRequest{Topic: str("t"), Cursor: page.NextCursor, Flags: wire.FlagSkips})); err != nil || next.Skips.Count != 0 {
		t.Fatalf("next page skips %+v %v", next.Skips, err)
	}
	// A subscription of the group, still at its old position, is told on
	// its first push.
	sub := n.login(t, "admin", "admin123")
	sub.send(2, &wire.SubscribeBatchesRequest{Topic: str("t"), Group: str("g"), Window: 100, Flags: wire.FlagSkips})
	var push wire.FetchBatchesResponse
	if err := push.Decode(pushOf(t, sub, 2)); err != nil || push.Skips.Count != want {
		t.Fatalf("first push skips %+v, want %d: %v", push.Skips, want, err)
	}
	admin.ok(43, &wire.CommitRequest{Topic: str("t"), Group: str("g"), Cursor: page.NextCursor})
	var g wire.DescribeGroupResponse
	if err := g.Decode(admin.ok(44, &wire.DescribeGroupRequest{Topic: str("t"), Group: str("g"), Flags: wire.FlagSkips})); err != nil {
		t.Fatal(err)
	}
	if !g.Skips.Asked || g.Skips.Count != want {
		t.Fatalf("group skips %+v, want %d", g.Skips, want)
	}
}
