package broker

import (
	"sync"
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/audit"
	"github.com/malachi-log/malachi/internal/auth"
	"github.com/malachi-log/malachi/internal/metadata"
)

// authState is the broker's authentication machinery: the principals
// snapshot requests check against, the login throttle, the hashing slots,
// the token keys and the audit log.
type authState struct {
	cfg   AuthConfig
	audit *audit.Log
	// exposed: TLS-issued session tokens seen in the clear (auth_session.go).
	exposed exposedTokens

	// principals is an immutable snapshot of every user's credentials
	// generation, permissions and grants. Requests read it with one atomic
	// load, so checking a connection's identity on every request takes no
	// lock; user and ACL changes publish a new snapshot (rebuildMu orders
	// the rebuilds).
	principals atomic.Pointer[principals]
	rebuildMu  sync.Mutex

	guardMu sync.Mutex
	guard   *auth.Guard // the pure lockout and rate-limit state machine
	// settled is closed (and replaced) under guardMu whenever a password
	// attempt finishes, waking logins the guard asked to wait (Busy).
	settled chan struct{}

	logins   *loginQueue  // the hashing slots and the fair queue for them
	hashing  atomic.Int32 // hashes running now
	hashPeak atomic.Int32 // most hashes ever seen running at once

	sessionKey []byte // MACs session tokens; nil when sessions are off

	jwks *jwksCache // nil unless token_auth is enabled
}

// principal is one user as authentication sees it.
type principal struct {
	hash string
	// created is the generation at which the user appeared: an identity
	// issued before a delete (and re-create) of its user is stale. cred is
	// the generation of the current password: a password identity issued
	// before a password change is stale.
	created, cred uint64
	// serial is the metadata's User.Serial: a user deleted and created
	// again between two refreshes (changes this node saw only together)
	// has another serial, and so counts as a new user.
	serial      uint64
	fingerprint [8]byte // of the stored hash: what resumption tokens are bound to
	perms       []string
	grants      []auth.Grant
}

type principals struct {
	gen   uint64 // the last generation handed out
	users map[string]*principal
}

func (b *Broker) newAuthState() (*authState, error) {
	cfg := b.cfg.Auth
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &authState{
		cfg:     cfg,
		guard:   auth.NewGuard(cfg.guardConfig()),
		logins:  newLoginQueue(cfg.HashConcurrency, cfg.LoginQueue, cfg.LoginQueuePerAddr),
		settled: make(chan struct{}),
	}
	if cfg.SessionTTL > 0 {
		a.sessionKey = auth.SessionKey(b.secret)
	}
	if cfg.OIDC.Enabled {
		j, err := newJWKSCache(cfg.OIDC, b.log)
		if err != nil {
			return nil, err
		}
		a.jwks = j
	}
	ac := cfg.Audit
	if ac.FS == nil {
		ac.FS = b.cfg.FS
	}
	ac.Node, ac.Logger = b.cfg.NodeID, b.log
	log, err := audit.Open(ac)
	if err != nil {
		return nil, err
	}
	a.audit = log
	return a, nil
}

// initAuth sets up authentication once the metadata is open. Open calls
// it; it publishes the first principals snapshot.
func (b *Broker) initAuth() error {
	a, err := b.newAuthState()
	if err != nil {
		return err
	}
	b.authn = a
	b.refreshPrincipals()
	return nil
}

// closeAuth stops the audit writer after writing what it holds.
func (b *Broker) closeAuth() error {
	if b.authn == nil {
		return nil
	}
	return b.authn.audit.Close()
}

// refreshPrincipals publishes a snapshot of the users and grants in the
// metadata. Generations are derived by comparing with the previous
// snapshot, so any change of the metadata, whoever applied it, revokes
// what it should once this runs: a user that vanished has no principal, a
// new user (or one deleted and created again) gets a new created
// generation, and a changed password hash a new cred generation.
func (b *Broker) refreshPrincipals() {
	a := b.authn
	a.rebuildMu.Lock()
	defer a.rebuildMu.Unlock()
	prev := a.principals.Load()
	next := &principals{users: make(map[string]*principal)}
	var old map[string]*principal
	if prev != nil {
		next.gen, old = prev.gen, prev.users
	}
	_ = b.plane.ViewRoot(func(st *metadata.State) {
		for _, u := range st.Users() {
			p := &principal{hash: u.PasswordHash, perms: u.Perms, fingerprint: auth.CredFingerprint(u.PasswordHash)}
			for _, g := range st.ACLs(u.Name) {
				p.grants = append(p.grants, auth.Grant{Operation: g.Operation, Pattern: g.Pattern})
			}
			p.serial = u.Serial
			if o, ok := old[u.Name]; ok && o.serial == u.Serial {
				p.created, p.cred = o.created, o.cred
			} else {
				next.gen++
				p.created, p.cred = next.gen, next.gen
			}
			if o, ok := old[u.Name]; ok && o.serial == u.Serial && o.hash != u.PasswordHash {
				next.gen++
				p.cred = next.gen
			}
			next.users[u.Name] = p
		}
	})
	a.principals.Store(next)
}

func (a *authState) principal(user string) *principal {
	return a.principals.Load().users[user]
}

// AuthStats are gauges of the login machinery, for metrics and tests.
type AuthStats struct {
	HashesRunning int    // password hashes running now
	HashesPeak    int    // the most that ever ran at once
	LoginsQueued  int    // password logins waiting for a hashing slot now
	QueuedPeak    int    // the most that ever waited at once
	LoginsRefused uint64 // logins refused with a retry-after hint (queue full, or waited HashWait)
	AuditDropped  uint64 // audit events lost to a full queue or a failed write
}

// AuthStats returns the login gauges.
func (b *Broker) AuthStats() AuthStats {
	return AuthStats{
		HashesRunning: int(b.authn.hashing.Load()),
		HashesPeak:    int(b.authn.hashPeak.Load()),
		LoginsQueued:  b.authn.logins.queued(),
		QueuedPeak:    int(b.authn.logins.peak.Load()),
		LoginsRefused: b.authn.logins.refused.Load(),
		AuditDropped:  b.authn.audit.Dropped(),
	}
}
