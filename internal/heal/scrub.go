package heal

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// ScrubConfig paces a node's scrubber.
type ScrubConfig struct {
	// IntervalMs is how often each copy should be verified.
	IntervalMs int64
	// RateBytes is the bytes/s the scrubber may read (the caller's
	// Bucket enforces it per read); Status compares it with what the
	// interval needs.
	RateBytes int64
	// MaxCopies bounds the copies tracked (DefaultMaxScrubCopies when 0).
	MaxCopies int
}

// DefaultMaxScrubCopies is ScrubConfig.MaxCopies when none is given.
const DefaultMaxScrubCopies = 1 << 20

// ErrTooManyCopies refuses a Track above ScrubConfig.MaxCopies.
var ErrTooManyCopies = errors.New("heal: too many copies to scrub")

// LocalCopy is a sealed copy this node holds.
type LocalCopy struct {
	Segment uint64
	Bytes   int64
}

// Scrubber chooses which local sealed copy to verify next. Each copy is
// due IntervalMs after its last verification; a copy it has not seen
// before is first due at a point of the interval fixed by its segment id,
// so that after a restart the work is spread over the interval instead
// of all due at once. It runs one verification at a time. State: one
// entry per tracked copy, at most MaxCopies.
type Scrubber struct {
	cfg     ScrubConfig
	copies  map[uint64]*scrubCopy
	running uint64
	busy    bool
}

type scrubCopy struct {
	bytes   int64
	due     int64 // unix ms
	judged  bool  // verdict holds the last verification's answer
	verdict Verdict
}

// NewScrubber checks cfg and makes a scrubber tracking no copy.
func NewScrubber(cfg ScrubConfig) (*Scrubber, error) {
	if cfg.MaxCopies == 0 {
		cfg.MaxCopies = DefaultMaxScrubCopies
	}
	if cfg.IntervalMs <= 0 || cfg.RateBytes <= 0 || cfg.MaxCopies < 0 {
		return nil, fmt.Errorf("heal: scrub interval %d ms, rate %d B/s and max copies %d must be positive",
			cfg.IntervalMs, cfg.RateBytes, cfg.MaxCopies)
	}
	return &Scrubber{cfg: cfg, copies: make(map[uint64]*scrubCopy)}, nil
}

// Track sets the copies to scrub: new ones are scheduled, those no longer
// listed are forgotten, and the others keep their schedule. Above
// MaxCopies it changes nothing and answers ErrTooManyCopies.
func (s *Scrubber) Track(now int64, copies []LocalCopy) error {
	if len(copies) > s.cfg.MaxCopies {
		return fmt.Errorf("%w: %d, at most %d", ErrTooManyCopies, len(copies), s.cfg.MaxCopies)
	}
	listed := make(map[uint64]bool, len(copies))
	for _, c := range copies {
		listed[c.Segment] = true
		if sc, ok := s.copies[c.Segment]; ok {
			sc.bytes = c.Bytes
			continue
		}
		s.copies[c.Segment] = &scrubCopy{bytes: c.Bytes, due: now + s.spread(c.Segment)}
	}
	for id := range s.copies {
		if !listed[id] {
			delete(s.copies, id)
		}
	}
	return nil
}

// spread is where in the interval a new copy is first due: a hash of
// its id, the same on every run.
func (s *Scrubber) spread(segment uint64) int64 {
	h := xxhash.Sum64(binary.BigEndian.AppendUint64(nil, segment))
	return int64(h % uint64(s.cfg.IntervalMs))
}

// Next answers the copy to verify now: the one due earliest (ties to the
// smaller id) if it is due, and marks it running. Otherwise ok is false
// and waitMs says when the next one is due; while a verification runs,
// or with nothing to scrub, waitMs is 0: ask again after Done or Track.
func (s *Scrubber) Next(now int64) (segment uint64, waitMs int64, ok bool) {
	if s.busy || len(s.copies) == 0 {
		return 0, 0, false
	}
	// NB: a linear scan; Next runs once per verified copy, which is
	// rare beside what verifying costs.
	var best uint64
	var bestDue int64
	first := true
	for id, c := range s.copies {
		if first || c.due < bestDue || (c.due == bestDue && id < best) {
			best, bestDue, first = id, c.due, false
		}
	}
	if bestDue > now {
		return 0, bestDue - now, false
	}
	s.running, s.busy = best, true
	return best, 0, true
}

// Done records the verdict of the running verification of segment and
// schedules its next one: an interval later, or an eighth of it after a
// copy that could not be read. A verdict for a copy no longer tracked
// only ends the run.
func (s *Scrubber) Done(now int64, segment uint64, v Verdict) {
	if s.busy && s.running == segment {
		s.busy = false
	}
	c, ok := s.copies[segment]
	if !ok {
		return
	}
	c.judged, c.verdict = true, v
	c.due = now + s.cfg.IntervalMs
	if v.Outcome == Unreadable {
		c.due = now + max(s.cfg.IntervalMs/8, 1)
	}
}

// ScrubStatus summarises the scrubber for operators and the planner.
type ScrubStatus struct {
	Copies int
	Bytes  int64
	// NeedRate is the bytes/s that verifying every copy once per
	// interval takes; Behind is set when it exceeds the configured rate.
	NeedRate int64
	Behind   bool
	// Damaged lists the copies whose last verdict was not whole or
	// unreadable, by segment id, with that verdict. They are kept (S4)
	// and scrubbed again on schedule.
	Damaged []DamagedCopy
}

// DamagedCopy is a local copy a scrub found damaged or short.
type DamagedCopy struct {
	Segment uint64
	Verdict Verdict
}

// Status answers the scrubber's summary.
func (s *Scrubber) Status() ScrubStatus {
	st := ScrubStatus{Copies: len(s.copies)}
	for id, c := range s.copies {
		st.Bytes += c.bytes
		if c.judged && (c.verdict.Outcome == Damaged || c.verdict.Outcome == Short) {
			st.Damaged = append(st.Damaged, DamagedCopy{Segment: id, Verdict: c.verdict})
		}
	}
	slices.SortFunc(st.Damaged, func(a, b DamagedCopy) int { return cmp.Compare(a.Segment, b.Segment) })
	// Bytes per interval ms, in bytes/s, rounded up; /IntervalMs first
	// keeps the product in range.
	st.NeedRate = (st.Bytes/s.cfg.IntervalMs)*1000 + ((st.Bytes%s.cfg.IntervalMs)*1000+s.cfg.IntervalMs-1)/s.cfg.IntervalMs
	st.Behind = st.NeedRate > s.cfg.RateBytes
	return st
}
