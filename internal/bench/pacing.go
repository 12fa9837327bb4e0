package bench

import (
	"context"
	"time"
)

// schedule says when each record of one worker is due. A zero interval is
// closed loop: every record is due at once, and its latency origin is the
// moment it is actually sent.
type schedule struct {
	start    time.Time
	interval float64 // nanoseconds between two records; 0 = closed loop
}

// newSchedule returns worker w's schedule for rate records/s shared by
// workers workers: each sends every workers/rate seconds, and the workers
// are offset by 1/rate from each other so that together they send evenly.
func newSchedule(start time.Time, rate float64, w, workers int) schedule {
	if rate <= 0 {
		return schedule{start: start}
	}
	step := float64(time.Second) / rate
	return schedule{
		start:    start.Add(time.Duration(step * float64(w))),
		interval: step * float64(workers),
	}
}

func (s schedule) open() bool { return s.interval > 0 }

// due returns when record i (counted from 0) should be sent.
func (s schedule) due(i int64) time.Time {
	return s.start.Add(time.Duration(s.interval * float64(i)))
}

// clock is the time source of a paced loop; tests replace it with a
// virtual one.
type clock interface {
	Now() time.Time
	// SleepUntil returns once t has passed or ctx is done.
	SleepUntil(ctx context.Context, t time.Time) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return context.Cause(ctx)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// pace calls send for records 0..n-1 in order. In open loop it waits for
// each record's due time and passes that due time as the origin to
// measure latency from; a record already late is sent at once, still with
// its due time as origin, which is what corrects for coordinated
// omission. In closed loop it sends at once with the current time as
// origin.
func pace(ctx context.Context, clk clock, s schedule, n int64, send func(i int64, origin time.Time) error) error {
	for i := int64(0); i < n; i++ {
		origin := clk.Now()
		if s.open() {
			origin = s.due(i)
			if err := clk.SleepUntil(ctx, origin); err != nil {
				return err
			}
		} else if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if err := send(i, origin); err != nil {
			return err
		}
	}
	return nil
}
