package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/auth"
	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

var retentionEpoch = time.Unix(1_700_000_000, 0)

// retentionNode is one single node on a real data directory and a manual
// clock, with a topic of one range bound to a policy.
type retentionNode struct {
	t   *testing.T
	b   *Broker
	clk *clock.Manual
	dir string
	cfg Config
}

func openRetentionNode(t *testing.T, cfg Config) *retentionNode {
	t.Helper()
	n := &retentionNode{t: t, clk: clock.NewManual(retentionEpoch), dir: t.TempDir()}
	cfg.DataDir, cfg.Clock = n.dir, n.clk
	// The loop stays out of the way of the tests that sweep themselves:
	// their clock never reaches its first tick.
	if cfg.RollCheckInterval == 0 {
		cfg.RollCheckInterval = 100_000 * time.Hour
	}
	if cfg.RetentionInterval == 0 {
		cfg.RetentionInterval = 100_000 * time.Hour
	}
	n.cfg = cfg
	n.b = reopen(t, n)
	t.Cleanup(func() { n.b.Close() })
	return n
}

// reopen starts the node again on its data directory.
func reopen(t *testing.T, n *retentionNode) *Broker {
	t.Helper()
	b, err := Open(context.Background(), n.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// topicWith creates topic bound to a new policy of the same name.
func (n *retentionNode) topicWith(topic string, fields map[string]metadata.PolicyValue) {
	n.t.Helper()
	ctx := n.t.Context()
	if err := n.b.DefinePolicy(ctx, topic, fields); err != nil {
		n.t.Fatal(err)
	}
	if err := n.b.CreateTopicWithPolicyAs(ctx, Identity{User: "admin", Perms: []string{auth.PermAdmin}}, topic, 8, 1, 0, topic); err != nil {
		n.t.Fatal(err)
	}
}

// sealedSegment produces recs records (expiring at expiry when not 0)
// and rolls them into a sealed segment, advancing the clock by step
// first so the roll is due.
func (n *retentionNode) sealedSegment(topic string, recs int, expiry int64) {
	n.t.Helper()
	batch := make([]Record, recs)
	for i := range batch {
		batch[i] = Record{Key: []byte(fmt.Sprint("k", i)), Value: make([]byte, 100)}
		if expiry != 0 {
			ttl := expiry - n.clk.Now().UnixMilli()
			batch[i].Expiry = expiry
			batch[i].Headers = []segment.Header{{Key: []byte(retention.TTLHeader), Value: []byte(strconv.FormatInt(ttl, 10))}}
		}
	}
	if _, err := n.b.Produce(n.t.Context(), topic, batch); err != nil {
		n.t.Fatal(err)
	}
	n.clk.Advance(2 * time.Second)
	n.b.rollAged()
}

// segments are the topic's segments, oldest first.
func (n *retentionNode) segments(topic string) []SegmentDescription {
	n.t.Helper()
	d, err := n.b.DescribeTopic(topic)
	if err != nil {
		n.t.Fatal(err)
	}
	return d.Ranges[0].Segments
}

func ids(segs []SegmentDescription) []uint64 {
	out := make([]uint64, 0, len(segs))
	for _, s := range segs {
		out = append(out, s.ID)
	}
	return out
}

// segmentFiles lists the files of segment id in a node's data directory.
func segmentFiles(t testing.TB, dir string, id uint64) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "segments", fmt.Sprintf("%020d*", id)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkKept asserts the topic holds exactly want (by id) and that the
// files of gone are deleted while those of want remain.
func (n *retentionNode) checkKept(topic string, want, gone []uint64) {
	n.t.Helper()
	if got := ids(n.segments(topic)); !slices.Equal(got, want) {
		n.t.Fatalf("segments %v, want %v", got, want)
	}
	for _, id := range gone {
		if f := segmentFiles(n.t, n.dir, id); len(f) != 0 {
			n.t.Fatalf("segment %d was deleted but its files remain: %v", id, f)
		}
	}
	for _, id := range want {
		if len(segmentFiles(n.t, n.dir, id)) == 0 {
			n.t.Fatalf("segment %d is kept but has no file", id)
		}
	}
}

func bound(n int64) metadata.PolicyValue { return metadata.PolicyValue{Int: n} }

// rollFast rolls an active segment older than a second.
var rollFast = map[string]metadata.PolicyValue{metadata.FieldSegmentMaxAge: bound(1000)}

func withRoll(fields map[string]metadata.PolicyValue) map[string]metadata.PolicyValue {
	out := map[string]metadata.PolicyValue{}
	for k, v := range rollFast {
		out[k] = v
	}
	for k, v := range fields {
		out[k] = v
	}
	return out
}

func TestRetentionByAgeDeletesOnlyExpiredSealedSegments(t *testing.T) {
	n := openRetentionNode(t, Config{})
	n.topicWith("aged", withRoll(map[string]metadata.PolicyValue{metadata.FieldMaxAge: bound(time.Hour.Milliseconds())}))
	n.sealedSegment("aged", 3, 0) // sealed at +2s
	n.sealedSegment("aged", 3, 0) // sealed at +4s
	if _, err := n.b.Produce(t.Context(), "aged", []Record{{Key: []byte("a"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	all := ids(n.segments("aged"))
	if len(all) != 3 || !n.segments("aged")[2].Active {
		t.Fatalf("segments %+v, want two sealed and one active", n.segments("aged"))
	}
	n.clk.Advance(time.Hour - 2*time.Second) // the first is exactly max_age old: kept
	if got := n.b.sweepRetention(t.Context()); got != 0 {
		t.Fatalf("swept %d at exactly max_age, want 0", got)
	}
	n.clk.Advance(time.Millisecond)
	if got := n.b.sweepRetention(t.Context()); got != 1 {
		t.Fatalf("swept %d past the first's age, want 1", got)
	}
	n.checkKept("aged", all[1:], all[:1])
	n.clk.Advance(100 * time.Hour) // the active one is never deleted
	if got := n.b.sweepRetention(t.Context()); got != 1 {
		t.Fatalf("swept %d, want 1", got)
	}
	n.checkKept("aged", all[2:], all[:2])
}

func TestRetentionByBytesAndRecordsKeepsTheNewest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field string
		limit func(seg SegmentDescription) int64
	}{
		// Three sealed segments of equal size; a bound one short of two
		// of them keeps exactly the newest.
		{"bytes", metadata.FieldMaxBytes, func(s SegmentDescription) int64 { return 2*int64(s.Bytes) - 1 }},
		{"records", metadata.FieldMaxRecords, func(s SegmentDescription) int64 { return 2*int64(s.Records) - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := openRetentionNode(t, Config{})
			n.topicWith("sized", rollFast)
			for range 3 {
				n.sealedSegment("sized", 4, 0)
			}
			if _, err := n.b.Produce(t.Context(), "sized", []Record{{Key: []byte("a"), Value: []byte("v")}}); err != nil {
				t.Fatal(err)
			}
			segs := n.segments("sized")
			all := ids(segs)
			if err := n.b.DefinePolicy(t.Context(), "sized", withRoll(map[string]metadata.PolicyValue{tc.field: bound(tc.limit(segs[0]))})); err != nil {
				t.Fatal(err)
			}
			if got := n.b.sweepRetention(t.Context()); got != 2 {
				t.Fatalf("swept %d, want 2", got)
			}
			n.checkKept("sized", all[2:], all[:2])
			if got := n.b.sweepRetention(t.Context()); got != 0 {
				t.Fatalf("a second sweep deleted %d more", got)
			}
		})
	}
}

func TestRetentionByTTLDeletesSegmentsWhoseRecordsAllExpired(t *testing.T) {
	n := openRetentionNode(t, Config{})
	n.topicWith("ttl", rollFast)
	start := n.clk.Now().UnixMilli()
	n.sealedSegment("ttl", 3, start+10_000)
	n.sealedSegment("ttl", 3, start+60_000)
	n.sealedSegment("ttl", 3, 0) // no TTL: never by ttl
	all := ids(n.segments("ttl"))
	for i, s := range n.segments("ttl")[:2] {
		if s.MaxExpiry.IsZero() {
			t.Fatalf("segment %d sealed without a max expiry", i)
		}
	}
	n.clk.Advance(10 * time.Second) // now start+16s
	if got := n.b.sweepRetention(t.Context()); got != 1 {
		t.Fatalf("swept %d, want 1", got)
	}
	n.checkKept("ttl", all[1:], all[:1])
	n.clk.Advance(24 * time.Hour)
	if got := n.b.sweepRetention(t.Context()); got != 1 {
		t.Fatalf("swept %d, want 1", got)
	}
	n.checkKept("ttl", all[2:], all[:2])
	var spans []metadata.DeletedSpan
	_ = n.b.plane.ViewRoot(func(st *metadata.State) {
		tp, _ := st.Topic("ttl")
		r, _ := st.Range(tp.Ranges[0])
		spans = r.Deleted
	})
	if len(spans) != 1 || spans[0].Skip || spans[0].Records != 6 {
		t.Fatalf("deleted spans %+v, want one span of 6 records that is no skip", spans)
	}
}

func TestRetentionUnresolvedPolicyExpiresNothing(t *testing.T) {
	n := openRetentionNode(t, Config{Retention: retention.Defaults{metadata.FieldMaxRecords: bound(0)}})
	n.topicWith("orphaned", withRoll(map[string]metadata.PolicyValue{metadata.FieldMaxAge: bound(0)}))
	n.sealedSegment("orphaned", 2, 0)
	n.sealedSegment("orphaned", 2, 0)
	if err := n.b.DeletePolicy(t.Context(), "orphaned", true); err != nil {
		t.Fatal(err)
	}
	tp, err := n.b.TopicPolicy("orphaned")
	if err != nil {
		t.Fatal(err)
	}
	if tp.Resolution != retention.ResolutionUnresolved || tp.Policy == nil || *tp.Policy != "orphaned" {
		t.Fatalf("topic policy %+v, want an unresolved binding to orphaned", tp)
	}
	all := ids(n.segments("orphaned"))
	n.clk.Advance(1000 * time.Hour)
	if got := n.b.sweepRetention(t.Context()); got != 0 {
		t.Fatalf("an unresolved binding expired %d segments", got)
	}
	n.checkKept("orphaned", all, nil)
	// Unbound, the node default (max_records 0) applies.
	if err := n.b.BindTopicPolicy(t.Context(), "orphaned", nil); err != nil {
		t.Fatal(err)
	}
	if got := n.b.sweepRetention(t.Context()); got != len(all) {
		t.Fatalf("swept %d under the node default, want %d", got, len(all))
	}
}

// The maintenance loop sweeps every RetentionInterval on its own.
func TestRetentionSweepRunsOnTheMaintenanceLoop(t *testing.T) {
	n := openRetentionNode(t, Config{RetentionInterval: time.Minute, RollCheckInterval: time.Hour})
	n.topicWith("looped", withRoll(map[string]metadata.PolicyValue{metadata.FieldMaxRecords: bound(0)}))
	n.sealedSegment("looped", 2, 0)
	first := ids(n.segments("looped"))
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	// The metadata shows the delete before the loop removes the files:
	// wait for both.
	for len(n.segments("looped")) != 0 || len(segmentFiles(t, n.dir, first[0])) != 0 {
		if n.clk.Timers() > 0 {
			n.clk.Advance(time.Minute)
		}
		select {
		case <-deadline:
			t.Fatalf("the loop never swept: segments %v, files %v", ids(n.segments("looped")), segmentFiles(t, n.dir, first[0]))
		case <-tick.C:
		}
	}
	n.checkKept("looped", nil, first)
}

// A file left behind by a delete whose local removal never ran (the node
// stopped between the two) is deleted at the next start, because the
// metadata records the segment as deleted; an orphan the metadata never
// deleted is kept.
func TestRetentionRestartDeletesFilesOfDeletedSegments(t *testing.T) {
	n := openRetentionNode(t, Config{})
	n.topicWith("restart", rollFast)
	n.sealedSegment("restart", 2, 0)
	n.sealedSegment("restart", 2, 0)
	all := ids(n.segments("restart"))
	if err := n.b.Close(); err != nil {
		t.Fatal(err)
	}
	saved := map[string][]byte{}
	for _, f := range segmentFiles(t, n.dir, all[0]) {
		saved[f] = readFile(t, f)
	}
	n.b = reopen(t, n)
	if err := n.b.DefinePolicy(t.Context(), "restart", withRoll(map[string]metadata.PolicyValue{metadata.FieldMaxRecords: bound(2)})); err != nil {
		t.Fatal(err)
	}
	if got := n.b.sweepRetention(t.Context()); got != 1 {
		t.Fatalf("swept %d, want 1", got)
	}
	if err := n.b.Close(); err != nil {
		t.Fatal(err)
	}
	for f, data := range saved { // as if the file's removal never ran
		writeFile(t, f, data)
	}
	n.b = reopen(t, n)
	n.checkKept("restart", all[1:], all[:1])
}

func TestPolicyOperations(t *testing.T) {
	n := openRetentionNode(t, Config{Retention: retention.Defaults{metadata.FieldMaxAge: bound(7 * 24 * 3600 * 1000)}})
	ctx := t.Context()
	b := n.b
	if err := b.DefinePolicy(ctx, "bad", map[string]metadata.PolicyValue{"no_such_field": bound(1)}); !errors.Is(err, metadata.ErrInvalidPolicy) {
		t.Fatalf("unknown field: %v, want invalid_policy", err)
	}
	if err := b.DefinePolicy(ctx, "bad", map[string]metadata.PolicyValue{metadata.FieldMaxBytes: bound(-1)}); !errors.Is(err, metadata.ErrInvalidPolicy) {
		t.Fatalf("negative bound: %v, want invalid_policy", err)
	}
	fields := map[string]metadata.PolicyValue{"retention.max_bytes": bound(0), metadata.FieldMaxRecords: {Off: true}}
	if err := b.DefinePolicy(ctx, "p", fields); err != nil {
		t.Fatal(err)
	}
	ps := b.ListPolicies()
	if len(ps) != 1 || ps[0].Name != "p" || ps[0].Fields[metadata.FieldMaxBytes] != bound(0) || !ps[0].Fields[metadata.FieldMaxRecords].Off {
		t.Fatalf("policies %+v", ps)
	}
	admin := Identity{User: "admin", Perms: []string{auth.PermAdmin}}
	if err := b.CreateTopicWithPolicyAs(ctx, admin, "t", 8, 1, 0, "missing"); !errors.Is(err, metadata.ErrNoSuchPolicy) {
		t.Fatalf("create with an undefined policy: %v, want no_such_policy", err)
	}
	if err := b.CreateTopicWithPolicyAs(ctx, admin, "t", 8, 1, 0, ""); err != nil {
		t.Fatal(err)
	}
	missing := "missing"
	if err := b.BindTopicPolicy(ctx, "t", &missing); !errors.Is(err, metadata.ErrNoSuchPolicy) {
		t.Fatalf("bind to an undefined policy: %v, want no_such_policy", err)
	}
	p := "p"
	if err := b.BindTopicPolicy(ctx, "t", &p); err != nil {
		t.Fatal(err)
	}
	tp, err := b.TopicPolicy("t")
	if err != nil {
		t.Fatal(err)
	}
	if tp.Resolution != retention.ResolutionResolved || *tp.Policy != "p" || len(tp.Definition) != 2 {
		t.Fatalf("topic policy %+v", tp)
	}
	origins := map[string]PolicyField{}
	for _, f := range tp.Effective {
		origins[f.Name] = f
	}
	if len(tp.Effective) != len(retention.FieldNames()) || tp.Effective[0].Name != retention.FieldNames()[0] {
		t.Fatalf("effective fields %+v, want every field in order", tp.Effective)
	}
	if f := origins[metadata.FieldMaxBytes]; f.Origin != retention.OriginPolicy || f.Value != bound(0) {
		t.Fatalf("max_bytes %+v, want the policy's 0", f)
	}
	if f := origins[metadata.FieldMaxAge]; f.Origin != retention.OriginGlobal || f.Value != bound(7*24*3600*1000) {
		t.Fatalf("max_age_ms %+v, want the node default", f)
	}
	if err := b.DeletePolicy(ctx, "p", false); !errors.Is(err, metadata.ErrPolicyInUse) {
		t.Fatalf("delete a bound policy: %v, want policy_in_use", err)
	}
	if err := b.BindTopicPolicy(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if tp, _ := b.TopicPolicy("t"); tp.Policy != nil || tp.Resolution != retention.ResolutionNone {
		t.Fatalf("after unbind: %+v", tp)
	}
	if err := b.DeletePolicy(ctx, "p", false); err != nil {
		t.Fatal(err)
	}
	if err := b.DeletePolicy(ctx, "p", false); !errors.Is(err, metadata.ErrNoSuchPolicy) {
		t.Fatalf("delete twice: %v, want no_such_policy", err)
	}
	if _, err := b.TopicPolicy("nope"); !errors.Is(err, metadata.ErrNoSuchTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
}
