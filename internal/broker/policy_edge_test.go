package broker

// Edge cases of storage policies, retention, TTL and skips. Each test
// names the rule it checks.

import (
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/auth"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/retention"
)

// Rule: a policy's segment_max_age_ms is a bound on the active segment's
// age; the longest one a policy takes (an operator's "practically never")
// must not roll more often than a small one (converted to a
// time.Duration, an unbounded one overflowed and rolled every segment at
// every check), and a longer one is refused.
func TestEdgeHugeSegmentMaxAgeDoesNotRollAtOnce(t *testing.T) {
	n := openRetentionNode(t, Config{})
	if err := n.b.DefinePolicy(t.Context(), "never", map[string]metadata.PolicyValue{metadata.FieldSegmentMaxAge: bound(metadata.MaxDurationMs + 1)}); err == nil {
		t.Fatal("a segment_max_age_ms past 100 years was accepted")
	}
	huge := int64(metadata.MaxDurationMs) // 100 years, in ms
	if err := n.b.DefinePolicy(t.Context(), "slow", map[string]metadata.PolicyValue{metadata.FieldSegmentMaxAge: bound(huge)}); err != nil {
		t.Fatalf("the policy refused %d ms: %v", huge, err)
	}
	if err := n.b.CreateTopicWithPolicyAs(t.Context(), adminIdentity(), "slow", 8, 1, 0, "slow"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.b.Produce(t.Context(), "slow", []Record{{Key: []byte("a"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	n.clk.Advance(2 * time.Second)
	n.b.RollDue()
	segs := n.segments("slow")
	if len(segs) != 1 || !segs[0].Active {
		t.Fatalf("segments %+v: a %d ms segment_max_age rolled a 2 s old segment", segs, huge)
	}
}

func adminIdentity() Identity { return Identity{User: "admin", Perms: []string{auth.PermAdmin}} }

// Rule: the node's defaults accept the field aliases (Config.validate
// runs them through metadata.ValidatePolicy, which accepts
// "retention.max_records" for max_records), so a default given under an
// alias must apply exactly as under its canonical name. It is validated
// and then looked up only by the canonical name, so it silently does
// nothing: the operator believes records are bounded and they never are.
func TestEdgeNodeDefaultUnderAnAliasApplies(t *testing.T) {
	n := openRetentionNode(t, Config{Retention: retention.Defaults{"retention.max_records": bound(0)}})
	if err := n.b.CreateTopic(t.Context(), "aliased", 8, 1); err != nil {
		t.Fatal(err)
	}
	tp, err := n.b.TopicPolicy("aliased")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tp.Effective {
		if f.Name == metadata.FieldMaxRecords && (f.Value.Off || f.Value.Int != 0) {
			t.Fatalf("effective max_records %+v (origin %s), want the node default 0 given as retention.max_records", f.Value, f.Origin)
		}
	}
}

// Rule: a group's skip count is the records retention deleted that the
// group's commits passed without having read them. A consumer that
// fetched records, and then commits its cursor after retention deleted
// the segments it had already read (the usual order: process, then
// commit), missed nothing; counting the deleted span between the old and
// the new commit at commit time reports every record it read as skipped.
// The metadata cannot tell what was read between two commits, so such a
// count must at least say it is only an upper bound.
func TestEdgeGroupCommitAfterRetentionOfReadRecordsIsNoSkip(t *testing.T) {
	b, _ := openTTL(t, Config{})
	ctx := t.Context()
	rid := skipTopic(t, b)
	g := "g"
	first, err := b.Fetch(ctx, FetchRequest{Topic: "t", Group: &g, Max: 10})
	if err != nil || len(first.Records) != 10 {
		t.Fatalf("first page: %d records, %v", len(first.Records), err)
	}
	if err := b.Commit(ctx, "t", g, *first.Cursor); err != nil {
		t.Fatal(err)
	}
	segs := rangeSegments(b, "t", rid)
	// Read on, without committing, past the end of the second segment.
	want := segs[1].End
	cur, read := first.Cursor, uint64(10)
	for read < want {
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: int(want - read)})
		if err != nil || len(p.Records) == 0 {
			t.Fatalf("page at %d: %d records, %v", read, len(p.Records), err)
		}
		if p.Skipped != 0 {
			t.Fatalf("page told %d skips before anything was deleted", p.Skipped)
		}
		read += uint64(len(p.Records))
		cur = p.Cursor
	}
	// Retention deletes the two segments the consumer has read; then the
	// consumer commits where it is.
	deleteFront(t, b, "t", rid, 2, "retention")
	if err := b.Commit(ctx, "t", g, *cur); err != nil {
		t.Fatal(err)
	}
	st, err := b.DescribeGroup("t", g)
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 0 && !st.SkippedBound {
		t.Fatalf("group skipped %d as an exact count: every record between its commits was read, none was missed", st.Skipped)
	}
}

// Rule: a reader whose position lies in data retention deleted is moved
// to the oldest retained record and told (an upper bound for an
// ancestor's slice); it reads on. Here the reader's position is inside a
// range that a split retired, and retention then deleted every segment
// of it: the reader must reach the record produced after the split and
// be told of the records it missed.
func TestEdgeSkipToldWhenARetiredAncestorIsDeletedWhole(t *testing.T) {
	b, _ := openTTL(t, Config{})
	ctx := t.Context()
	rid := skipTopic(t, b)
	first, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil || len(first.Records) != 10 {
		t.Fatalf("first page: %d records, %v", len(first.Records), err)
	}
	if _, err := b.SplitRange(ctx, "t", rid); err != nil {
		t.Fatal(err)
	}
	for _, s := range rangeSegments(b, "t", rid) {
		if s.Active {
			t.Fatalf("segment %d of the retired range is still active", s.ID)
		}
		if _, err := b.apply(ctx, metadata.Command{Kind: metadata.KindDeleteSegment, Segment: s.ID, Reason: "retention"}); err != nil {
			t.Fatal(err)
		}
		b.dropSegment(0, s.ID)
	}
	if _, err := b.Produce(ctx, "t", []Record{{Key: []byte("k"), Value: []byte("600")}}); err != nil {
		t.Fatal(err)
	}
	var (
		got     []Record
		skipped uint64
		bounded bool
		cur     = first.Cursor
	)
	// A page may end empty where the walk moved the reader on without a
	// record, so a fixed number of pages is read.
	for range 4 {
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		got, skipped, bounded, cur = append(got, p.Records...), skipped+p.Skipped, bounded || p.SkippedBound, p.Cursor
	}
	sameValues(t, "after the ancestor was deleted", got, "600")
	if skipped < 590 || (!bounded && skipped != 590) {
		t.Fatalf("told %d skipped (bound %v), want 590 or an upper bound of it", skipped, bounded)
	}
}

// Rule: as above, with retention having deleted only the front of the
// retired range: the reader reads what is left of it and must be told of
// the records deleted under it, even when the same page reads the range
// to its end.
func TestEdgeSkipToldWhenARetiredAncestorLosesItsFront(t *testing.T) {
	b, _ := openTTL(t, Config{})
	ctx := t.Context()
	rid := skipTopic(t, b)
	first, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 10})
	if err != nil || len(first.Records) != 10 {
		t.Fatalf("first page: %d records, %v", len(first.Records), err)
	}
	if _, err := b.SplitRange(ctx, "t", rid); err != nil {
		t.Fatal(err)
	}
	deleteFront(t, b, "t", rid, 2, "retention")
	base := rangeSegments(b, "t", rid)[0].Base
	var (
		got     []Record
		skipped uint64
		bounded bool
		cur     = first.Cursor
	)
	for range 4 {
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		got, skipped, bounded, cur = append(got, p.Records...), skipped+p.Skipped, bounded || p.SkippedBound, p.Cursor
	}
	if len(got) == 0 || offsetOf(t, got[0]) != base || uint64(len(got)) != 600-base {
		t.Fatalf("read %d records, want the %d left from offset %d", len(got), 600-base, base)
	}
	if skipped < base-10 || (!bounded && skipped != base-10) {
		t.Fatalf("told %d skipped (bound %v), want %d or an upper bound of it", skipped, bounded, base-10)
	}
}
