package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Session resumption and paced redials.
//
// Every successful login answers a session token (wire v1's auth,
// mtls_auth and token_auth as a TokenResponse, session_auth with its
// expiry). The client keeps the newest one. Once a node's api_versions
// answer has listed session_auth (key 84), later connections to it log in
// with session_auth: the token, plus the user and password when the
// client has them, so the node tries the token and falls back to the
// password in the same round trip. A token-only resume (certificate or
// JWT logins) that the node refuses is followed at once by an ordinary
// login. The token is never logged, nor put in an error.
//
// A node under a reconnect storm refuses logins with
// rate_limit_exceeded, on session_auth with a retry-after hint, and
// refuses connections past its limits. A redial waits the hint plus up to
// half as much again, at random; without a hint, exponential back-off
// with full jitter. See dialPaced.
//
// The hint comes only with session_auth, so a password client that waits
// out load refusals (WithDialRetry) logs in with session_auth (user and
// password, no token yet) on its first Dial too, before any api_versions
// answer has said the node serves it: a fleet started at once then paces
// itself by the node's hint from its first refusal. A node without key 84
// refuses that frame (auth_required or unknown_api_key) and the client
// dials again at once with auth (key 0), as it does when a node is
// downgraded. A plain Dial keeps the configured login's own frame until
// the node has listed session_auth, so its refusals carry no hint.

// session is what a Client keeps between connections. Subscriptions share
// it with the Client that made them.
type session struct {
	mu        sync.Mutex
	token     string
	expiresMs uint64 // when the token expires (Unix ms); 0 if not told
	// known: an api_versions answer, or a refusal of session_auth, has
	// told whether the node serves session_auth; served is what it told.
	known, served bool
}

// authPlan is how one dial logs in: session_auth (with the token, if
// any) or the configured method's own frame.
type authPlan struct {
	session bool
	token   string
}

// plan chooses the login of the next connection.
func (s *session) plan(cfg *config) authPlan {
	if s == nil || cfg.wireVersion < 2 {
		return authPlan{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Before the node has told, only a password client that waits out
	// load refusals asks with session_auth: for the retry-after hint.
	optimistic := !s.known && cfg.dialRetry && cfg.auth == authPassword
	if !s.served && !optimistic {
		return authPlan{}
	}
	tok := s.token
	if s.expiresMs != 0 && uint64(time.Now().UnixMilli()) >= s.expiresMs {
		tok = "" // expired by this clock: do not offer it
	}
	if tok == "" && cfg.auth != authPassword {
		return authPlan{} // nothing for session_auth to carry
	}
	return authPlan{session: true, token: tok}
}

func (s *session) setServed(v bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.known, s.served = true, v
	s.mu.Unlock()
}

// keep stores the token of a login answer; an empty one changes nothing.
func (s *session) keep(tok string, expiresMs uint64) {
	if s == nil || tok == "" {
		return
	}
	s.mu.Lock()
	s.token, s.expiresMs = tok, expiresMs
	s.mu.Unlock()
}

// drop forgets tok unless another connection has replaced it already.
func (s *session) drop(tok string) {
	if s == nil || tok == "" {
		return
	}
	s.mu.Lock()
	if s.token == tok {
		s.token, s.expiresMs = "", 0
	}
	s.mu.Unlock()
}

// answered keeps the token of a successful login's answer. An answer
// that does not decode (a node that predates tokens) keeps nothing.
func (s *session) answered(req wire.Request, payload []byte) (resumed bool) {
	if _, ok := req.(wire.SessionAuthRequest); ok {
		var resp wire.SessionAuthResponse
		if resp.Decode(payload) == nil {
			s.keep(resp.Token, resp.ExpiresMs)
			return resp.Resumed
		}
		return false
	}
	var resp wire.TokenResponse
	if resp.Decode(payload) == nil {
		s.keep(resp.Token, 0)
	}
	return false
}

// refused handles a refused session_auth dial and reports whether to dial
// again at once with the configured method's own login.
func (s *session) refused(p authPlan, cfg *config, err error) bool {
	switch {
	case errors.Is(err, ErrInvalidSession), errors.Is(err, ErrSessionExpired),
		errors.Is(err, ErrSessionRevoked), errors.Is(err, ErrTLSRequired),
		errors.Is(err, ErrNotEnabled): // a node with resumption turned off
		s.drop(p.token)
		// With a password the node has tried it already; a token-only
		// client (WithSessionToken) has nothing else to try.
		return cfg.auth == authMTLS || cfg.auth == authToken
	case errors.Is(err, ErrInvalidCredentials):
		s.drop(p.token) // the token and the password were both refused
		return false
	case errors.Is(err, ErrAuthRequired), errors.Is(err, ErrUnknownAPIKey), errors.Is(err, ErrMalformedRequest):
		// A node that no longer serves session_auth (a downgrade).
		s.setServed(false)
		return cfg.auth != authSession
	}
	return false
}

// servesSession reports whether an api_versions answer lists session_auth.
func servesSession(r reply) bool {
	payload, err := r.result()
	if err != nil {
		return false
	}
	var resp wire.APIVersionsResponse
	return resp.Decode(payload) == nil && resp.Serves(wire.KeySessionAuth, 1)
}

// RetryAfter returns how long the node asked the client to wait before it
// dials again, from a refusal of session_auth (rate_limit_exceeded while
// the node's login queue is full), or 0 if err carries no such hint.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// Back-off of redials the node refused for admission.
const (
	stormBase = 100 * time.Millisecond
	stormCap  = 30 * time.Second
)

// isAdmission reports whether err is the node turning a login or a
// connection away for load, which a later dial may pass.
func isAdmission(err error) bool {
	return errors.Is(err, ErrRateLimitExceeded) || errors.Is(err, ErrConnectionLimitExceeded) ||
		errors.Is(err, ErrGlobalLimitExceeded)
}

// stormDelay is the pause before the next dial after the n-th admission
// refusal in a row (1-based): the node's hint plus 0-50 % at random, or
// else full jitter over 100 ms doubled per refusal, capped at 30 s.
func stormDelay(err error, n int) time.Duration {
	if h := RetryAfter(err); h > 0 && errors.Is(err, ErrRateLimitExceeded) {
		return h + rand.N(h/2+1)
	}
	d := stormBase << min(n-1, 20)
	if d <= 0 || d > stormCap {
		d = stormCap
	}
	return rand.N(d + 1)
}

// dialPaced dials addr; with retry, it dials again after each admission
// refusal, paced by stormDelay, until a connection is made, another error
// ends it or ctx ends.
func dialPaced(ctx context.Context, addr string, cfg *config, retry bool) (*conn, error) {
	for n := 1; ; n++ {
		cn, err := dialConn(ctx, addr, cfg, true)
		if err == nil || !retry || !isAdmission(err) {
			return cn, err
		}
		if werr := cfg.pause(ctx, stormDelay(err, n)); werr != nil {
			return nil, fmt.Errorf("%w (last refusal: %w)", werr, err)
		}
	}
}
