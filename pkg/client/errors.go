package client

import (
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Error is a refusal the broker sent: the reason string from the wire
// protocol and whether the same request may succeed if sent again after a
// short back-off. Request methods already retry retriable errors (see
// WithRetry), so a retriable Error reaching the caller means the retries
// ran out.
//
// Compare with errors.Is against the sentinels below; Is matches on the
// reason, so it also works for Errors built elsewhere:
//
//	if errors.Is(err, client.ErrNoSuchTopic) { ... }
type Error struct {
	// Reason is the wire reason, such as "no_such_topic".
	Reason string
	// Retriable reports that retrying after a back-off is safe and may
	// succeed.
	Retriable bool
	// RetryAfter is how long the node asked the client to wait before
	// trying again, 0 for no hint. Only refusals of session_auth carry
	// one (see RetryAfter).
	RetryAfter time.Duration
}

// Error returns "malachi: " followed by the reason.
func (e *Error) Error() string { return "malachi: " + e.Reason }

// Is reports whether target is an *Error with the same reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// Description says when the broker sends the error's reason, or "" for a
// reason this client does not know.
func (e *Error) Description() string { return wire.Reasons[e.Reason].Description }

// Client-side conditions. None of them is an *Error.
var (
	// ErrClosed is returned by calls on a closed Client, Producer or
	// Subscription, and fails calls still waiting when Close runs.
	ErrClosed = errors.New("malachi: client closed")
	// ErrDisconnected means the connection to the broker could not be made
	// or broke while a request was outstanding: the request may or may not
	// have taken effect. The next call dials again. IsRetriable reports
	// true for it.
	ErrDisconnected = errors.New("malachi: disconnected")
	// ErrRequestTimeout means the broker did not answer within the
	// request timeout (see WithRequestTimeout). The request may or may not
	// have taken effect.
	ErrRequestTimeout = errors.New("malachi: request timed out")
	// ErrProtocol means the broker sent bytes this client cannot decode:
	// a frame (the connection is then dropped), an answer, or a stored
	// batch of a wire v2 fetch that fails its checks (CRC included).
	ErrProtocol = errors.New("malachi: protocol error")
	// ErrRequestTooLarge means a request would exceed the frame limit
	// (WithMaxFrame); it was not sent.
	ErrRequestTooLarge = errors.New("malachi: request too large")
	// ErrTLS means no TLS session could be made as configured: the server
	// certificate is not trusted or does not name the host, the server
	// does not speak TLS, or it refused the client certificate. Retrying
	// does not help; IsRetriable reports false.
	ErrTLS = errors.New("malachi: TLS failed")
)

// IsRetriable reports whether err is worth retrying after a back-off: a
// retriable *Error, or ErrDisconnected.
func IsRetriable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retriable
	}
	return errors.Is(err, ErrDisconnected)
}

// reasonErrors maps each reason in wire.Reasons to its sentinel.
var reasonErrors = map[string]*Error{}

func reasonError(reason string) *Error {
	e := &Error{Reason: reason, Retriable: wire.IsRetriable(reason)}
	reasonErrors[reason] = e
	return e
}

// errorFor returns the sentinel of reason, or a new non-retriable *Error
// for a reason this client does not know (a newer broker).
func errorFor(reason string) *Error {
	if e, ok := reasonErrors[reason]; ok {
		return e
	}
	return &Error{Reason: reason}
}

// One sentinel per reason the broker may send, grouped as in the wire
// protocol's reasons table. The Retriable flag of each comes from that
// table.
var (
	// Framing and protocol.
	ErrFrameTooLarge    = reasonError(wire.ReasonFrameTooLarge)
	ErrMalformedRequest = reasonError(wire.ReasonMalformedRequest)
	ErrUnknownAPIKey    = reasonError(wire.ReasonUnknownAPIKey)
	ErrAuthRequired     = reasonError(wire.ReasonAuthRequired)
	ErrUnexpectedFrame  = reasonError(wire.ReasonUnexpectedFrame)
	// ErrTLSRequired: the port accepts TLS only; dial with WithTLS.
	ErrTLSRequired = reasonError(wire.ReasonTLSRequired)

	// Authentication, authorisation and admission.
	ErrInvalidCredentials = reasonError(wire.ReasonInvalidCredentials)
	ErrAccountLocked      = reasonError(wire.ReasonAccountLocked)
	ErrRateLimitExceeded  = reasonError(wire.ReasonRateLimitExceeded)
	// ErrInvalidSession, ErrSessionExpired, ErrSessionRevoked: a
	// session_auth token was refused; log in with credentials again.
	ErrInvalidSession          = reasonError(wire.ReasonInvalidSession)
	ErrSessionExpired          = reasonError(wire.ReasonSessionExpired)
	ErrSessionRevoked          = reasonError(wire.ReasonSessionRevoked)
	ErrConnectionLimitExceeded = reasonError(wire.ReasonConnectionLimitExceeded)
	ErrGlobalLimitExceeded     = reasonError(wire.ReasonGlobalLimitExceeded)
	ErrTooManyRequests         = reasonError(wire.ReasonTooManyRequests)
	ErrTooManyRecords          = reasonError(wire.ReasonTooManyRecords)
	ErrTooManyMembers          = reasonError(wire.ReasonTooManyMembers)
	ErrQuotaExceeded           = reasonError(wire.ReasonQuotaExceeded)
	ErrPermissionDenied        = reasonError(wire.ReasonPermissionDenied)
	ErrMTLSAuthDisabled        = reasonError(wire.ReasonMTLSAuthDisabled)
	ErrMTLSAuthUnavailable     = reasonError(wire.ReasonMTLSAuthUnavailable)
	ErrNoPeerCertificate       = reasonError(wire.ReasonNoPeerCertificate)
	ErrOIDCAuthDisabled        = reasonError(wire.ReasonOIDCAuthDisabled)
	ErrOIDCMisconfigured       = reasonError(wire.ReasonOIDCMisconfigured)
	ErrNotEnabled              = reasonError(wire.ReasonNotEnabled)

	// Transient conditions (all retriable).
	ErrRetry               = reasonError(wire.ReasonRetry)
	ErrTimeout             = reasonError(wire.ReasonTimeout)
	ErrShuttingDown        = reasonError(wire.ReasonShuttingDown)
	ErrMigrating           = reasonError(wire.ReasonMigrating)
	ErrNotOwner            = reasonError(wire.ReasonNotOwner)
	ErrNoQuorum            = reasonError(wire.ReasonNoQuorum)
	ErrMetadataUnavailable = reasonError(wire.ReasonMetadataUnavailable)
	ErrUnreachable         = reasonError(wire.ReasonUnreachable)
	ErrNotPrimary          = reasonError(wire.ReasonNotPrimary)
	ErrOffsetMismatch      = reasonError(wire.ReasonOffsetMismatch)
	ErrSegmentExists       = reasonError(wire.ReasonSegmentExists)
	ErrSealed              = reasonError(wire.ReasonSealed)
	ErrSegmentOverlap      = reasonError(wire.ReasonSegmentOverlap)
	ErrActiveSegmentExists = reasonError(wire.ReasonActiveSegmentExists)
	ErrUnknownMember       = reasonError(wire.ReasonUnknownMember)
	ErrPersistFailed       = reasonError(wire.ReasonPersistFailed)

	// Requests the broker refuses as they stand.
	ErrNoSuchTopic         = reasonError(wire.ReasonNoSuchTopic)
	ErrNoSuchRange         = reasonError(wire.ReasonNoSuchRange)
	ErrNoSuchSegment       = reasonError(wire.ReasonNoSuchSegment)
	ErrNotFound            = reasonError(wire.ReasonNotFound)
	ErrAlreadyExists       = reasonError(wire.ReasonAlreadyExists)
	ErrInvalidTopicName    = reasonError(wire.ReasonInvalidTopicName)
	ErrInvalidKeyspaceBits = reasonError(wire.ReasonInvalidKeyspaceBits)
	ErrInvalidRangeCount   = reasonError(wire.ReasonInvalidRangeCount)
	ErrInvalidCursor       = reasonError(wire.ReasonInvalidCursor)
	ErrInvalidRecord       = reasonError(wire.ReasonInvalidRecord)
	ErrInvalidBatch        = reasonError(wire.ReasonInvalidBatch)
	ErrCannotSplit         = reasonError(wire.ReasonCannotSplit)
	ErrDifferentTopic      = reasonError(wire.ReasonDifferentTopic)
	ErrNotBuddies          = reasonError(wire.ReasonNotBuddies)
	ErrSegmentActive       = reasonError(wire.ReasonSegmentActive)
	ErrAlreadySealed       = reasonError(wire.ReasonAlreadySealed)
	ErrUserExists          = reasonError(wire.ReasonUserExists)
	ErrUserNotFound        = reasonError(wire.ReasonUserNotFound)
	ErrLastAdmin           = reasonError(wire.ReasonLastAdmin)
	ErrGroupHasMembers     = reasonError(wire.ReasonGroupHasMembers)
	ErrInvalidPermissions  = reasonError(wire.ReasonInvalidPermissions)
	ErrInvalidPassword     = reasonError(wire.ReasonInvalidPassword)
	ErrInvalidOperation    = reasonError(wire.ReasonInvalidOperation)
	ErrUnknownCommand      = reasonError(wire.ReasonUnknownCommand)
	ErrInvalidCommand      = reasonError(wire.ReasonInvalidCommand)
	ErrUnroutable          = reasonError(wire.ReasonUnroutable)
	ErrInsufficientDomains = reasonError(wire.ReasonInsufficientDomains)
	ErrInternalError       = reasonError(wire.ReasonInternalError)
)
