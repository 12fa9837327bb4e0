package wire

import "encoding/binary"

// session_auth (84): logging in again without a password hash. A
// successful login answers a session token (auth, mtls_auth, token_auth and
// session_auth all do); a new connection presents it to session_auth and is
// logged in as the same identity in microseconds. The request may carry a
// user and password too, tried only when the token is absent or refused,
// so a client reconnecting after a node restart needs one round trip
// either way.
//
// Its refusals are the one place a reason travels with a retry-after
// hint: error code 2 (CodeErrorHint), payload str(reason)
// retry_after_ms:u32. v1 answers never carry it: a v1 client never sends
// key 84.

// CodeErrorHint is the error code of a refusal with a retry-after hint:
// the payload is str(reason) retry_after_ms:u32 (0: no hint). Only
// answers to session_auth (84) use it.
const CodeErrorHint uint16 = 2

// SessionAuthRequest (key 84): str(session_token) str(user) str(password).
// The token, when present, is tried first; the user and password, when
// the token is absent or refused.
type SessionAuthRequest struct{ Token, User, Password *string }

func (SessionAuthRequest) APIKey() uint16 { return KeySessionAuth }

func (r SessionAuthRequest) AppendPayload(dst []byte) []byte {
	return appendNStr(appendNStr(appendNStr(dst, r.Token), r.User), r.Password)
}

func (r *SessionAuthRequest) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = SessionAuthRequest{Token: d.nstr(), User: d.nstr(), Password: d.nstr()}
	return d.finish("session_auth")
}

// SessionAuthResponse answers session_auth (84): str(session_token)
// expires_ms:u64 resumed:bool. The token replaces the one sent (it expires
// at expires_ms, Unix milliseconds); resumed says the token, not the
// password, logged the connection in.
type SessionAuthResponse struct {
	Token     string
	ExpiresMs uint64
	Resumed   bool
}

func (r SessionAuthResponse) AppendPayload(dst []byte) []byte {
	return appendBool(appendU64(appendString(dst, r.Token), r.ExpiresMs), r.Resumed)
}

func (r *SessionAuthResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = SessionAuthResponse{Token: d.str(), ExpiresMs: d.u64(), Resumed: d.boolean()}
	return d.finish("session_auth response")
}

// AppendHintErrorFrame appends a refusal with a retry-after hint (code 2)
// to dst.
func AppendHintErrorFrame(dst []byte, corr uint32, reason string, retryAfterMs uint32) []byte {
	dst, start := startResponse(dst, corr, CodeErrorHint)
	dst = binary.BigEndian.AppendUint32(appendString(dst, reason), retryAfterMs)
	return finishFrame(dst, start)
}

// DecodeHintError decodes the payload of a code 2 answer.
func DecodeHintError(payload []byte) (reason string, retryAfterMs uint32, err error) {
	d := decoder{b: payload}
	reason = d.str()
	retryAfterMs = d.u32()
	return reason, retryAfterMs, d.finish("error response with hint")
}
