package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/replica"
)

// One failover per range at a time; a failed one makes the range wait,
// from base doubling up to ceiling, and meanwhile refusals say why the
// last attempt failed; a success forgets the range.
func TestFailoverGateBacksOff(t *testing.T) {
	var f failoverRuns
	now := time.Unix(1000, 0)
	const base, ceiling = 250 * time.Millisecond, time.Second
	if err := f.begin(7, now); err != nil {
		t.Fatalf("first attempt refused: %v", err)
	}
	if err := f.begin(7, now); !errors.Is(err, ErrRetry) || !errors.Is(err, errFailoverWaits) {
		t.Fatalf("a second attempt while one runs: %v, want a retry", err)
	}
	if err := f.failing(7); err == nil {
		t.Fatal("a produce is not told that the range is failing over")
	}
	if err := f.begin(8, now); err != nil {
		t.Fatalf("another range is held up by range 7's failover: %v", err)
	}

	cause := fmt.Errorf("%w: no leader", ErrMetadataUnavailable)
	waits := []time.Duration{base, 2 * base, ceiling, ceiling}
	for i, wait := range waits {
		f.finish(7, cause, now, base, ceiling)
		if err := f.failing(7); err != nil {
			t.Fatalf("attempt %d finished, yet produces are refused as if it ran: %v", i, err)
		}
		err := f.begin(7, now.Add(wait-time.Millisecond))
		if !errors.Is(err, ErrMetadataUnavailable) || !errors.Is(err, errFailoverWaits) {
			t.Fatalf("attempt %d: tried again %s after a failure: %v, want metadata_unavailable", i, wait-time.Millisecond, err)
		}
		now = now.Add(wait)
		if err := f.begin(7, now); err != nil {
			t.Fatalf("attempt %d: not tried again %s after a failure: %v", i, wait, err)
		}
	}
	f.finish(7, nil, now, base, ceiling)
	if waits, failed := f.state(7, now); waits || failed {
		t.Fatalf("a range that failed over still waits (%v) or counts as failed (%v)", waits, failed)
	}
	if err := f.begin(7, now); err != nil {
		t.Fatalf("a range that failed over cannot fail over again: %v", err)
	}
}

// A fence without enough answers answers no_quorum, which callers that
// only know ErrRetry retry.
func TestFailoverReasonOfAFenceWithoutQuorum(t *testing.T) {
	err := failoverReason(fmt.Errorf("fence: %w", replica.ErrNoQuorum))
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, ErrRetry) || reasonOf(err) != "no_quorum" {
		t.Fatalf("reason %v (%s), want no_quorum that is a retry", err, reasonOf(err))
	}
	if got := failoverReason(errors.New("disk full")); got != ErrRetry {
		t.Fatalf("an unknown failure: %v, want retry", got)
	}
}

// B1: the ranges a node keeps failover state for are bounded; ranges
// that wait no more make room, and past the bound a failover is refused.
func TestFailoverGatesBounded(t *testing.T) {
	var f failoverRuns
	now := time.Unix(1000, 0)
	for id := range uint64(maxFailoverGates) {
		if err := f.begin(id, now); err != nil {
			t.Fatalf("range %d: %v", id, err)
		}
	}
	if err := f.begin(maxFailoverGates, now); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("one range past the bound: %v, want too_many_requests", err)
	}
	f.finish(0, errors.New("no quorum"), now, time.Second, time.Second)
	if err := f.begin(maxFailoverGates, now); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("a range still waiting made room: %v", err)
	}
	if err := f.begin(maxFailoverGates, now.Add(time.Second)); err != nil {
		t.Fatalf("a range that waits no more did not make room: %v", err)
	}
}

// B1: background releases of failed attempts' holds are bounded, and
// none starts once the broker is closing.
func TestHoldReleasesBounded(t *testing.T) {
	var f failoverRuns
	for i := range maxHoldReleases {
		if !f.startRelease() {
			t.Fatalf("release %d refused below the bound", i)
		}
	}
	if f.startRelease() {
		t.Fatal("a release started past the bound")
	}
	f.releaseDone()
	f.wg.Done()
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	if f.startRelease() {
		t.Fatal("a release started while the broker closes")
	}
	for range maxHoldReleases - 1 {
		f.releaseDone()
		f.wg.Done()
	}
	f.wg.Wait()
}
