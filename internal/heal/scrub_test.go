package heal_test

// The scrub scheduler, driven by a manual clock: over a simulated run
// each copy is verified about once per interval, one at a time; new
// copies are spread over the interval rather than due at once; damaged
// and short copies are reported and kept on schedule; an unreadable copy
// is retried sooner; tracking is bounded; and the same calls always give
// the same order.

import (
	"errors"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

func newScrubber(t *testing.T, cfg heal.ScrubConfig) *heal.Scrubber {
	t.Helper()
	s, err := heal.NewScrubber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func copies(n int, bytes int64) []heal.LocalCopy {
	out := make([]heal.LocalCopy, n)
	for i := range out {
		out[i] = heal.LocalCopy{Segment: uint64(i + 1), Bytes: bytes}
	}
	return out
}

// run drives s from now to until, verifying each copy in durMs, and
// answers the verification times of every segment in order.
func run(t *testing.T, s *heal.Scrubber, now, until, durMs int64, verdict func(uint64) heal.Verdict) map[uint64][]int64 {
	t.Helper()
	seen := make(map[uint64][]int64)
	for now < until {
		seg, wait, ok := s.Next(now)
		if !ok {
			if wait <= 0 {
				t.Fatalf("at %d: nothing due and no wait", now)
			}
			now += wait
			continue
		}
		if _, _, again := s.Next(now); again {
			t.Fatalf("at %d: a second verification while one runs", now)
		}
		now += durMs
		seen[seg] = append(seen[seg], now)
		s.Done(now, seg, verdict(seg))
	}
	return seen
}

func whole(uint64) heal.Verdict { return heal.Verdict{Outcome: heal.Whole} }

func TestScrubEachCopyOncePerInterval(t *testing.T) {
	const interval = 60_000
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: interval, RateBytes: 1 << 20})
	if err := s.Track(0, copies(50, 1<<20)); err != nil {
		t.Fatal(err)
	}
	seen := run(t, s, 0, 10*interval, 100, whole)
	for seg := uint64(1); seg <= 50; seg++ {
		times := seen[seg]
		if len(times) < 9 || len(times) > 10 {
			t.Fatalf("segment %d verified %d times in 10 intervals", seg, len(times))
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i] - times[i-1]; gap < interval || gap > interval+50*100 {
				t.Fatalf("segment %d: %d ms between verifications", seg, gap)
			}
		}
	}
}

// New copies are first due across the interval, not all at its start.
func TestScrubSpreadsNewCopies(t *testing.T) {
	const interval = 100_000
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: interval, RateBytes: 1})
	if err := s.Track(0, copies(200, 1)); err != nil {
		t.Fatal(err)
	}
	seen := run(t, s, 0, interval, 1, whole)
	var quarters [4]int
	for _, times := range seen {
		quarters[min(times[0]*4/interval, 3)]++
	}
	for q, n := range quarters {
		if n < 20 {
			t.Fatalf("quarter %d of the interval starts %d of 200 copies: %v", q, n, quarters)
		}
	}
}

func TestScrubReportsDamageAndKeepsScrubbing(t *testing.T) {
	const interval = 1000
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: interval, RateBytes: 1 << 30})
	if err := s.Track(0, copies(3, 10)); err != nil {
		t.Fatal(err)
	}
	verdict := func(seg uint64) heal.Verdict {
		switch seg {
		case 2:
			return heal.Verdict{Outcome: heal.Damaged, At: 40, Reason: "crc"}
		case 3:
			return heal.Verdict{Outcome: heal.Short, At: 9}
		}
		return heal.Verdict{Outcome: heal.Whole}
	}
	seen := run(t, s, 0, 5*interval, 1, verdict)
	if len(seen[2]) < 4 {
		t.Fatalf("a damaged copy stopped being scrubbed: %v", seen[2])
	}
	st := s.Status()
	if len(st.Damaged) != 2 || st.Damaged[0].Segment != 2 || st.Damaged[0].Verdict.At != 40 || st.Damaged[1].Segment != 3 {
		t.Fatalf("damaged copies: %+v", st.Damaged)
	}
}

func TestScrubRetriesUnreadableSooner(t *testing.T) {
	const interval = 8000
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: interval, RateBytes: 1})
	if err := s.Track(0, copies(1, 1)); err != nil {
		t.Fatal(err)
	}
	unreadable := func(uint64) heal.Verdict { return heal.Verdict{Outcome: heal.Unreadable} }
	seen := run(t, s, 0, 3*interval, 0, unreadable)
	if got := seen[1]; len(got) < 16 || got[1]-got[0] != interval/8 {
		t.Fatalf("an unreadable copy was retried at %v", got)
	}
	if st := s.Status(); len(st.Damaged) != 0 {
		t.Fatalf("unreadable reported as damaged: %+v", st.Damaged)
	}
}

func TestScrubTrackForgetsAndBounds(t *testing.T) {
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: 10, RateBytes: 1, MaxCopies: 3})
	if err := s.Track(0, copies(4, 1)); !errors.Is(err, heal.ErrTooManyCopies) {
		t.Fatalf("4 copies with a bound of 3: %v", err)
	}
	if err := s.Track(0, copies(3, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Track(0, []heal.LocalCopy{{Segment: 2, Bytes: 1}}); err != nil {
		t.Fatal(err)
	}
	for now := int64(0); now < 100; now++ {
		if seg, _, ok := s.Next(now); ok {
			if seg != 2 {
				t.Fatalf("a forgotten copy %d was scheduled", seg)
			}
			s.Done(now, seg, heal.Verdict{})
		}
	}
	if st := s.Status(); st.Copies != 1 {
		t.Fatalf("%d copies tracked", st.Copies)
	}
	// A verdict for a copy no longer tracked ends the run and changes nothing.
	seg, _, ok := s.Next(1000)
	if !ok {
		t.Fatal("nothing due")
	}
	if err := s.Track(1000, nil); err != nil {
		t.Fatal(err)
	}
	s.Done(1000, seg, heal.Verdict{Outcome: heal.Damaged})
	if st := s.Status(); st.Copies != 0 || len(st.Damaged) != 0 {
		t.Fatalf("after forgetting everything: %+v", st)
	}
}

func TestScrubSaysWhenTheRateCannotKeepUp(t *testing.T) {
	s := newScrubber(t, heal.ScrubConfig{IntervalMs: 1000, RateBytes: 1000})
	if err := s.Track(0, copies(10, 100)); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.NeedRate != 1000 || st.Behind {
		t.Fatalf("1000 bytes per second at 1000 B/s: %+v", st)
	}
	if err := s.Track(0, copies(11, 100)); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.NeedRate != 1100 || !st.Behind {
		t.Fatalf("1100 bytes per second at 1000 B/s: %+v", st)
	}
}

func TestScrubIsDeterministic(t *testing.T) {
	order := func() []uint64 {
		s := newScrubber(t, heal.ScrubConfig{IntervalMs: 5000, RateBytes: 1})
		if err := s.Track(7, copies(40, 1)); err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for now := int64(7); now < 20_000; now++ {
			if seg, _, ok := s.Next(now); ok {
				out = append(out, seg)
				s.Done(now, seg, heal.Verdict{})
			}
		}
		return out
	}
	a, b := order(), order()
	if len(a) < 120 || !slices.Equal(a, b) {
		t.Fatalf("two runs: %d and %d verifications, equal %v", len(a), len(b), slices.Equal(a, b))
	}
}

func TestScrubConfigRefused(t *testing.T) {
	for _, c := range []heal.ScrubConfig{{IntervalMs: 0, RateBytes: 1}, {IntervalMs: 1, RateBytes: 0}, {IntervalMs: 1, RateBytes: 1, MaxCopies: -1}} {
		if _, err := heal.NewScrubber(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
