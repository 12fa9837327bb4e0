// Package broker is a Malachi node: it wires the metadata state machine,
// the segment store and the group coordinator together and serves the
// operations the client protocol exposes.
//
// # Produce
//
// A produce is routed by key through the node's metadata to the active
// range that owns the key's position. Under the range's write head lock the
// broker assigns the next offsets, encodes one batch and enqueues it to the
// segment store; the group-commit goroutine writes and fdatasyncs it, and
// only then is the produce acknowledged. Enqueueing happens in call order,
// so produces sent one after another on a connection keep their order per
// key even though their acknowledgements overlap.
//
// A range's active segment rolls when it passes SegmentMaxBytes or
// SegmentMaxAge: the store fences the segment first (nothing can land in
// it afterwards) and the seal recorded in the metadata carries exactly the
// end the fence answered. Splits and merges use the same fence.
//
// # Consume
//
// A reader's position is a set of cursor entries (see internal/cursor): for
// a source range and a key slice, every record below an offset has been
// delivered. An active range's history is its ancestors' records filtered
// to its key slice, oldest first, then its own. Reads never pass the
// store's durable end, so a consumer only ever sees acknowledged records.
// Long polls and subscriptions sleep on a per-topic latch that each
// durable append fires.
package broker

import (
	"errors"

	"github.com/malachi-log/malachi/internal/metadata"
)

// Reasons the broker answers with, besides the metadata state machine's
// own (metadata.Error values). Their text is the wire reason.
var (
	ErrInvalidCursor  = errors.New("invalid_cursor")
	ErrShuttingDown   = errors.New("shutting_down")
	ErrRetry          = errors.New("retry")
	ErrTooManyMembers = errors.New("too_many_members")
	ErrPermission     = errors.New("permission_denied")
	ErrCredentials    = errors.New("invalid_credentials")
	ErrNotEnabled     = errors.New("not_enabled")
	// ErrInvalidPassword: a new password that is empty (no secret at all)
	// or longer than MaxPasswordLen.
	ErrInvalidPassword = errors.New("invalid_password")
	// ErrGroupNotFound: the group has no committed position on the topic
	// and no live members.
	ErrGroupNotFound = errors.New("not_found")
	// ErrQuotaExceeded: the request would pass a limit of the node or of
	// its user (see Limits). It is the state machine's own reason, so a
	// refusal from either side answers quota_exceeded.
	ErrQuotaExceeded error = metadata.ErrQuotaExceeded
)
