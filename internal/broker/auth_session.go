package broker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/auth"
)

// Login sessions: every successful login answers a session token
// (internal/auth session.go), and Resume logs a new connection in with it
// as the same identity, without a password hash: after a node restart,
// thousands of clients log in again in microseconds each instead of
// queueing for argon2id. The node keeps no table of tokens; a token is
// checked by its MAC, its expiry, and the account it names:
//
//   - a deleted user, or one deleted and created again, or a changed
//     password, changes the account's credential fingerprint, so the token
//     is refused (session_revoked) — across restarts too;
//   - a token expires SessionTTL after it was issued; resuming answers a
//     fresh token, but never one that outlives SessionMaxAge from the
//     login that checked a password, certificate or JWT (session_expired);
//   - a token issued over TLS is refused in the clear (tls_required).

// Session refusals; their text is the wire reason.
var (
	ErrSessionInvalid = errors.New("invalid_session")
	ErrSessionExpired = errors.New("session_expired")
	ErrSessionRevoked = errors.New("session_revoked")
	ErrTLSRequired    = errors.New("tls_required")
)

// MethodSession is the audit method of a login by session token.
const MethodSession = "session"

var sessionMethods = map[string]auth.SessionMethod{
	MethodPassword: auth.SessionPassword, MethodMTLS: auth.SessionCert, MethodToken: auth.SessionJWT,
}

func methodOf(m auth.SessionMethod) string {
	for name, v := range sessionMethods {
		if v == m {
			return name
		}
	}
	return ""
}

// issueToken gives id its session token, issued at issuedMs by the login
// that checked its credentials. With sessions off the token is random and
// opaque, as wire v1 always had it.
func (b *Broker) issueToken(id *Identity, issuedMs int64, overTLS bool) {
	a := b.authn
	if a.sessionKey == nil {
		id.Token, id.TokenExpiresMs = auth.NewLoginToken(), 0
		return
	}
	c := auth.SessionClaims{
		User: id.User, Method: sessionMethods[id.Method], TLS: overTLS, OwnPerms: id.ownPerms,
		IssuedMs: issuedMs, Cred: id.cred,
	}
	if id.ownPerms {
		c.Perms = id.Perms
	}
	c.ExpiresMs = min(b.nowMs()+a.cfg.SessionTTL.Milliseconds(), issuedMs+a.cfg.SessionMaxAge.Milliseconds())
	if !id.expires.IsZero() {
		c.CredExpiresMs = id.expires.UnixMilli()
		c.ExpiresMs = min(c.ExpiresMs, c.CredExpiresMs)
	}
	tok, err := auth.SealSession(a.sessionKey, c)
	if err != nil { // a name no account can have: no resumable token
		id.Token, id.TokenExpiresMs = auth.NewLoginToken(), 0
		return
	}
	id.Token, id.TokenExpiresMs = tok, c.ExpiresMs
}

// Resume logs a connection in with a session token (cr.Token): the
// identity the token's login proved, if its account still stands. It costs
// a MAC and a map lookup. A token that is not this cluster's counts as a
// failed login of the address, like a bad certificate; an expired or
// revoked one does not (a client that was away long is not guessing).
func (b *Broker) Resume(cr Credentials) (*Identity, error) {
	a := b.authn
	if a.sessionKey == nil {
		return nil, ErrNotEnabled
	}
	cr.Method = MethodSession
	if err := b.admitLogin(cr); err != nil {
		return nil, err
	}
	c, err := auth.OpenSession(a.sessionKey, cr.Token)
	if err == nil && methodOf(c.Method) == "" {
		err = errors.New("unknown login method")
	}
	if err != nil {
		return nil, b.otherFailed(cr, "", ErrSessionInvalid, err)
	}
	id, err := b.resumed(c, cr)
	if err == nil && a.exposed.seen(cr.Token, b.nowMs()) {
		err = ErrSessionRevoked
	}
	if errors.Is(err, ErrTLSRequired) {
		// The token crossed the network in the clear: an eavesdropper
		// could replay it over TLS, so it never resumes again.
		a.exposed.add(cr.Token, c.ExpiresMs, b.nowMs())
	}
	if err != nil {
		b.loginRefused(cr, c.User, err, nil)
		return nil, err
	}
	id.Addr = cr.Addr
	b.issueToken(id, c.IssuedMs, c.TLS || cr.TLS != nil)
	b.loginSucceeded(id, cr)
	return id, nil
}

// resumed checks a verified token's claims against the clock and the
// accounts, and rebuilds the identity it stands for.
func (b *Broker) resumed(c auth.SessionClaims, cr Credentials) (*Identity, error) {
	if c.TLS && cr.TLS == nil {
		return nil, ErrTLSRequired
	}
	if b.nowMs() >= c.ExpiresMs {
		return nil, ErrSessionExpired
	}
	id := &Identity{User: c.User, Method: methodOf(c.Method), cred: c.Cred}
	// A token is no better than the login it stands for: once the
	// operator turns that method off, its tokens stop resuming too.
	if (id.Method == MethodMTLS && !b.authn.cfg.MTLS.Enabled) || (id.Method == MethodToken && !b.authn.cfg.OIDC.Enabled) {
		return nil, ErrSessionRevoked
	}
	if c.CredExpiresMs > 0 {
		id.expires = time.UnixMilli(c.CredExpiresMs)
	}
	if c.OwnPerms {
		id.Perms, id.ownPerms = c.Perms, true
		return id, nil
	}
	p := b.authn.principal(c.User)
	if p == nil || p.fingerprint != c.Cred {
		return nil, ErrSessionRevoked
	}
	id.Perms, id.gen = p.perms, p.created
	if id.Method == MethodPassword {
		id.gen = p.cred
	}
	return id, nil
}

// loginSucceeded logs and audits a login. A resumed login session is
// logged at debug level: after a restart thousands arrive at once, and
// the audit log has each.
func (b *Broker) loginSucceeded(id *Identity, cr Credentials) {
	level := slog.LevelInfo
	if cr.Method == MethodSession {
		level = slog.LevelDebug
	}
	b.log.Log(context.Background(), level, "login", "user", id.User, "method", cr.Method, "addr", cr.Addr)
	b.authn.audit.Record(audit.Event{
		Time: b.cfg.Clock.Now(), Type: audit.AuthSuccess, Result: audit.ResultOK,
		User: id.User, Peer: cr.Addr, Method: cr.Method,
	})
}

// exposedTokens remembers TLS-issued tokens that were sent in the clear,
// until they expire. Bounded: past maxExposed the entry closest to expiry
// goes first (a flood of exposed tokens can only shorten how long the
// oldest are remembered, never grow memory).
type exposedTokens struct {
	mu sync.Mutex
	m  map[string]int64 // token -> expiry, unix ms
}

const maxExposed = 4096

func (e *exposedTokens) add(token string, expiresMs, now int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int64{}
	}
	if len(e.m) >= maxExposed {
		e.dropLocked(now)
	}
	e.m[token] = expiresMs
}

// dropLocked removes expired entries, or else the one expiring first.
func (e *exposedTokens) dropLocked(now int64) {
	first, at := "", int64(1<<62)
	for t, exp := range e.m {
		if exp <= now {
			delete(e.m, t)
			continue
		}
		if exp < at {
			first, at = t, exp
		}
	}
	if len(e.m) >= maxExposed {
		delete(e.m, first)
	}
}

func (e *exposedTokens) seen(token string, now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.m[token]
	return ok && exp > now
}
