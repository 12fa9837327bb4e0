package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

// TestEveryReasonHasASentinel keeps the sentinels in step with the wire
// reasons table: a reason added there needs a sentinel here.
func TestEveryReasonHasASentinel(t *testing.T) {
	for reason, info := range wire.Reasons {
		e, ok := reasonErrors[reason]
		if !ok {
			t.Errorf("no sentinel for reason %q", reason)
			continue
		}
		if e.Retriable != info.Retriable {
			t.Errorf("%s: Retriable = %v, table says %v", reason, e.Retriable, info.Retriable)
		}
		if e.Description() == "" {
			t.Errorf("%s: no description", reason)
		}
	}
	if len(reasonErrors) != len(wire.Reasons) {
		t.Errorf("%d sentinels for %d reasons", len(reasonErrors), len(wire.Reasons))
	}
}

func TestErrorIs(t *testing.T) {
	wrapped := fmt.Errorf("produce: %w", errorFor("no_such_topic"))
	if !errors.Is(wrapped, ErrNoSuchTopic) {
		t.Error("wrapped no_such_topic is not ErrNoSuchTopic")
	}
	if errors.Is(wrapped, ErrInvalidCursor) {
		t.Error("no_such_topic matched ErrInvalidCursor")
	}
	fresh := &Error{Reason: "migrating"}
	if !errors.Is(fresh, ErrMigrating) {
		t.Error("an Error built elsewhere does not match its sentinel")
	}
	unknown := errorFor("reason_from_the_future")
	if unknown.Retriable || unknown.Reason != "reason_from_the_future" {
		t.Errorf("unknown reason: %+v", unknown)
	}
	var e *Error
	if !errors.As(wrapped, &e) || e.Reason != "no_such_topic" || e.Error() != "malachi: no_such_topic" {
		t.Errorf("errors.As: %+v", e)
	}
}

func TestIsRetriable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{ErrMigrating, true},
		{ErrNotOwner, true},
		{ErrNoQuorum, true},
		{ErrMetadataUnavailable, true},
		{ErrShuttingDown, true},
		{ErrRetry, true},
		{ErrNoSuchTopic, false},
		{ErrPermissionDenied, false},
		{fmt.Errorf("%w: reset", ErrDisconnected), true},
		{ErrClosed, false},
		{ErrRequestTimeout, false},
		{errors.New("other"), false},
	}
	for _, tc := range tests {
		if got := IsRetriable(tc.err); got != tc.want {
			t.Errorf("IsRetriable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
