package auth

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"sync"
)

const (
	// DefaultSessionTTLMs is how long a token stays valid: one hour.
	DefaultSessionTTLMs = 3600_000
	// DefaultMaxSessions bounds the live sessions of one node.
	DefaultMaxSessions = 100_000
	// TokenLen is the length of a token string: 32 bytes in base64url.
	TokenLen = 43
)

// ErrTooManySessions is returned by Create when its session table is full of
// live sessions.
var ErrTooManySessions = errors.New("auth: too many sessions")

// Session is what a token stands for.
type Session struct {
	User      string
	Perms     []string
	CreatedAt int64 // unix ms
	ExpiresAt int64 // unix ms; a session is invalid from this instant
}

type tokenHash [sha256.Size]byte

// Sessions is a node-local table of login sessions, safe for concurrent use.
type Sessions struct {
	ttl int64
	max int

	mu   sync.Mutex
	byID map[tokenHash]Session
	// order lists tokens by creation. Every session has the same TTL, so it
	// is also expiry order and reaping pops from the front. Entries of
	// revoked tokens linger until popped or compacted away.
	order []tokenHash
}

// NewSessions returns an empty table. Values <= 0 select the defaults.
func NewSessions(ttlMs int64, maxSessions int) *Sessions {
	return &Sessions{
		ttl:  cmp.Or(max(ttlMs, 0), DefaultSessionTTLMs),
		max:  cmp.Or(max(maxSessions, 0), DefaultMaxSessions),
		byID: make(map[tokenHash]Session),
	}
}

// Create starts a session for user and returns its token. perms is copied.
func (s *Sessions) Create(user string, perms []string, now int64) (string, error) {
	raw := make([]byte, 32)
	rand.Read(raw) // never fails (crypto/rand, Go 1.24+)
	token := base64.RawURLEncoding.EncodeToString(raw)
	h := sha256.Sum256([]byte(token))

	s.mu.Lock()
	defer s.mu.Unlock()
	s.reapLocked(now)
	if len(s.byID) >= s.max {
		return "", ErrTooManySessions
	}
	s.byID[h] = Session{User: user, Perms: slices.Clone(perms), CreatedAt: now, ExpiresAt: now + s.ttl}
	s.order = append(s.order, h)
	if len(s.order) > 2*s.max {
		s.compactLocked()
	}
	return token, nil
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
		delete(s.byID, h)
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
	_, ok := s.byID[h]
	delete(s.byID, h)
	return ok
}

// RevokeUser ends every session of user, as when the user is deleted or its
// password changes, and returns how many it ended.
func (s *Sessions) RevokeUser(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for h, sess := range s.byID {
		if sess.User == user {
			delete(s.byID, h)
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

func (s *Sessions) reapLocked(now int64) int {
	n, i := 0, 0
	for ; i < len(s.order); i++ {
		h := s.order[i]
		sess, ok := s.byID[h]
		if !ok {
			continue // revoked or looked up after expiry
		}
		if now < sess.ExpiresAt {
			break
		}
		delete(s.byID, h)
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
