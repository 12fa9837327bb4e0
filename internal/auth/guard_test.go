package auth

import (
	"fmt"
	"testing"
)

const minute = 60_000

func mustVerdict(t *testing.T, g *Guard, user, addr string, now int64, want Verdict) int64 {
	t.Helper()
	v, wait := g.Check(user, addr, now)
	if v != want {
		t.Fatalf("Check(%s, %s) at %d = %v (wait %d), want %v", user, addr, now, v, wait, want)
	}
	return wait
}

func TestGuardProgressiveLockout(t *testing.T) {
	g := NewGuard(GuardConfig{AddrFailures: Rate{Burst: 1000, PeriodMs: 1}, UserFailures: Rate{Burst: 1000, PeriodMs: 1}})
	now := int64(1_000_000)
	for i, want := range []int64{5, 15, 45, 120, 360, 360} {
		for f := range DefaultMaxFailures {
			mustVerdict(t, g, "alice", "10.0.0.1", now, Allow)
			locked := g.Fail("alice", "10.0.0.1", now)
			if f < DefaultMaxFailures-1 && locked != 0 {
				t.Fatalf("lock %d: failure %d locked already", i, f)
			}
			if f == DefaultMaxFailures-1 && locked != want*minute {
				t.Fatalf("lock %d lasts %d ms, want %d min", i, locked, want)
			}
		}
		if wait := mustVerdict(t, g, "alice", "10.0.0.1", now, Locked); wait != want*minute {
			t.Fatalf("lock %d: wait %d", i, wait)
		}
		// Another address, and another user, are not locked.
		mustVerdict(t, g, "alice", "10.0.0.2", now, Allow)
		mustVerdict(t, g, "bob", "10.0.0.1", now, Allow)
		now += want*minute - 1
		mustVerdict(t, g, "alice", "10.0.0.1", now, Locked)
		now++
		mustVerdict(t, g, "alice", "10.0.0.1", now, Allow)
	}
}

func TestGuardSuccessAndTTLReset(t *testing.T) {
	g := NewGuard(GuardConfig{})
	now := int64(0)
	for range 4 {
		g.Fail("alice", "a", now)
	}
	g.Succeed("alice", "a")
	for range 4 {
		if g.Fail("alice", "a", now) != 0 {
			t.Fatal("failures before a success still count")
		}
	}
	// Failures older than the TTL are forgotten.
	now += DefaultFailureTTLMs
	for range 4 {
		if g.Fail("alice", "a", now) != 0 {
			t.Fatal("failures older than the TTL still count")
		}
	}
	if g.Fail("alice", "a", now) != DefaultLockoutMs {
		t.Fatal("fifth failure did not lock for the base duration")
	}
	// After the lock and a quiet TTL, the level resets to the first step.
	now += DefaultLockoutMs + DefaultFailureTTLMs
	for range 4 {
		g.Fail("alice", "a", now)
	}
	if got := g.Fail("alice", "a", now); got != DefaultLockoutMs {
		t.Fatalf("lock after a quiet hour lasts %d, want the base", got)
	}
}

func TestGuardRateLimits(t *testing.T) {
	g := NewGuard(GuardConfig{
		MaxFailures:  1000,
		AddrFailures: Rate{Burst: 3, PeriodMs: 3000},
		UserFailures: Rate{Burst: 5, PeriodMs: 5000},
	})
	now := int64(10_000)
	for i := range 3 {
		mustVerdict(t, g, fmt.Sprint("u", i), "a", now, Allow)
		g.Fail(fmt.Sprint("u", i), "a", now)
	}
	if wait := mustVerdict(t, g, "u9", "a", now, RateLimited); wait != 1000 {
		t.Fatalf("address wait %d, want 1000", wait)
	}
	mustVerdict(t, g, "u9", "b", now, Allow)
	now += 1000 // one token back
	mustVerdict(t, g, "u9", "a", now, Allow)
	g.Fail("u9", "a", now)
	mustVerdict(t, g, "u9", "a", now, RateLimited)

	// The user bucket spans addresses.
	for i := range 5 {
		g.Fail("carol", fmt.Sprint("10.1.0.", i), now)
	}
	mustVerdict(t, g, "carol", "10.9.9.9", now, RateLimited)
	mustVerdict(t, g, "dave", "10.9.9.9", now, Allow)
	// Successes never spend tokens: many logins from one address pass.
	for range 100 {
		mustVerdict(t, g, "erin", "c", now, Allow)
		g.Succeed("erin", "c")
	}
	// FailAddr counts against the address only.
	for range 3 {
		g.FailAddr("d", now)
	}
	mustVerdict(t, g, "frank", "d", now, RateLimited)
	if locks, _, _ := g.Len(); locks != 5+4 {
		t.Fatalf("lockout table holds %d pairs; FailAddr must add none", locks)
	}
}

func TestGuardBucketRefillsExactly(t *testing.T) {
	// 30 per minute is one token every 2 s; checks every millisecond must
	// not lose the fractions.
	g := NewGuard(GuardConfig{MaxFailures: 1 << 30, AddrFailures: Rate{Burst: 30, PeriodMs: minute}})
	now := int64(0)
	for range 30 {
		g.Fail("u", "a", now)
	}
	mustVerdict(t, g, "u", "a", now, RateLimited)
	for now < 1999 {
		now++
		mustVerdict(t, g, "u", "a", now, RateLimited)
	}
	now++
	mustVerdict(t, g, "u", "a", now, Allow)
}

func TestGuardTablesAreBounded(t *testing.T) {
	g := NewGuard(GuardConfig{MaxEntries: 8})
	for i := range 1000 {
		g.Fail(fmt.Sprint("user", i), fmt.Sprint("addr", i), int64(i))
	}
	locks, addrs, users := g.Len()
	if locks > 8 || addrs > 8 || users > 8 {
		t.Fatalf("tables hold %d, %d, %d entries; bound 8", locks, addrs, users)
	}
	// The most recent entries survive eviction.
	for range 4 {
		g.Fail("user999", "addr999", 1000)
	}
	mustVerdict(t, g, "user999", "addr999", 1000, Locked)
}

func TestGuardForgetsExpiredEntries(t *testing.T) {
	g := NewGuard(GuardConfig{})
	g.Fail("u", "a", 0)
	g.Check("x", "y", DefaultFailureTTLMs+minute)
	if locks, addrs, users := g.Len(); locks+addrs+users != 0 {
		t.Fatalf("expired entries kept: %d %d %d", locks, addrs, users)
	}
}

// TestBurstDoesNotEscalateLock: a burst of parallel attempts is admitted
// only up to the lock threshold, and failures landing once the pair is
// locked do not raise its level: one burst locks for the first step only.
func TestBurstDoesNotEscalateLock(t *testing.T) {
	g := NewGuard(GuardConfig{})
	now := int64(1_000_000_000)
	admitted := 0
	for i := 0; i < 25; i++ {
		if v, _ := g.Begin("admin", "10.0.0.1", now); v == Allow {
			admitted++
		}
	}
	if admitted != DefaultMaxFailures {
		t.Fatalf("%d of 25 parallel attempts admitted, want %d", admitted, DefaultMaxFailures)
	}
	var longest int64
	for i := 0; i < admitted; i++ {
		longest = max(longest, g.Finish("admin", "10.0.0.1", false, now))
	}
	// Failures of the old kind (Fail, not admitted by Begin) while locked.
	for i := 0; i < 20; i++ {
		longest = max(longest, g.Fail("admin", "10.0.0.1", now))
	}
	if longest != DefaultLockoutMs {
		t.Fatalf("locked for %d ms, want the first step %d", longest, DefaultLockoutMs)
	}
}

// TestSuccessesCostNoTokens: successful logins give back what Begin took,
// so a client opening many connections at once is never rate limited.
func TestSuccessesCostNoTokens(t *testing.T) {
	g := NewGuard(GuardConfig{})
	now := int64(1_000_000_000)
	for i := 0; i < 200; i++ {
		if v, _ := g.Begin("app", "10.0.0.2", now); v != Allow {
			t.Fatalf("login %d refused", i)
		}
		g.Finish("app", "10.0.0.2", true, now)
	}
}
