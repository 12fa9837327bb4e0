package dataplane

import (
	"errors"
	"testing"
)

func TestRollRoundTrip(t *testing.T) {
	r := Roll{Range: 1 << 50, Segment: 9, HoldMs: 5000}
	if got, err := DecodeRoll(r.Encode()); err != nil || got != r {
		t.Fatalf("roll: %+v, %v", got, err)
	}
	a := RollAnswer{End: 1 << 40}
	if got, err := DecodeRollAnswer(a.Encode()); err != nil || got != a {
		t.Fatalf("roll answer: %+v, %v", got, err)
	}
	if k, err := KindOf(r.Encode()); err != nil || k != KindRoll {
		t.Fatalf("kind of a roll: %v, %v", k, err)
	}
}

func TestRollMalformedRefused(t *testing.T) {
	full := (&Roll{Range: 1 << 50, Segment: 1 << 33, HoldMs: 300}).Encode()
	for n := range len(full) {
		if _, err := DecodeRoll(full[:n]); !errors.Is(err, ErrMalformed) {
			t.Errorf("a roll cut to %d of %d bytes: %v", n, len(full), err)
		}
	}
	if _, err := DecodeRoll(append(full, 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("a roll with a trailing byte: %v", err)
	}
	if _, err := DecodeRoll((&Info{Segment: 1}).Encode()); !errors.Is(err, ErrMalformed) {
		t.Errorf("an info decoded as a roll: %v", err)
	}
	if _, err := DecodeRollAnswer([]byte{byte(StatusOK)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a roll answer with no end: %v", err)
	}
}
