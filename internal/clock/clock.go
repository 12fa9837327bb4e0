// Package clock makes time an input. Engines take a Clock; production code
// passes Real(), tests pass a *Manual and move it forward by hand, so no test
// waits on the wall clock.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer.
type Timer interface {
	// C delivers the time once when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer {
	return realTimer{time.NewTimer(d)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Manual is a clock that moves only when Advance or Set is called.
type Manual struct {
	mu struct {
		sync.Mutex
		now    time.Time
		timers []*manualTimer
	}
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual {
	m := &Manual{}
	m.mu.now = start
	return m
}

// Now returns the clock's current reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.now
}

// Advance moves the clock forward by d and fires every timer now due.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	m.mu.now = m.mu.now.Add(d)
	now := m.mu.now
	var due, keep []*manualTimer
	for _, t := range m.mu.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	m.mu.timers = keep
	m.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.fire(now)
	}
}

// Timers returns how many timers are waiting; tests use it to know a
// goroutine has armed its timer before advancing the clock.
func (m *Manual) Timers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.timers)
}

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, ch: make(chan time.Time, 1)}
	m.mu.Lock()
	t.at = m.mu.now.Add(d)
	if d <= 0 {
		m.mu.Unlock()
		t.fire(t.at)
		return t
	}
	m.mu.timers = append(m.mu.timers, t)
	m.mu.Unlock()
	return t
}

type manualTimer struct {
	m  *Manual
	at time.Time
	ch chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) fire(now time.Time) {
	select {
	case t.ch <- now:
	default:
	}
}

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	for i, x := range t.m.mu.timers {
		if x == t {
			t.m.mu.timers = append(t.m.mu.timers[:i], t.m.mu.timers[i+1:]...)
			return true
		}
	}
	return false
}
