package broker

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/auth"
)

// AuthConfig configures logins: the password-hash bound, the lockout and
// failure rate limits, the certificate and token methods and the audit
// log. Zero values take the defaults.
type AuthConfig struct {
	// HashConcurrency bounds the password hashes (argon2id, ~9 MiB each)
	// running at once. Default GOMAXPROCS.
	HashConcurrency int
	// HashWait is how long a login waits for a hashing slot before it is
	// refused with rate_limit_exceeded. Default 2 s.
	HashWait time.Duration
	// LoginQueue bounds the password logins waiting for a hashing slot,
	// and LoginQueuePerAddr those from one client address; a login that
	// finds either full is refused at once, rate_limit_exceeded with a
	// retry-after hint. Waiting logins are served round robin by address.
	// Defaults 1024 and 64.
	LoginQueue        int
	LoginQueuePerAddr int
	// SessionTTL is how long a session token (the token every login
	// answers) can resume a login session with session_auth; resuming
	// answers a fresh one. Default 1 h; negative turns resumption off
	// (tokens are then opaque and session_auth answers not_enabled).
	SessionTTL time.Duration
	// SessionMaxAge bounds how long a login session can be renewed by
	// resuming it, from the login that checked a password, certificate
	// or JWT. Default 24 h.
	SessionMaxAge time.Duration

	// MaxFailures failed logins of one user from one address lock that
	// pair for Lockout; the n-th lock of a pair lasts Lockout ×
	// LockoutSteps[n] (the last step repeats). Defaults 5, 5 min, and
	// 1, 3, 9, 24, 72 (up to 6 h); LockoutSteps {1} turns progression off.
	MaxFailures  int
	Lockout      time.Duration
	LockoutSteps []int64
	// FailureTTL is how long a failure counts towards a lock, and how long
	// after its last lock a pair keeps its lock level. Default 1 h.
	FailureTTL time.Duration
	// AddrFailureBurst failed logins from one address are allowed at once,
	// refilled at that many per AddrFailurePeriod; past that the address
	// gets rate_limit_exceeded. Defaults 30 per minute.
	AddrFailureBurst  int
	AddrFailurePeriod time.Duration
	// UserFailureBurst and UserFailurePeriod do the same for failed logins
	// against one user from any address. Defaults 30 per minute.
	UserFailureBurst  int
	UserFailurePeriod time.Duration
	// GuardEntries bounds each table of the lockout and rate limits (pairs,
	// addresses, users); the least recently used entry is evicted. Default
	// 100000.
	GuardEntries int

	MTLS  MTLSConfig
	OIDC  OIDCConfig
	Audit audit.Config
}

// MTLSConfig configures mtls_auth (key 12). It needs a TLS listener that
// verifies client certificates (the server's client CA): only a chain the
// TLS handshake verified is accepted.
type MTLSConfig struct {
	// Enabled turns mtls_auth on; off, it answers mtls_auth_disabled.
	Enabled bool
	// Identity picks the user name from the client certificate: "cn"
	// (the subject's common name, the default), "san:email", "san:dns" or
	// "san:uri" (the first SAN of that kind).
	Identity string
}

// OIDCConfig configures token_auth (key 13): JWTs signed with RS256,
// ES256 or EdDSA by a key of the configured JSON Web Key Set.
type OIDCConfig struct {
	// Enabled turns token_auth on; off, it answers oidc_auth_disabled.
	Enabled bool
	// Issuer and Audience must match the iss claim and be one of the aud
	// claim's values. Both are required.
	Issuer   string
	Audience string
	// JWKSFile is a JSON Web Key Set on disk, read at start. JWKSURL is
	// one fetched over HTTP(S); at least one of the two is required.
	JWKSFile string
	JWKSURL  string
	// JWKSTimeout bounds one fetch of JWKSURL. Default 5 s.
	JWKSTimeout time.Duration
	// JWKSMinInterval is the least time between two fetches, so tokens
	// with unknown key ids cannot make the node hammer the issuer. Default
	// 1 min.
	JWKSMinInterval time.Duration
	// JWKSMaxAge refetches keys older than this at the next login (old
	// keys are kept if the fetch fails). Default 1 h.
	JWKSMaxAge time.Duration
	// JWKSMaxBytes bounds a fetched key set. Default 1 MiB.
	JWKSMaxBytes int64
	// UserClaim names the claim holding the user name. Default "sub".
	UserClaim string
	// PermsClaim, if set, names a claim holding the permissions (a list,
	// or a space-separated string, of admin/produce/consume): the token is
	// then the authority and the user need not exist here. Unset, the user
	// must exist and its permissions and grants come from its account.
	PermsClaim string
	// Leeway absorbs clock skew in exp, nbf and iat. Default 30 s.
	Leeway time.Duration
}

func (c AuthConfig) withDefaults() AuthConfig {
	if c.HashConcurrency <= 0 {
		c.HashConcurrency = runtime.GOMAXPROCS(0)
	}
	if c.HashWait <= 0 {
		c.HashWait = 2 * time.Second
	}
	if c.LoginQueue <= 0 {
		c.LoginQueue = 1024
	}
	if c.LoginQueuePerAddr <= 0 {
		c.LoginQueuePerAddr = min(64, c.LoginQueue)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = time.Hour
	}
	if c.SessionMaxAge <= 0 {
		c.SessionMaxAge = 24 * time.Hour
	}
	g := c.guardConfig().WithDefaults()
	c.MaxFailures, c.LockoutSteps = g.MaxFailures, g.LockoutSteps
	c.Lockout = time.Duration(g.LockoutMs) * time.Millisecond
	c.FailureTTL = time.Duration(g.FailureTTLMs) * time.Millisecond
	c.AddrFailureBurst = g.AddrFailures.Burst
	c.AddrFailurePeriod = time.Duration(g.AddrFailures.PeriodMs) * time.Millisecond
	c.UserFailureBurst = g.UserFailures.Burst
	c.UserFailurePeriod = time.Duration(g.UserFailures.PeriodMs) * time.Millisecond
	c.GuardEntries = g.MaxEntries
	if c.MTLS.Identity == "" {
		c.MTLS.Identity = auth.CertRuleCN
	}
	c.OIDC = c.OIDC.withDefaults()
	return c
}

func (c OIDCConfig) withDefaults() OIDCConfig {
	if c.JWKSTimeout <= 0 {
		c.JWKSTimeout = 5 * time.Second
	}
	if c.JWKSMinInterval <= 0 {
		c.JWKSMinInterval = time.Minute
	}
	if c.JWKSMaxAge <= 0 {
		c.JWKSMaxAge = time.Hour
	}
	if c.JWKSMaxBytes <= 0 {
		c.JWKSMaxBytes = 1 << 20
	}
	if c.UserClaim == "" {
		c.UserClaim = auth.DefaultUserClaim
	}
	if c.Leeway <= 0 {
		c.Leeway = auth.DefaultTokenLeeway
	}
	return c
}

// guardConfig converts the lockout and rate-limit fields for the pure
// guard, which counts time in milliseconds.
func (c AuthConfig) guardConfig() auth.GuardConfig {
	return auth.GuardConfig{
		MaxFailures:  c.MaxFailures,
		LockoutMs:    c.Lockout.Milliseconds(),
		LockoutSteps: c.LockoutSteps,
		FailureTTLMs: c.FailureTTL.Milliseconds(),
		AddrFailures: auth.Rate{Burst: c.AddrFailureBurst, PeriodMs: c.AddrFailurePeriod.Milliseconds()},
		UserFailures: auth.Rate{Burst: c.UserFailureBurst, PeriodMs: c.UserFailurePeriod.Milliseconds()},
		MaxEntries:   c.GuardEntries,
	}
}

// validate refuses settings that cannot work, so a node does not start
// with an authentication method that would refuse everyone.
func (c AuthConfig) validate() error {
	for _, s := range c.LockoutSteps {
		if s < 1 {
			return fmt.Errorf("broker: LockoutSteps %v: every step must be at least 1", c.LockoutSteps)
		}
	}
	if c.MTLS.Enabled && !auth.ValidCertRule(c.MTLS.Identity) {
		return fmt.Errorf("broker: mTLS identity %q is not cn, san:email, san:dns or san:uri", c.MTLS.Identity)
	}
	if o := c.OIDC; o.Enabled {
		switch {
		case o.Issuer == "" || o.Audience == "":
			return errors.New("broker: token auth needs an issuer and an audience")
		case o.JWKSFile == "" && o.JWKSURL == "":
			return errors.New("broker: token auth needs a JWKS file or URL")
		}
	}
	return nil
}
