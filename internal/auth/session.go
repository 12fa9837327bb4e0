package auth

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"sync"
)

const (
	// DefaultSessionTTLMs is how long a token stays valid: one hour.
	DefaultSessionTTLMs = 3600_000
	// DefaultMaxSessions bounds the live sessions of one node.
	DefaultMaxSessions = 100_000
	// DefaultMaxSessionsPerUser bounds the live sessions of one user.
	DefaultMaxSessionsPerUser = 1000
	// TokenLen is the length of a token string: 32 bytes in base64url.
	TokenLen = 43
)

// Session is what a token stands for.
type Session struct {
	User      string
	Perms     []string
	CreatedAt int64 // unix ms
	ExpiresAt int64 // unix ms; a session is invalid from this instant
}

type tokenHash [sha256.Size]byte

// Sessions is a node-local table of login sessions, safe for concurrent use.
//
// The table is bounded twice: per user and overall. A new session past
// either bound ends the oldest session of that user (or of the node)
// instead of being refused, so a login never fails because the table is
// full, and one user logging in in a loop can only end its own sessions.
type Sessions struct {
	ttl     int64
	max     int
	perUser int

	mu     sync.Mutex
	byID   map[tokenHash]Session
	byUser map[string]int // live sessions per user
	// order lists tokens by creation. Every session has the same TTL, so it
	// is also expiry order and reaping pops from the front. Entries of
	// revoked tokens linger until popped or compacted away.
	order []tokenHash
}

// NewSessions returns an empty table. Values <= 0 select the defaults.
func NewSessions(ttlMs int64, maxSessions int) *Sessions {
	return &Sessions{
		ttl:     cmp.Or(max(ttlMs, 0), DefaultSessionTTLMs),
		max:     cmp.Or(max(maxSessions, 0), DefaultMaxSessions),
		perUser: DefaultMaxSessionsPerUser,
		byID:    make(map[tokenHash]Session),
		byUser:  make(map[string]int),
	}
}

// LimitPerUser sets the bound on one user's live sessions; n <= 0 selects
// the default.
func (s *Sessions) LimitPerUser(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perUser = cmp.Or(max(n, 0), DefaultMaxSessionsPerUser)
}

// Create starts a session for user and returns its token. perms is copied.
func (s *Sessions) Create(user string, perms []string, now int64) string {
	raw := make([]byte, 32)
	rand.Read(raw) // never fails (crypto/rand, Go 1.24+)
	token := base64.RawURLEncoding.EncodeToString(raw)
	h := sha256.Sum256([]byte(token))

	s.mu.Lock()
	defer s.mu.Unlock()
	s.reapLocked(now)
	if s.byUser[user] >= s.perUser {
		s.evictLocked(func(sess Session) bool { return sess.User == user })
	}
	if len(s.byID) >= s.max {
		s.evictLocked(func(Session) bool { return true })
	}
	s.byID[h] = Session{User: user, Perms: slices.Clone(perms), CreatedAt: now, ExpiresAt: now + s.ttl}
	s.byUser[user]++
	s.order = append(s.order, h)
	if len(s.order) > 2*s.max {
		s.compactLocked()
	}
	return token
}

// evictLocked ends the oldest session that match accepts. It scans, which
// is fine: it runs only at a bound, on a login that has just paid for a
// password hash.
func (s *Sessions) evictLocked(match func(Session) bool) {
	for _, h := range s.order {
		if sess, ok := s.byID[h]; ok && match(sess) {
			s.deleteLocked(h, sess)
			return
		}
	}
}

// Lookup returns token's session if it exists and has not expired at
// now. An expired session is removed.
func (s *Sessions) Lookup(token string, now int64) (Session, bool) {
	if len(token) != TokenLen {
		return Session{}, false
	}
	h := sha256.Sum256([]byte(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[h]
	if !ok {
		return Session{}, false
	}
	if now >= sess.ExpiresAt {
		s.deleteLocked(h, sess)
		return Session{}, false
	}
	sess.Perms = slices.Clone(sess.Perms)
	return sess, true
}

// Revoke ends token's session and reports whether it existed.
func (s *Sessions) Revoke(token string) bool {
	h := sha256.Sum256([]byte(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[h]
	if ok {
		s.deleteLocked(h, sess)
	}
	return ok
}

// RevokeUser ends every session of user, as when the user is deleted or its
// password changes, and returns how many it ended.
func (s *Sessions) RevokeUser(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUser[user] == 0 {
		return 0
	}
	n := 0
	for h, sess := range s.byID {
		if sess.User == user {
			s.deleteLocked(h, sess)
			n++
		}
	}
	return n
}

// Reap removes the sessions expired at now and returns how many.
func (s *Sessions) Reap(now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reapLocked(now)
}

// Len returns the number of sessions held, expired or not yet reaped.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func (s *Sessions) deleteLocked(h tokenHash, sess Session) {
	delete(s.byID, h)
	if s.byUser[sess.User]--; s.byUser[sess.User] <= 0 {
		delete(s.byUser, sess.User)
	}
}

func (s *Sessions) reapLocked(now int64) int {
	n, i := 0, 0
	for ; i < len(s.order); i++ {
		h := s.order[i]
		sess, ok := s.byID[h]
		if !ok {
			continue // revoked, evicted or looked up after expiry
		}
		if now < sess.ExpiresAt {
			break
		}
		s.deleteLocked(h, sess)
		n++
	}
	s.order = s.order[i:]
	return n
}

// compactLocked drops the order entries of sessions no longer held.
func (s *Sessions) compactLocked() {
	s.order = slices.DeleteFunc(slices.Clone(s.order), func(h tokenHash) bool {
		_, ok := s.byID[h]
		return !ok
	})
}
