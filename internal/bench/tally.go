package bench

import (
	"sync"
	"sync/atomic"
	"time"
)

// Progress reports how far a run is, for a progress display polling it
// from another goroutine.
type Progress struct {
	done  atomic.Int64
	total atomic.Int64
}

// Done returns the records completed so far.
func (p *Progress) Done() int64 { return p.done.Load() }

// Total returns the records the run will complete (0 until it starts).
func (p *Progress) Total() int64 { return p.total.Load() }

// tally counts one side of a run (the producers or the consumers). Its
// counters are shared by the workers of that side.
type tally struct {
	records  atomic.Int64
	bytes    atomic.Int64
	errors   atomic.Int64
	last     atomic.Int64 // Unix nanoseconds of the latest completion
	progress *Progress    // nil, or the display this side feeds

	mu       sync.Mutex // guards firstErr
	firstErr error
}

func newTally(start time.Time, p *Progress) *tally {
	t := &tally{progress: p}
	t.last.Store(start.UnixNano())
	return t
}

// add counts n records of bytes bytes completed at now.
func (t *tally) add(n, bytes int64, now time.Time) {
	t.records.Add(n)
	t.bytes.Add(bytes)
	t.last.Store(now.UnixNano())
	if t.progress != nil {
		t.progress.done.Add(n)
	}
}

// fail counts a failed record and keeps the first error.
func (t *tally) fail(err error) { t.failN(1, err) }

// failN counts n failed records and keeps the first error.
func (t *tally) failN(n int64, err error) {
	t.errors.Add(n)
	t.mu.Lock()
	if t.firstErr == nil {
		t.firstErr = err
	}
	t.mu.Unlock()
}

func (t *tally) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstErr
}

// stats summarises the side, measured from start to its last completion.
func (t *tally) stats(start time.Time, lat *Latency) Stats {
	s := Stats{
		Records: t.records.Load(),
		Bytes:   t.bytes.Load(),
		Errors:  t.errors.Load(),
		Latency: lat,
	}
	elapsed := time.Unix(0, t.last.Load()).Sub(start)
	s.ElapsedS = elapsed.Seconds()
	if elapsed > 0 {
		s.RecordsPerS = float64(s.Records) / s.ElapsedS
		s.MBPerS = float64(s.Bytes) / 1e6 / s.ElapsedS
	}
	return s
}
