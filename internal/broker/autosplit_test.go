package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/clock"
)

func TestDecideReshard(t *testing.T) {
	cfg := AutoSplit{SplitBytes: 1000, SplitRate: 500, MergeRate: 10, MergeAfter: 2, MaxRanges: 4}.withDefaults()
	tests := []struct {
		name  string
		stats []rangeStat
		want  string
	}{
		{"big range splits", []rangeStat{{topic: "t", rangeID: 1, start: 0, end: 256, bytes: 1000}}, "[{t 1 [0 0]}]"},
		{"hot range splits", []rangeStat{{topic: "t", rangeID: 1, start: 0, end: 256, rate: 600}}, "[{t 1 [0 0]}]"},
		{"single position never splits", []rangeStat{{topic: "t", rangeID: 1, start: 7, end: 8, bytes: 5000}}, "[]"},
		{"cap on ranges", []rangeStat{
			{topic: "t", rangeID: 1, start: 0, end: 64, bytes: 5000}, {topic: "t", rangeID: 2, start: 64, end: 128, bytes: 5000},
			{topic: "t", rangeID: 3, start: 128, end: 192}, {topic: "t", rangeID: 4, start: 192, end: 256},
		}, "[]"},
		{"cold buddies merge", []rangeStat{
			{topic: "t", rangeID: 2, start: 0, end: 128, coldChecks: 2}, {topic: "t", rangeID: 3, start: 128, end: 256, coldChecks: 2},
		}, "[{t 0 [2 3]}]"},
		{"not cold long enough", []rangeStat{
			{topic: "t", rangeID: 2, start: 0, end: 128, coldChecks: 1}, {topic: "t", rangeID: 3, start: 128, end: 256, coldChecks: 2},
		}, "[]"},
		{"neighbours that are not buddies stay", []rangeStat{
			{topic: "t", rangeID: 2, start: 0, end: 64, coldChecks: 5}, {topic: "t", rangeID: 5, start: 64, end: 128, coldChecks: 5},
			{topic: "t", rangeID: 6, start: 128, end: 256, coldChecks: 5},
		}, "[{t 0 [2 5]}]"},
		{"a big cold range does not merge", []rangeStat{
			{topic: "t", rangeID: 2, start: 0, end: 128, bytes: 600, coldChecks: 9}, {topic: "t", rangeID: 3, start: 128, end: 256, coldChecks: 9},
		}, "[]"},
	}
	for _, tc := range tests {
		got := fmt.Sprint(decideReshard(cfg, tc.stats))
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestAutoSplitThenMerge drives the coordinator by hand with a manual
// clock: a range past the size threshold splits; once quiet, the halves
// merge back. A reader sees every record in order throughout.
func TestAutoSplitThenMerge(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	b, err := Open(context.Background(), Config{
		DataDir: t.TempDir(), Clock: clk, SegmentMaxBytes: 2 << 10, RollCheckInterval: time.Hour,
		AutoSplit: AutoSplit{SplitBytes: 8 << 10, MergeRate: 1, MergeAfter: 2, Interval: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "auto", 8, 1); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	for i := 0; i < 20; i++ {
		produceRound(t, b, "auto", 30, next, acked)
	}
	active := func() int {
		d, err := b.DescribeTopic("auto")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range d.Ranges {
			if r.Active {
				n++
			}
		}
		return n
	}
	clk.Advance(time.Second)
	b.reshardTick(ctx)
	if n := active(); n != 2 {
		t.Fatalf("after a tick over the size threshold: %d active ranges, want 2", n)
	}
	produceRound(t, b, "auto", 30, next, acked)
	for i := 0; i < 3; i++ { // quiet ticks: the halves go cold and merge
		clk.Advance(time.Second)
		b.reshardTick(ctx)
	}
	if n := active(); n != 1 {
		t.Fatalf("after quiet ticks: %d active ranges, want 1", n)
	}
	r := newReader(t, b, "auto")
	r.drain()
	r.check("reader", acked)
}

// TestRollByAge seals a quiet range's active segment once it is older than
// SegmentMaxAge, and the next produce opens its successor at the sealed end.
func TestRollByAge(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	b, err := Open(context.Background(), Config{DataDir: t.TempDir(), Clock: clk, SegmentMaxAge: time.Hour, RollCheckInterval: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "quiet", 8, 1); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	produceRound(t, b, "quiet", 3, next, acked)
	clk.Advance(59 * time.Minute)
	b.rollAged()
	segs := func() []SegmentDescription {
		d, _ := b.DescribeTopic("quiet")
		return d.Ranges[0].Segments
	}
	if s := segs(); len(s) != 1 || !s[0].Active {
		t.Fatalf("rolled before its age: %+v", s)
	}
	clk.Advance(2 * time.Minute)
	b.rollAged()
	s := segs()
	if len(s) != 1 || s[0].Active || s[0].End != 9 || s[0].Records != 9 {
		t.Fatalf("after the age roll: %+v", s)
	}
	produceRound(t, b, "quiet", 3, next, acked)
	s = segs()
	if len(s) != 2 || !s[1].Active || s[1].Base != 9 {
		t.Fatalf("successor: %+v", s)
	}
	r := newReader(t, b, "quiet")
	r.drain()
	r.check("reader", acked)
}
