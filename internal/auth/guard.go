package auth

// Guard is the login throttle: a progressive lockout keyed by (user, client
// address) and token buckets that bound failed logins per address and per
// user. It is a pure state machine: time comes in as unix milliseconds, it
// takes no locks (the caller serialises calls) and its tables are bounded,
// evicting the least recently used entry when full.
//
// Only failures are counted, so any number of successful logins from one
// address (a client opening many connections at once) is never refused.
type Guard struct {
	cfg     GuardConfig
	locks   *lru[lockKey, lockState]
	addrs   *lru[string, bucket]
	users   *lru[string, bucket]
	reports *lru[string, reportState]
}

// reportState is one address's reporting window for throttled refusals.
type reportState struct {
	until      int64 // no report before this instant
	suppressed int   // refusals counted since the last report
}

// ReportEveryMs is how often throttled refusals from one address are
// reported (logged and audited) at most: they cost the node nothing, so
// one line each would let any client flood the logs and rotate the audit
// history away.
const ReportEveryMs = 60_000

// GuardConfig configures a Guard. Zero fields take the defaults.
type GuardConfig struct {
	// MaxFailures is how many failed logins of one user from one address
	// lock that pair. Default 5.
	MaxFailures int
	// LockoutMs is how long the first lock lasts. Default 300000 (5 min).
	LockoutMs int64
	// LockoutSteps multiply LockoutMs for the first, second, … lock of a
	// pair; the last step repeats, which caps the lock. Default 1, 3, 9,
	// 24, 72 (5 min, 15 min, 45 min, 2 h, 6 h); {1} turns progression off.
	LockoutSteps []int64
	// FailureTTLMs is how long a failure is remembered: a pair's failure
	// count restarts, and its lock level resets, once this long has passed
	// since its last failure (or the end of its lock). Default 3600000.
	FailureTTLMs int64
	// AddrFailures bounds the failed logins from one address, over all
	// users. Default 30 per minute.
	AddrFailures Rate
	// UserFailures bounds the failed logins against one user, over all
	// addresses. Default 30 per minute.
	UserFailures Rate
	// MaxEntries bounds each of the guard's three tables. Default 100000.
	MaxEntries int
}

// Rate is a token bucket: Burst events at once, refilled at Burst per
// PeriodMs.
type Rate struct {
	Burst    int
	PeriodMs int64
}

// Default guard settings.
const (
	DefaultMaxFailures  = 5
	DefaultLockoutMs    = 5 * 60_000
	DefaultFailureTTLMs = 60 * 60_000
	DefaultGuardEntries = 100_000
	MaxRateBurst        = 100_000
	MaxRatePeriodMs     = 7 * 24 * 3600_000
)

// DefaultLockoutSteps returns the progressive lockout multipliers.
func DefaultLockoutSteps() []int64 { return []int64{1, 3, 9, 24, 72} }

// DefaultFailureRate is the default of AddrFailures and UserFailures.
var DefaultFailureRate = Rate{Burst: 30, PeriodMs: 60_000}

// WithDefaults fills the zero fields.
func (c GuardConfig) WithDefaults() GuardConfig {
	if c.MaxFailures <= 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.LockoutMs <= 0 {
		c.LockoutMs = DefaultLockoutMs
	}
	if len(c.LockoutSteps) == 0 {
		c.LockoutSteps = DefaultLockoutSteps()
	}
	if c.FailureTTLMs <= 0 {
		c.FailureTTLMs = DefaultFailureTTLMs
	}
	c.AddrFailures = c.AddrFailures.withDefaults()
	c.UserFailures = c.UserFailures.withDefaults()
	if c.MaxEntries <= 0 {
		c.MaxEntries = DefaultGuardEntries
	}
	return c
}

func (r Rate) withDefaults() Rate {
	if r.Burst <= 0 {
		r.Burst = DefaultFailureRate.Burst
	}
	if r.PeriodMs <= 0 {
		r.PeriodMs = DefaultFailureRate.PeriodMs
	}
	// Bounds keep tat (unix ms × Burst) far from int64 overflow.
	r.Burst = min(r.Burst, MaxRateBurst)
	r.PeriodMs = min(r.PeriodMs, MaxRatePeriodMs)
	return r
}

type lockKey struct{ user, addr string }

type lockState struct {
	failures    int
	pending     int // attempts admitted by Begin and not yet finished
	lastFailure int64
	lockedUntil int64
	level       int // locks applied so far
}

// bucket is a token bucket kept as GCRA's theoretical arrival time, in
// units of ms × Burst so that every step is an exact integer: each failure
// moves tat on by PeriodMs, and a failure is allowed while tat stays within
// (Burst-1) × PeriodMs of now × Burst. A bucket whose tat is in the past is
// full, the same as a missing one.
type bucket struct {
	tat     int64
	pending int // tokens taken by attempts Begin admitted that are still running
}

// NewGuard returns an empty guard.
func NewGuard(cfg GuardConfig) *Guard {
	cfg = cfg.WithDefaults()
	return &Guard{
		cfg:     cfg,
		locks:   newLRU[lockKey, lockState](cfg.MaxEntries),
		addrs:   newLRU[string, bucket](cfg.MaxEntries),
		users:   newLRU[string, bucket](cfg.MaxEntries),
		reports: newLRU[string, reportState](cfg.MaxEntries),
	}
}

// Report decides whether a throttled refusal from addr is reported now.
// The first of each ReportEveryMs window is, with the number suppressed
// since the last report; the others are only counted.
func (g *Guard) Report(addr string, now int64) (report bool, suppressed int) {
	e := g.reports.put(addr, reportState{}, now)
	if now < e.val.until {
		e.val.suppressed++
		return false, 0
	}
	suppressed = e.val.suppressed
	e.val = reportState{until: now + ReportEveryMs}
	e.forgetAt = now + 2*ReportEveryMs // long enough to carry the count
	return true, suppressed
}

// Verdict is what Check decides about a login attempt.
type Verdict int

// Verdicts.
const (
	Allow       Verdict = iota
	Locked              // the (user, address) pair is locked
	RateLimited         // the address or the user has failed too often lately
	// Busy: attempts still running may yet fail enough to lock the pair or
	// empty a bucket; the caller should wait for one to settle (Finish)
	// and ask again, rather than refuse a login that may be legitimate.
	Busy
)

// Check decides whether a login of user from addr may be attempted at now.
// wait is how long until that may change (0 for Allow). A lock is reported
// before a rate limit, so a locked pair answers the same whatever password
// it tries.
func (g *Guard) Check(user, addr string, now int64) (v Verdict, wait int64) {
	if e, ok := g.locks.get(lockKey{user, addr}, now); ok && now < e.val.lockedUntil {
		return Locked, e.val.lockedUntil - now
	}
	if w := g.waitFor(g.addrs, g.cfg.AddrFailures, addr, now); w > 0 {
		return RateLimited, w
	}
	if w := g.waitFor(g.users, g.cfg.UserFailures, user, now); w > 0 {
		return RateLimited, w
	}
	return Allow, 0
}

// Begin admits a password login attempt of user from addr, or refuses it
// as Check would. An admitted attempt is charged as a failure before the
// password is checked (hashing takes tens of milliseconds), so attempts
// sent in parallel cannot all pass the check before any failure lands:
// it takes a token of the address's and the user's buckets, and counts
// against the pair's lock while it runs. Finish settles it.
func (g *Guard) Begin(user, addr string, now int64) (v Verdict, wait int64) {
	if e, ok := g.locks.get(lockKey{user, addr}, now); ok && now < e.val.lockedUntil {
		return Locked, e.val.lockedUntil - now
	}
	if v, wait = g.bucketVerdict(g.addrs, g.cfg.AddrFailures, addr, now); v != Allow {
		return v, wait
	}
	if v, wait = g.bucketVerdict(g.users, g.cfg.UserFailures, user, now); v != Allow {
		return v, wait
	}
	e := g.locks.put(lockKey{user, addr}, lockState{}, now)
	s := &e.val
	if now-max(s.lastFailure, s.lockedUntil) >= g.cfg.FailureTTLMs {
		s.failures = 0
	}
	if s.failures+s.pending >= g.cfg.MaxFailures {
		// As many attempts as may still fail before the lock are running.
		return Busy, 0
	}
	s.pending++
	e.forgetAt = max(e.forgetAt, now+g.cfg.FailureTTLMs)
	g.take(g.addrs, g.cfg.AddrFailures, addr, now).pending++
	g.take(g.users, g.cfg.UserFailures, user, now).pending++
	return Allow, 0
}

// bucketVerdict is Allow while key's bucket holds a token; when it is
// empty, Busy if running attempts hold tokens they may give back, else
// RateLimited.
func (g *Guard) bucketVerdict(t *lru[string, bucket], r Rate, key string, now int64) (Verdict, int64) {
	w := g.waitFor(t, r, key, now)
	if w == 0 {
		return Allow, 0
	}
	if e, ok := t.get(key, now); ok && e.val.pending > 0 {
		return Busy, 0
	}
	return RateLimited, w
}

// Finish settles an attempt Begin admitted. A success gives back the
// tokens it was charged (so successes never cost, and never buy, guesses)
// and forgets the pair's failures; a failure counts toward the pair's
// lock. It returns how long the pair is now locked for, when this failure
// locked it, and 0 otherwise.
func (g *Guard) Finish(user, addr string, ok bool, now int64) (lockedFor int64) {
	if e, found := g.locks.get(lockKey{user, addr}, now); found && e.val.pending > 0 {
		e.val.pending--
	}
	g.settle(g.addrs, addr, now)
	g.settle(g.users, user, now)
	if ok {
		g.refund(g.addrs, g.cfg.AddrFailures, addr, now)
		g.refund(g.users, g.cfg.UserFailures, user, now)
		g.Succeed(user, addr)
		return 0
	}
	return g.count(user, addr, now)
}

// Abandon settles an attempt Begin admitted whose password was never
// checked (no hashing slot came free, or the client left): it counts as
// neither a success nor a failure, and its charge is refunded, so a full
// login queue never locks out a user who typed the right password.
func (g *Guard) Abandon(user, addr string, now int64) {
	if e, found := g.locks.get(lockKey{user, addr}, now); found && e.val.pending > 0 {
		e.val.pending--
	}
	g.settle(g.addrs, addr, now)
	g.settle(g.users, user, now)
	g.refund(g.addrs, g.cfg.AddrFailures, addr, now)
	g.refund(g.users, g.cfg.UserFailures, user, now)
}

// Fail records a failed login of user from addr that Begin did not admit.
// It returns how long the pair is now locked for, when this failure locked
// it, and 0 otherwise.
func (g *Guard) Fail(user, addr string, now int64) (lockedFor int64) {
	g.take(g.addrs, g.cfg.AddrFailures, addr, now)
	g.take(g.users, g.cfg.UserFailures, user, now)
	return g.count(user, addr, now)
}

// count adds a failure to the pair's lock state. Failures that land while
// the pair is already locked (attempts admitted just before the lock) do
// not raise its level: one burst must not jump a lock to its longest step.
func (g *Guard) count(user, addr string, now int64) (lockedFor int64) {
	e := g.locks.put(lockKey{user, addr}, lockState{}, now)
	s := &e.val
	if now < s.lockedUntil {
		return 0
	}
	if now-max(s.lastFailure, s.lockedUntil) >= g.cfg.FailureTTLMs {
		s.failures = 0
	}
	s.failures++
	s.lastFailure = now
	if s.failures >= g.cfg.MaxFailures {
		step := g.cfg.LockoutSteps[min(s.level, len(g.cfg.LockoutSteps)-1)]
		lockedFor = g.cfg.LockoutMs * step
		s.lockedUntil = now + lockedFor
		s.level++
		s.failures = 0
	}
	e.forgetAt = max(s.lockedUntil, now) + g.cfg.FailureTTLMs
	return lockedFor
}

// CheckAddr decides whether a login that names no password user (a
// certificate or a token) may be attempted from addr at now: only the
// address's bucket applies, never a user's.
func (g *Guard) CheckAddr(addr string, now int64) (v Verdict, wait int64) {
	if w := g.waitFor(g.addrs, g.cfg.AddrFailures, addr, now); w > 0 {
		return RateLimited, w
	}
	return Allow, 0
}

// FailAddr records a failed login that names no password user (a
// certificate or token that did not verify): it counts against the
// address only and never locks an account.
func (g *Guard) FailAddr(addr string, now int64) {
	g.take(g.addrs, g.cfg.AddrFailures, addr, now)
}

// Succeed records a successful login: the pair's failures and lock level
// are forgotten. The buckets are not refilled, so interleaving successes
// with guesses does not buy more guesses.
func (g *Guard) Succeed(user, addr string) {
	g.locks.delete(lockKey{user, addr})
}

// Len reports the entries held in the lockout, address and user tables.
func (g *Guard) Len() (locks, addrs, users int) {
	return g.locks.len(), g.addrs.len(), g.users.len()
}

// waitFor returns 0 if key's bucket holds a token at now, else how long
// until it does.
func (g *Guard) waitFor(t *lru[string, bucket], r Rate, key string, now int64) int64 {
	e, ok := t.get(key, now)
	if !ok {
		return 0
	}
	over := e.val.tat - now*int64(r.Burst) - int64(r.Burst-1)*r.PeriodMs
	if over <= 0 {
		return 0
	}
	return ceilDiv(over, int64(r.Burst))
}

// take spends one token of key's bucket; an empty bucket stays empty
// (failures while refused are not counted twice). It returns the bucket.
func (g *Guard) take(t *lru[string, bucket], r Rate, key string, now int64) *bucket {
	scaled := now * int64(r.Burst)
	e := t.put(key, bucket{tat: scaled}, now)
	e.val.tat = min(max(e.val.tat, scaled)+r.PeriodMs, scaled+int64(r.Burst)*r.PeriodMs)
	e.forgetAt = max(e.forgetAt, ceilDiv(e.val.tat, int64(r.Burst)))
	return &e.val
}

// settle marks one running attempt of key's bucket as finished.
func (g *Guard) settle(t *lru[string, bucket], key string, now int64) {
	if e, ok := t.get(key, now); ok && e.val.pending > 0 {
		e.val.pending--
	}
}

// refund gives back one token of key's bucket, taken by Begin for an
// attempt that succeeded; never more than the bucket holds when full.
func (g *Guard) refund(t *lru[string, bucket], r Rate, key string, now int64) {
	e, ok := t.get(key, now)
	if !ok {
		return
	}
	e.val.tat = max(e.val.tat-r.PeriodMs, now*int64(r.Burst))
	e.forgetAt = ceilDiv(e.val.tat, int64(r.Burst))
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
