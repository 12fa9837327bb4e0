package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/auth"
	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/metadata"
)

// Login refusals; their text is the wire reason.
var (
	ErrAccountLocked     = errors.New("account_locked")
	ErrRateLimited       = errors.New("rate_limit_exceeded")
	ErrMTLSDisabled      = errors.New("mtls_auth_disabled")
	ErrMTLSUnavailable   = errors.New("mtls_auth_unavailable")
	ErrNoPeerCertificate = errors.New("no_peer_certificate")
	ErrOIDCDisabled      = errors.New("oidc_auth_disabled")
	ErrOIDCMisconfigured = errors.New("oidc_misconfigured")
)

// Authentication methods.
const (
	MethodPassword = "password"
	MethodMTLS     = "mtls"
	MethodToken    = "token"
)

// Identity is who a connection authenticated as. It is immutable: a
// re-authentication makes a new one. Every check resolves what it may do
// from the current principals, so a revoked grant or a deleted user takes
// effect on connections already open.
type Identity struct {
	User string
	// Perms are the permissions at login: the account's, or a token's
	// permissions claim. An account's permissions are fixed from its
	// creation to its deletion, and a deleted user's identity is refused,
	// so they hold while the identity does; checks still resolve them.
	Perms  []string
	Method string
	Addr   string // the client's address
	// Token is a session token answered to the client, and
	// TokenExpiresMs when it expires (Unix ms; 0 for an opaque token
	// that cannot be resumed).
	Token          string
	TokenExpiresMs int64

	gen      uint64    // the principal generation it was issued against
	ownPerms bool      // the token, not the account, holds the permissions
	expires  time.Time // the certificate's or token's expiry; zero: none
	cred     [8]byte   // the account's credential fingerprint at login
}

// IsAdmin reports whether id held the admin permission at login.
func IsAdmin(id Identity) bool { return auth.HasPerm(id.Perms, auth.PermAdmin) }

// Credentials is one login attempt.
type Credentials struct {
	Method         string
	User, Password string               // MethodPassword
	Token          string               // MethodToken: a compact JWT; Resume: a session token
	TLS            *tls.ConnectionState // the connection's; nil on plain TCP
	// ListenerVerifies says the TLS listener verifies the client
	// certificates it is given against its CAs.
	ListenerVerifies bool
	Addr             string // the client's IP: the key of the limits
}

// Login checks credentials and returns the identity they prove. Every
// refusal is counted by the login throttle (certificate and token
// failures against the address only), logged and audited.
func (b *Broker) Login(ctx context.Context, cr Credentials) (*Identity, error) {
	var (
		id  *Identity
		err error
	)
	switch cr.Method {
	case MethodPassword:
		id, err = b.loginPassword(ctx, cr)
	case MethodMTLS:
		id, err = b.loginCert(cr)
	case MethodToken:
		id, err = b.loginToken(ctx, cr)
	default:
		err = ErrNotEnabled
	}
	if err != nil {
		return nil, err
	}
	id.Method, id.Addr = cr.Method, cr.Addr
	b.issueToken(id, b.nowMs(), cr.TLS != nil)
	b.loginSucceeded(id, cr)
	return id, nil
}

func (b *Broker) loginPassword(ctx context.Context, cr Credentials) (*Identity, error) {
	a := b.authn
	if cr.User == "" || len(cr.User) > metadata.MaxNameLen {
		// No account can have such a name: refuse without a hash, and
		// keep it away from any user's bucket (an empty name must not
		// share one with certificate and token logins).
		if err := b.admitLogin(cr); err != nil {
			return nil, err
		}
		return nil, b.otherFailed(cr, "", ErrCredentials, errors.New("no user name, or one too long"))
	}
	if err := b.beginLogin(ctx, cr); err != nil {
		return nil, err
	}
	p := a.principal(cr.User)
	ok, err := b.verifyPassword(ctx, cr.Addr, p, cr.Password)
	a.guardMu.Lock()
	var lockedFor int64
	if err != nil {
		// No hash ran (queue full, wait over, client gone): not a failure.
		a.guard.Abandon(cr.User, cr.Addr, b.nowMs())
	} else {
		lockedFor = a.guard.Finish(cr.User, cr.Addr, ok, b.nowMs())
	}
	close(a.settled)
	a.settled = make(chan struct{})
	a.guardMu.Unlock()
	if err != nil {
		b.loginRefused(cr, cr.User, err, nil)
		return nil, err
	}
	if !ok {
		b.loginRefused(cr, cr.User, ErrCredentials, nil)
		if lockedFor > 0 {
			b.lockedOut(cr, time.Duration(lockedFor)*time.Millisecond)
		}
		return nil, ErrCredentials
	}
	return &Identity{User: cr.User, Perms: p.perms, gen: p.cred, cred: p.fingerprint}, nil
}

// beginLogin asks the throttle to admit a password login: the attempt is
// charged before the hash runs and settled after (see auth.Guard.Begin).
// While attempts already running decide the outcome (Busy), it waits for
// them, up to HashWait, as a login waits for a hashing slot.
func (b *Broker) beginLogin(ctx context.Context, cr Credentials) error {
	a := b.authn
	var timeout <-chan time.Time
	for {
		a.guardMu.Lock()
		v, wait := a.guard.Begin(cr.User, cr.Addr, b.nowMs())
		settled := a.settled
		a.guardMu.Unlock()
		if v != auth.Busy {
			return b.throttled(cr, cr.User, v, wait)
		}
		if timeout == nil {
			t := b.cfg.Clock.NewTimer(a.cfg.HashWait)
			defer t.Stop()
			timeout = t.C()
		}
		select {
		case <-settled:
		case <-timeout:
			return b.busy(cr)
		case <-ctx.Done():
			return b.busy(cr)
		}
	}
}

// busy refuses a login that waited HashWait for the attempts of its
// (user, address) pair already running: capacity, not guessing, so it
// carries the login queue's hint.
func (b *Broker) busy(cr Credentials) error {
	err := b.throttled(cr, cr.User, auth.RateLimited, 0)
	return &RetryAfterError{Err: err, After: RetryAfter(b.authn.logins.refuse())}
}

// admitLogin asks the throttle whether a certificate or token login from
// cr.Addr may be tried now: only the address's failures count.
func (b *Broker) admitLogin(cr Credentials) error {
	a := b.authn
	a.guardMu.Lock()
	v, wait := a.guard.CheckAddr(cr.Addr, b.nowMs())
	a.guardMu.Unlock()
	return b.throttled(cr, "", v, wait)
}

// throttled turns the throttle's verdict into the refusal, logged and
// audited.
func (b *Broker) throttled(cr Credentials, user string, v auth.Verdict, wait int64) error {
	var err error
	switch v {
	case auth.Allow:
		return nil
	case auth.Locked:
		err = ErrAccountLocked
	default:
		err = ErrRateLimited
	}
	// A throttled refusal costs the node nothing, so it is reported once
	// per address and window, with a count, not once each. How long
	// remains goes to the server log only: telling the client would tell
	// an attacker when to come back.
	a := b.authn
	a.guardMu.Lock()
	report, suppressed := a.guard.Report(cr.Addr, b.nowMs())
	a.guardMu.Unlock()
	if report {
		b.loginRefused(cr, user, err, []any{"retry_in", time.Duration(wait) * time.Millisecond, "similar_refusals_not_reported", suppressed})
	}
	return err
}

// verifyPassword runs the password hash in one of the hashing slots,
// queued fairly by address (auth_queue.go). An unknown user gets a hash
// of the same cost, so timing does not tell which names exist.
func (b *Broker) verifyPassword(ctx context.Context, addr string, p *principal, password string) (bool, error) {
	a := b.authn
	if err := b.acquireHashSlot(ctx, addr); err != nil {
		return false, err
	}
	start := time.Now()
	defer func() {
		a.hashing.Add(-1)
		a.logins.release(time.Since(start))
	}()
	if p == nil {
		auth.DummyVerify(password)
		return false, nil
	}
	ok, err := auth.VerifyPassword(p.hash, password)
	return ok && err == nil, nil
}

// acquireHashSlot waits up to HashWait for a slot: argon2id costs memory
// and a CPU per hash, so a burst of logins queues here instead of taking
// the node's memory and cores.
func (b *Broker) acquireHashSlot(ctx context.Context, addr string) error {
	a := b.authn
	var t clock.Timer
	timeout := func() <-chan time.Time {
		t = b.cfg.Clock.NewTimer(a.cfg.HashWait)
		return t.C()
	}
	err := a.logins.acquire(ctx, addr, timeout)
	if t != nil {
		t.Stop()
	}
	if err != nil {
		return err
	}
	n := a.hashing.Add(1)
	for peak := a.hashPeak.Load(); n > peak && !a.hashPeak.CompareAndSwap(peak, n); peak = a.hashPeak.Load() {
	}
	return nil
}

// loginCert maps a verified client certificate to a user.
func (b *Broker) loginCert(cr Credentials) (*Identity, error) {
	a := b.authn
	switch {
	case !a.cfg.MTLS.Enabled:
		return nil, ErrMTLSDisabled
	case cr.TLS == nil || !cr.ListenerVerifies:
		// Plaintext, or a listener that does not verify certificates.
		return nil, ErrMTLSUnavailable
	}
	if err := b.admitLogin(cr); err != nil {
		return nil, err
	}
	leaf, err := auth.VerifiedLeaf(cr.TLS, nil, b.cfg.Clock.Now())
	if errors.Is(err, auth.ErrNoCertificate) {
		return nil, b.otherFailed(cr, "", ErrNoPeerCertificate, err)
	}
	if err != nil {
		return nil, b.otherFailed(cr, "", ErrCredentials, err)
	}
	user, err := auth.CertUser(leaf, a.cfg.MTLS.Identity)
	if err != nil {
		return nil, b.otherFailed(cr, "", ErrCredentials, err)
	}
	p := a.principal(user)
	if p == nil {
		return nil, b.otherFailed(cr, user, ErrCredentials, errors.New("no such user"))
	}
	return &Identity{User: user, Perms: p.perms, gen: p.created, cred: p.fingerprint, expires: leaf.NotAfter}, nil
}

// loginToken verifies a JWT against the issuer's keys.
func (b *Broker) loginToken(ctx context.Context, cr Credentials) (*Identity, error) {
	a := b.authn
	if a.jwks == nil {
		return nil, ErrOIDCDisabled
	}
	if err := b.admitLogin(cr); err != nil {
		return nil, err
	}
	now := b.cfg.Clock.Now()
	keys := a.jwks.keys(ctx, now)
	if keys.Len() == 0 {
		b.log.Error("token auth: no keys to verify with (the JWKS URL could not be fetched)")
		return nil, b.otherFailed(cr, "", ErrOIDCMisconfigured, errors.New("no keys"))
	}
	o := a.cfg.OIDC
	tc := auth.TokenConfig{Issuer: o.Issuer, Audience: o.Audience, UserClaim: o.UserClaim, PermsClaim: o.PermsClaim, Leeway: o.Leeway}
	claims, err := auth.VerifyToken(cr.Token, tc, keys, now)
	if errors.Is(err, auth.ErrUnknownKey) {
		if fresh, changed := a.jwks.refresh(ctx, now); changed {
			claims, err = auth.VerifyToken(cr.Token, tc, fresh, now)
		}
	}
	if err != nil {
		return nil, b.otherFailed(cr, "", ErrCredentials, err)
	}
	// The login accepted exp with Leeway of clock skew; so does every
	// request after it, or the connection would be refused at once.
	id := &Identity{User: claims.User, expires: claims.ExpiresAt.Add(o.Leeway)}
	if o.PermsClaim != "" {
		id.Perms, id.ownPerms = claims.Perms, true
		return id, nil
	}
	p := a.principal(claims.User)
	if p == nil {
		return nil, b.otherFailed(cr, claims.User, ErrCredentials, errors.New("no such user"))
	}
	id.Perms, id.gen, id.cred = p.perms, p.created, p.fingerprint
	return id, nil
}

// otherFailed records a failed certificate or token login: it counts
// against the address (never towards an account lockout, since no secret
// of the account was guessed) and returns refusal.
func (b *Broker) otherFailed(cr Credentials, user string, refusal, cause error) error {
	a := b.authn
	a.guardMu.Lock()
	a.guard.FailAddr(cr.Addr, b.nowMs())
	a.guardMu.Unlock()
	b.loginRefused(cr, user, refusal, []any{"cause", cause.Error()})
	return refusal
}

// loginRefused logs and audits a refused login. Never the password or
// the token.
func (b *Broker) loginRefused(cr Credentials, user string, refusal error, extra []any) {
	user = clip(user)
	args := append([]any{"user", user, "method", cr.Method, "addr", cr.Addr, "reason", refusal.Error()}, extra...)
	b.log.Warn("login refused", args...)
	b.authn.audit.Record(audit.Event{
		Time: b.cfg.Clock.Now(), Type: audit.AuthFailure, Result: audit.ResultRefused,
		User: user, Peer: cr.Addr, Method: cr.Method, Reason: refusal.Error(),
	})
}

func (b *Broker) lockedOut(cr Credentials, d time.Duration) {
	b.stats.lockouts.Add(1)
	b.log.Warn("login locked", "user", clip(cr.User), "addr", cr.Addr, "for", d)
	b.authn.audit.Record(audit.Event{
		Time: b.cfg.Clock.Now(), Type: audit.AuthLockout, Result: audit.ResultRefused,
		User: clip(cr.User), Peer: cr.Addr, Method: cr.Method, Reason: ErrAccountLocked.Error(),
		Detail: map[string]string{"duration": d.String()},
	})
}

// clip bounds a name a client sent before it reaches the logs and the
// audit trail: nothing longer than a valid name can be an account, and a
// long one would only let a client bloat both.
func clip(name string) string {
	if len(name) <= metadata.MaxNameLen {
		return name
	}
	return name[:metadata.MaxNameLen] + "…"
}
