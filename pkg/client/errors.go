package client

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
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
//
// Every *Error a call returns is a value of its own, never one of the
// sentinels: errors.As hands out a copy that the caller may keep or
// change without changing what the sentinel, or any other error, says.
type Error struct {
	// Op is the operation that was refused, such as "fetch" or
	// "create_topic", and Topic the topic it named, "" for calls that name
	// none. Both are empty on the sentinels.
	Op, Topic string
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

// Error returns "malachi: ", the operation and topic if known, and the
// reason, as in `malachi: fetch "orders": no_such_topic`.
func (e *Error) Error() string {
	switch {
	case e.Op == "":
		return "malachi: " + e.Reason
	case e.Topic == "":
		return "malachi: " + e.Op + ": " + e.Reason
	}
	return fmt.Sprintf("malachi: %s %q: %s", e.Op, e.Topic, e.Reason)
}

// Is reports whether target is an *Error with the same reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// Description says when the broker sends the error's reason, or "" for a
// reason this client does not know.
func (e *Error) Description() string {
	if d, ok := descriptions[e.Reason]; ok {
		return d
	}
	return wire.Reasons[e.Reason].Description
}

// descriptions replaces the wire table's description of reasons whose text
// speaks of storage positions, which clients never see.
var descriptions = map[string]string{
	wire.ReasonOffsetMismatch: "The replicas of a range disagreed (a stale view); retry after they heal.",
	wire.ReasonInvalidBatch: "A batch of produce_batches is not acceptable: its framing, CRC, counts, timestamps or sizes are wrong, " +
		"its records section does not decompress to its declared length, or it is over a limit api_versions reports. " +
		"Nothing of the request was stored.",
}

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
	// ErrAnswerTooLarge means the answer to a call was larger
	// than the client's frame limit (WithMaxFrame). The answer was read
	// and dropped; only that call fails, and the connection stays up.
	ErrAnswerTooLarge = errors.New("malachi: answer too large")
	// ErrBufferFull fails a Producer's record whose Produce context ended
	// while it waited for room in the buffer (MaxBufferedRecords,
	// MaxBufferedBytes). It wraps the context's error.
	ErrBufferFull = errors.New("malachi: producer buffer full")
	// ErrInPromise is returned by Producer.Flush and Producer.Close, and
	// fails a record of Producer.Produce that would have to wait for room,
	// when called from a promise or OnBatch: each would wait for the
	// promise that called it.
	ErrInPromise = errors.New("malachi: called from a producer promise")
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

// errorFor returns a copy of the sentinel of reason, or a new
// non-retriable *Error for a reason this client does not know (a newer
// broker). Never the sentinel itself: the caller may set fields on it.
func errorFor(reason string) *Error {
	if e, ok := reasonErrors[reason]; ok {
		cp := *e
		return &cp
	}
	return &Error{Reason: reason}
}

// opError names the operation and topic in err: on an *Error at its head
// by setting Op and Topic (on a copy), else by wrapping it.
func opError(op, topic string, err error) error {
	if e, ok := err.(*Error); ok {
		if e.Op != "" {
			return err
		}
		cp := *e
		cp.Op, cp.Topic = op, topic
		return &cp
	}
	var named *callError
	if errors.As(err, &named) {
		return err
	}
	return &callError{op: op, topic: topic, err: err}
}

// callError is a failure that is not the broker's refusal (a broken
// connection, a timeout, a closed client), named with its call.
type callError struct {
	op, topic string
	err       error
}

func (e *callError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "malachi: ")
	if e.topic == "" {
		return "malachi: " + e.op + ": " + msg
	}
	return fmt.Sprintf("malachi: %s %q: %s", e.op, e.topic, msg)
}

func (e *callError) Unwrap() error { return e.err }

// requestOp names a request's operation and topic for its errors: the
// wire key's name (the _batches variants named as the calls they serve)
// and the request's Topic field, if it has one.
func requestOp(req wire.Request) (op, topic string) {
	op = strings.TrimSuffix(wire.KeyName(req.APIKey()), "_batches")
	v := reflect.Indirect(reflect.ValueOf(req))
	if v.Kind() != reflect.Struct {
		return op, ""
	}
	switch f := v.FieldByName("Topic"); {
	case !f.IsValid():
	case f.Kind() == reflect.String:
		topic = f.String()
	case f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.String:
		topic = f.Elem().String()
	}
	return op, topic
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
	// offset_mismatch is a disagreement between replicas, which clients
	// see only as a retriable *Error; it has no exported sentinel.
	errReplicasDisagree    = reasonError(wire.ReasonOffsetMismatch)
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
	ErrInvalidPageToken    = reasonError(wire.ReasonInvalidPageToken)
	ErrDescribeTooLarge    = reasonError(wire.ReasonDescribeTooLarge)
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
	// ErrStaleMember: a member's commit came after it left, was evicted or
	// joined again; nothing was committed.
	ErrStaleMember = reasonError(wire.ReasonStaleMember)

	// Storage policies and retention.
	ErrInvalidPolicy   = reasonError(wire.ReasonInvalidPolicy)
	ErrNoSuchPolicy    = reasonError(wire.ReasonNoSuchPolicy)
	ErrPolicyInUse     = reasonError(wire.ReasonPolicyInUse)
	ErrTooManyPolicies = reasonError(wire.ReasonTooManyPolicies)
	ErrSegmentNotFirst = reasonError(wire.ReasonSegmentNotFirst)
)
