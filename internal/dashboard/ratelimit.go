package dashboard

import (
	"math"
	"sync"
	"time"
)

// loginLimiter bounds login attempts per key (a client address, or a
// user's failures) with a token bucket each: burst attempts at once, then
// one per every. The table holds at most max keys; a full table first forgets keys whose bucket has
// refilled, then the one that refills soonest.
type loginLimiter struct {
	mu    sync.Mutex
	burst float64
	every time.Duration
	max   int
	m     map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLoginLimiter(burst int, every time.Duration, max int) *loginLimiter {
	return &loginLimiter{burst: float64(burst), every: every, max: max, m: map[string]*bucket{}}
}

// allow takes one attempt for key at now, or says how long until the
// next one is allowed.
func (l *loginLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(key, now)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.every))
	}
	b.tokens--
	return true, 0
}

// wait says how long until key may try again: zero while it has an
// attempt left. It takes nothing.
func (l *loginLimiter) wait(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[key]
	if b == nil {
		return 0
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(l.every))
}

// charge takes one attempt for key, if it has one.
func (l *loginLimiter) charge(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.bucketLocked(key, now); b.tokens >= 1 {
		b.tokens--
	}
}

func (l *loginLimiter) bucketLocked(key string, now time.Time) *bucket {
	b := l.m[key]
	if b == nil {
		if len(l.m) >= l.max {
			l.shrinkLocked(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.m[key] = b
	}
	l.refill(b, now)
	return b
}

func (l *loginLimiter) refill(b *bucket, now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+float64(el)/float64(l.every))
		b.at = now
	}
}

func (l *loginLimiter) shrinkLocked(now time.Time) {
	var fullest string
	best := -1.0
	for a, b := range l.m {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.m, a)
			continue
		}
		if b.tokens > best {
			fullest, best = a, b.tokens
		}
	}
	if len(l.m) >= l.max {
		delete(l.m, fullest)
	}
}
