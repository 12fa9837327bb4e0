package client

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
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

// TestErrorsAsHandsOutCopies: the *Error a call returns is its own value:
// changing what errors.As gave changes neither the sentinel nor the error
// of another call.
func TestErrorsAsHandsOutCopies(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		fc.refuse(corr, wire.ReasonNoSuchTopic)
	})
	c := dialFake(t, f)
	_, first := c.DescribeTopic(t.Context(), "orders")
	_, second := c.DescribeTopic(t.Context(), "orders")
	var e *Error
	if !errors.As(first, &e) || e == ErrNoSuchTopic {
		t.Fatalf("errors.As(%v) gave %p, the sentinel is %p", first, e, ErrNoSuchTopic)
	}
	e.Reason, e.Retriable = "changed", true
	if ErrNoSuchTopic.Reason != wire.ReasonNoSuchTopic || ErrNoSuchTopic.Retriable || ErrNoSuchTopic.Op != "" {
		t.Fatalf("the sentinel changed: %+v", *ErrNoSuchTopic)
	}
	if !errors.Is(second, ErrNoSuchTopic) {
		t.Fatalf("another call's error changed: %v", second)
	}
}

// TestErrorsNameTheCall: a refusal and a failure of the connection both
// say which operation on which topic failed, and still match their
// sentinels.
func TestErrorsNameTheCall(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		if _, ok := req.(*wire.DescribeTopicRequest); ok {
			fc.refuse(corr, wire.ReasonPermissionDenied)
			return
		}
		fc.nc.Close()
	})
	c := dialFake(t, f, WithRetry(1, 0))
	_, err := c.DescribeTopic(t.Context(), "orders")
	var e *Error
	if !errors.As(err, &e) || e.Op != "describe_topic" || e.Topic != "orders" || !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("refusal %v (%+v): want Op describe_topic, Topic orders", err, e)
	}
	if msg := err.Error(); msg != `malachi: describe_topic "orders": permission_denied` {
		t.Fatalf("refusal reads %q", msg)
	}
	_, err = c.ListGroups(t.Context(), "payments")
	if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), `list_groups "payments"`) {
		t.Fatalf("broken connection: %v, want ErrDisconnected naming list_groups \"payments\"", err)
	}
}

// TestNoExportedNameSpeaksOfOffsets: clients never see offsets, so no
// exported identifier of the package and no reason's description names
// them.
func TestNoExportedNameSpeaksOfOffsets(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for name, f := range p.Files {
			for ident, obj := range f.Scope.Objects {
				if ast.IsExported(ident) && strings.Contains(strings.ToLower(ident), "offset") {
					t.Errorf("%s: exported %s %s", name, obj.Kind, ident)
				}
			}
		}
	}
	for reason := range wire.Reasons {
		if d := errorFor(reason).Description(); strings.Contains(strings.ToLower(d), "offset") {
			t.Errorf("%s: description speaks of offsets: %s", reason, d)
		}
	}
}

// TestCreateTopicRefusalIsACopy: errors.As must hand out a copy, never a
// sentinel (errors.go), for the refusals the client makes itself as well.
func TestCreateTopicRefusalIsACopy(t *testing.T) {
	c := dialFake(t, startFake(t, ignore))
	err := c.CreateTopic(t.Context(), "t", WithRanges(-1))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("create topic with -1 ranges: %v", err)
	}
	if e == ErrInvalidRangeCount {
		saved := *ErrInvalidRangeCount
		defer func() { *ErrInvalidRangeCount = saved }()
		e.Retriable = true
		t.Fatalf("errors.As handed out the sentinel itself: now IsRetriable(ErrInvalidRangeCount) = %v",
			IsRetriable(ErrInvalidRangeCount))
	}
}

// TestMissingTopicRefusalIsACopy: a wire v1 node answers the fetch of a
// missing topic with an empty page without a cursor, which the client
// turns into ErrNoSuchTopic itself: Fetch and a Fetcher hand out copies.
func TestMissingTopicRefusalIsACopy(t *testing.T) {
	c := dialFake(t, startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		if _, ok := req.(*wire.FetchRequest); !ok {
			fc.refuse(corr, wire.ReasonUnknownAPIKey)
			return
		}
		fc.ok(corr, wire.FetchResponse{})
	}))
	_, ferr := c.Fetch(t.Context(), "gone", FetchOptions{})
	f := c.NewFetcher("gone", FetchOptions{})
	defer f.Close()
	_, nerr := f.Next(t.Context())
	for _, err := range []error{ferr, nerr} {
		var e *Error
		if !errors.Is(err, ErrNoSuchTopic) || !errors.As(err, &e) {
			t.Fatalf("fetch of a missing topic: %v, want ErrNoSuchTopic", err)
		}
		if e == ErrNoSuchTopic {
			t.Fatalf("errors.As(%v) handed out the sentinel itself", err)
		}
	}
}
