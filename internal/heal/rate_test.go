package heal_test

// The token bucket, driven by a clock the test moves: it starts full,
// lets a burst through, then exactly its rate; an oversized take goes
// through only from a full bucket and is repaid before anything else;
// a clock that steps back earns nothing; and its answers stay exact over
// long idle spans and large rates.

import (
	"errors"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

func newBucket(t *testing.T, rate, burst, now int64) *heal.Bucket {
	t.Helper()
	b, err := heal.NewBucket(rate, burst, now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustTake(t *testing.T, b *heal.Bucket, now, n, wantWait int64) {
	t.Helper()
	wait, err := b.Take(now, n)
	if err != nil || wait != wantWait {
		t.Fatalf("take %d at %d: wait %d, %v; want wait %d", n, now, wait, err, wantWait)
	}
}

func TestBucketBurstThenRate(t *testing.T) {
	b := newBucket(t, 1000, 500, 0) // 1000 B/s: one byte per ms
	mustTake(t, b, 0, 500, 0)
	mustTake(t, b, 0, 100, 100) // empty: 100 ms for 100 bytes
	mustTake(t, b, 99, 100, 1)
	mustTake(t, b, 100, 100, 0)
	// Over 10 s at most burst + 10 000 bytes go through.
	got := int64(0)
	for now := int64(100); now <= 10_100; now++ {
		if wait, _ := b.Take(now, 7); wait == 0 {
			got += 7
		}
	}
	if got > 10_000+500 || got < 10_000-7 {
		t.Fatalf("%d bytes in 10 s at 1000 B/s", got)
	}
}

func TestBucketOversizedTakeLeavesDebt(t *testing.T) {
	b := newBucket(t, 1000, 100, 0)
	mustTake(t, b, 0, 50, 0)
	mustTake(t, b, 0, 300, 50) // waits for a full bucket, not for 300
	mustTake(t, b, 50, 300, 0) // through, 200 in debt
	if got := b.Available(50); got != -200 {
		t.Fatalf("after an oversized take: %d available", got)
	}
	mustTake(t, b, 50, 1, 201)
	mustTake(t, b, 251, 1, 0)
}

func TestBucketClockBackEarnsNothing(t *testing.T) {
	b := newBucket(t, 1000, 1000, 10_000)
	mustTake(t, b, 10_000, 1000, 0)
	mustTake(t, b, 5_000, 1, 1) // the clock stepped back
	mustTake(t, b, 10_000, 1, 1)
	mustTake(t, b, 10_001, 1, 0)
}

func TestBucketLongIdleAndLargeRate(t *testing.T) {
	b := newBucket(t, heal.MaxTakeBytes, heal.MaxTakeBytes, 0)
	mustTake(t, b, 0, heal.MaxTakeBytes, 0)
	// A year idle fills the bucket, no more, and nothing overflows.
	const year = 365 * 24 * 3600 * 1000
	if got := b.Available(year); got != heal.MaxTakeBytes {
		t.Fatalf("after a year: %d", got)
	}
}

func TestBucketRefusesBadArguments(t *testing.T) {
	for _, c := range [][2]int64{{0, 1}, {1, 0}, {-1, 5}, {1, heal.MaxTakeBytes + 1}} {
		if _, err := heal.NewBucket(c[0], c[1], 0); err == nil {
			t.Errorf("rate %d burst %d accepted", c[0], c[1])
		}
	}
	b := newBucket(t, 10, 10, 0)
	for _, n := range []int64{0, -1, heal.MaxTakeBytes + 1} {
		if _, err := b.Take(0, n); !errors.Is(err, heal.ErrTakeTooLarge) {
			t.Errorf("take %d: %v", n, err)
		}
	}
}
