package heal

import (
	"errors"
	"fmt"
)

// MaxTakeBytes bounds one Take: a chunk of a copy or a scrub read, never
// more than a few of the largest batches.
const MaxTakeBytes = 1 << 30

// ErrTakeTooLarge refuses a Take above MaxTakeBytes or below 1.
var ErrTakeTooLarge = errors.New("heal: take out of bounds")

// Bucket is a token bucket in bytes per second: it holds at most Burst
// bytes of credit and refills at Rate. Time is an input (unix ms), so
// the same calls always give the same answers. Its state is two numbers.
//
// A take larger than Burst is let through once the bucket is full, and
// leaves it in debt: batches cannot be cut, and the rate still holds on
// average, since the debt is repaid before anything else goes.
type Bucket struct {
	rate, burst int64 // bytes/s, bytes
	// milli is the credit in thousandths of a byte (bytes × ms / s), so
	// that refilling by elapsed ms × rate loses nothing to rounding. It
	// may be negative (debt), never below -MaxTakeBytes × 1000.
	milli int64
	last  int64 // unix ms of the last refill
}

// NewBucket makes a bucket that refills at rate bytes/s up to burst
// bytes, full at now.
func NewBucket(rate, burst, now int64) (*Bucket, error) {
	if rate <= 0 || burst <= 0 || burst > MaxTakeBytes || rate > MaxTakeBytes {
		return nil, fmt.Errorf("heal: rate %d B/s and burst %d B must be in 1..%d", rate, burst, MaxTakeBytes)
	}
	return &Bucket{rate: rate, burst: burst, milli: burst * 1000, last: now}, nil
}

// refill adds the credit earned since the last call. A clock that went
// back earns nothing until it passes the last time seen again, so no
// stretch of time is paid for twice.
func (b *Bucket) refill(now int64) {
	elapsed := now - b.last
	if elapsed <= 0 {
		return
	}
	b.last = now
	full := b.burst * 1000
	// Bounding elapsed first keeps elapsed × rate from overflowing.
	need := (full-b.milli)/b.rate + 1
	b.milli = min(full, b.milli+min(elapsed, need)*b.rate)
}

// Take asks for n bytes at now. It answers 0 and takes them when the
// bucket holds enough credit (or is full, for n above Burst); otherwise it
// takes nothing and answers how many ms to wait before asking again.
func (b *Bucket) Take(now, n int64) (waitMs int64, err error) {
	if n <= 0 || n > MaxTakeBytes {
		return 0, fmt.Errorf("%w: %d bytes, want 1..%d", ErrTakeTooLarge, n, MaxTakeBytes)
	}
	b.refill(now)
	want := min(n, b.burst) * 1000
	if b.milli >= want {
		b.milli -= n * 1000
		return 0, nil
	}
	return (want - b.milli + b.rate - 1) / b.rate, nil
}

// Available is the whole bytes of credit at now (negative in debt).
func (b *Bucket) Available(now int64) int64 {
	b.refill(now)
	return b.milli / 1000
}
