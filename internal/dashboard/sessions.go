package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// session is one browser's login. It keeps the node's session token,
// never the password: every call the page makes is a call of the node's
// client protocol under that token, so the node's own permissions and
// ACLs decide what the user sees and may do.
type session struct {
	id    string // the cookie's value
	csrf  string // the token every POST of this session must carry
	user  string
	admin bool // the node answered cluster_status: admin forms are shown

	created, lastSeen time.Time

	// Guarded by the store's mutex.
	token    string         // the newest session token the node answered
	cl       *client.Client // an open connection to the node, or nil
	dialedAt time.Time
	usedAt   time.Time
	busy     int // requests using cl now
	streams  int // open event streams
}

// store is the bounded table of sessions: a session ends after an idle
// period or an absolute lifetime. One user holds at most perUser
// sessions, a new login ending that user's least recently used one; a
// full table does the same, and refuses a user who has none there
// (errFull) rather than end another user's session. It also bounds the
// node connections the sessions hold (one each at most), dials under way
// included, closing the least recently used one to open another.
type store struct {
	mu       sync.Mutex
	byID     map[string]*session
	byUser   map[string]int
	max      int
	perUser  int
	idle     time.Duration
	maxAge   time.Duration
	maxConns int
	conns    int // open node connections and dials under way
	now      func() time.Time
}

func newStore(max, perUser, maxConns int, idle, maxAge time.Duration, now func() time.Time) *store {
	return &store{byID: map[string]*session{}, byUser: map[string]int{}, max: max, perUser: perUser, maxConns: maxConns, idle: idle, maxAge: maxAge, now: now}
}

// errFull: the session table is full of other users' sessions.
var errFull = errors.New("dashboard: too many sessions are open; try again later")

// randomID is 32 random bytes, URL-safe.
func randomID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("dashboard: no randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// add makes a session for user holding token. Past the user's bound, or
// in a full table, the user's least recently used session ends; a full
// table without one of the user's is refused (errFull).
func (s *store) add(user, token string, admin bool) (*session, error) {
	now := s.now()
	ss := &session{id: randomID(), csrf: randomID(), user: user, admin: admin, token: token, created: now, lastSeen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	for s.byUser[user] >= s.perUser || len(s.byID) >= s.max {
		lru := s.userLRULocked(user)
		if lru == nil {
			return nil, errFull
		}
		s.removeLocked(lru)
	}
	s.byID[ss.id] = ss
	s.byUser[user]++
	return ss, nil
}

func (s *store) userLRULocked(user string) *session {
	var lru *session
	for _, o := range s.byID {
		if o.user == user && (lru == nil || o.lastSeen.Before(lru.lastSeen)) {
			lru = o
		}
	}
	return lru
}

// get returns the live session of id and marks it used, or nil.
func (s *store) get(id string) *session { return s.lookup(id, true) }

// peek returns the live session of id without marking it used: an open
// live chart, whose stream reconnects by itself, does not keep an idle
// session alive.
func (s *store) peek(id string) *session { return s.lookup(id, false) }

func (s *store) lookup(id string, use bool) *session {
	if id == "" {
		return nil
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byID[id]
	if ss == nil {
		return nil
	}
	if s.expiredLocked(ss, now) {
		s.removeLocked(ss)
		return nil
	}
	if use {
		ss.lastSeen = now
	}
	return ss
}

func (s *store) expiredLocked(ss *session, now time.Time) bool {
	return now.Sub(ss.lastSeen) >= s.idle || now.Sub(ss.created) >= s.maxAge
}

// sweepLocked drops expired sessions; it runs on every login, so the
// table never holds more expired sessions than logins since the last one.
func (s *store) sweepLocked(now time.Time) {
	for _, ss := range s.byID {
		if s.expiredLocked(ss, now) {
			s.removeLocked(ss)
		}
	}
}

func (s *store) remove(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(ss)
}

func (s *store) removeLocked(ss *session) {
	if s.byID[ss.id] != ss {
		return
	}
	delete(s.byID, ss.id)
	if s.byUser[ss.user]--; s.byUser[ss.user] <= 0 {
		delete(s.byUser, ss.user)
	}
	s.closeConnLocked(ss)
}

// closeConnLocked closes ss's node connection, keeping its newest token.
func (s *store) closeConnLocked(ss *session) {
	if ss.cl == nil {
		return
	}
	if tok, _ := ss.cl.SessionToken(); tok != "" {
		ss.token = tok
	}
	// A Client without subscriptions closes its sockets and returns.
	ss.cl.Close()
	ss.cl = nil
	s.conns--
}

// len is the number of sessions in the table, expired ones included.
func (s *store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// checkCSRF compares a form's token with the session's in constant time.
func (ss *session) checkCSRF(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(ss.csrf)) == 1
}
