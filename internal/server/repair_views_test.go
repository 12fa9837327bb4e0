package server

import (
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// The per-topic list is capped like the others, and each total counts
// what the broker counted before any list was cut, so a client learns
// the real numbers from a short list.
func TestClusterRepairTotalsOutliveTheCaps(t *testing.T) {
	var s broker.ClusterStatus
	const topics = 3 * maxRepairListed
	for i := range topics {
		s.UnderReplicated = append(s.UnderReplicated, broker.UnderReplicatedTopic{Topic: fmt.Sprintf("t%04d", i), Segments: 2})
	}
	for i := range maxRepairListed {
		s.UnderReplicatedSegments = append(s.UnderReplicatedSegments, broker.UnderReplicatedSegment{Topic: "t0000", Segment: uint64(i)})
	}
	s.Heal = &broker.HealStatus{
		Damaged:  []broker.DamagedSegment{{Segment: 1, Node: 2}},
		Healing:  []broker.HealingSegment{{Segment: 3, Source: 1, Target: 2}},
		Problems: []broker.HealProblem{{Segment: 4, Problem: "lost"}},
		// The broker cut its lists: the totals are the real counts.
		DamagedTotal: 5000, HealingTotal: 7, ProblemsTotal: 120,
	}
	resp := clusterStatus(s, true)
	var got wire.ClusterStatusResponse
	if err := got.Decode(resp.AppendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	r := got.Repair
	if len(r.UnderReplicated) != maxRepairListed {
		t.Fatalf("%d topics listed, want %d", len(r.UnderReplicated), maxRepairListed)
	}
	if r.UnderReplicatedTotal != 2*topics || r.DamagedTotal != 5000 || r.HealingTotal != 7 || r.ProblemsTotal != 120 {
		t.Fatalf("totals: under-replicated %d, damaged %d, healing %d, problems %d",
			r.UnderReplicatedTotal, r.DamagedTotal, r.HealingTotal, r.ProblemsTotal)
	}
	// A broker total below its list (an older count) never goes out
	// below the list.
	s.Heal.DamagedTotal = 0
	if r := clusterRepair(s); r.DamagedTotal != 1 {
		t.Fatalf("damaged total %d for one listed", r.DamagedTotal)
	}
}

// Every state the broker gives a copy has its own value on the wire.
func TestCopyStatesMapOneToOne(t *testing.T) {
	seen := map[wire.CopyState]string{}
	for _, st := range []string{broker.CopyUnchecked, broker.CopyDamaged, broker.CopyHealing, broker.CopyMissing} {
		w, ok := copyStates[st]
		if !ok {
			t.Fatalf("broker state %q has no wire value", st)
		}
		if other, dup := seen[w]; dup {
			t.Fatalf("%q and %q are both %v", st, other, w)
		}
		if w.String() != st {
			t.Fatalf("broker state %q goes out as %q", st, w)
		}
		seen[w] = st
	}
}

// bigDescription is a topic of n ranges with two segments each, three
// copies a segment, as a cluster describes it.
func bigDescription(n int) *wire.DescribeTopicResponse {
	resp := &wire.DescribeTopicResponse{ID: 1, Name: "wide", Bits: 32, CreatedAt: 1700000000000, Copies: true}
	replicas := []string{"node-1", "node-2", "node-3"}
	copies := []wire.SegmentCopy{{Node: 1}, {Node: 2, State: wire.CopyDamaged}, {Node: 3, State: wire.CopyMissing}}
	resp.Ranges = make([]wire.RangeInfo, n)
	for i := range resp.Ranges {
		r := &resp.Ranges[i]
		r.ID, r.Start, r.End = uint64(i+1), uint64(i)<<16, uint64(i+1)<<16
		r.Parents = []uint64{uint64(i)}
		for k := range 2 {
			r.Segments = append(r.Segments, wire.SegmentInfo{
				ID: uint64(2*i + k + 1), Base: 1000, End: 2000, Records: 1000, Bytes: 1 << 20,
				Replicas: replicas, OpenedAt: 1700000000000, SealedAt: 1700000001000, Copies: copies,
			})
		}
	}
	return resp
}

// The copies section never takes the answer past the frame: on a topic of
// 100,000 ranges of two segments, the copies of the segments that do not
// fit are left out, counted, and the client reads which ones.
func TestDescribeCopiesOfAHundredThousandRangesFitTheFrame(t *testing.T) {
	for _, c := range []struct {
		ranges   int
		maxFrame uint32
	}{
		{100_000, wire.DefaultMaxFrame}, // the answer without copies is larger than the frame already
		{55_000, wire.DefaultMaxFrame},  // the answer fits, its copies only in part
		{1_000, wire.DefaultMaxFrame},   // everything fits
	} {
		resp := bigDescription(c.ranges)
		segments := 2 * c.ranges
		base := baseSize(resp)
		uncapped := len(resp.AppendPayload(nil)) - base
		capCopies(resp, c.maxFrame)
		payload := resp.AppendPayload(nil)
		section := len(payload) - base
		t.Logf("%d ranges: answer without copies %d bytes, copies uncapped %d bytes, capped %d bytes, %d of %d segments omitted",
			c.ranges, base, uncapped, section, resp.CopiesOmitted, segments)
		if section > maxCopiesBytes {
			t.Fatalf("copies section %d bytes, above %d", section, maxCopiesBytes)
		}
		if base+frameSlack <= int(c.maxFrame) && len(payload)+frameSlack > int(c.maxFrame) {
			t.Fatalf("%d ranges: the copies took an answer of %d bytes past the frame (%d)", c.ranges, len(payload), c.maxFrame)
		}
		var got wire.DescribeTopicResponse
		if err := got.Decode(payload); err != nil {
			t.Fatal(err)
		}
		if got.CopiesOmitted != resp.CopiesOmitted {
			t.Fatalf("decoded %d omitted, sent %d", got.CopiesOmitted, resp.CopiesOmitted)
		}
		listed := 0
		for _, r := range got.Ranges {
			for _, s := range r.Segments {
				if s.Copies != nil {
					listed++
				}
			}
		}
		if listed+got.CopiesOmitted != segments {
			t.Fatalf("%d segments with copies and %d omitted, of %d", listed, got.CopiesOmitted, segments)
		}
		if fits := base+frameSlack+4+segments*wire.CopiesSize(make([]wire.SegmentCopy, 3)) <= int(c.maxFrame) && uncapped <= maxCopiesBytes; fits != (got.CopiesOmitted == 0) {
			t.Fatalf("%d ranges: %d omitted where everything fits: %v", c.ranges, got.CopiesOmitted, fits)
		}
	}
}
