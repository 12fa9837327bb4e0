package dashboard

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// errSessionGone: the session ended (expired, evicted or logged out)
// while one of its requests dialled the node.
var errSessionGone = errors.New("dashboard: session ended")

// nodeDialer opens connections to the node the dashboard belongs to.
type nodeDialer struct {
	addr    string
	tls     *tls.Config
	timeout time.Duration
}

func (n nodeDialer) opts(auth client.Option) []client.Option {
	o := []client.Option{auth, client.WithDialTimeout(n.timeout), client.WithRequestTimeout(n.timeout)}
	if n.tls != nil {
		o = append(o, client.WithTLS(n.tls))
	}
	return o
}

// login checks user's password by logging in to the node, and returns
// the session token it answered and whether the user is an administrator
// (the node answers cluster_status to administrators alone; any other
// failure of that call draws the page without the admin forms, and the
// node decides anyway). The connection, and with it the password, is
// dropped at once; one dial with the token checks that the node resumes
// sessions, which the dashboard needs for every later call.
func (n nodeDialer) login(ctx context.Context, user, password string) (token string, admin bool, err error) {
	cl, err := client.Dial(ctx, n.addr, n.opts(client.WithCredentials(user, password))...)
	if err != nil {
		return "", false, err
	}
	_, err = cl.ClusterStatus(ctx)
	admin = err == nil
	token, _ = cl.SessionToken()
	cl.Close()
	if token == "" {
		return "", false, ErrNoResume
	}
	resumed, err := client.Dial(ctx, n.addr, n.opts(client.WithSessionToken(token))...)
	if errors.Is(err, client.ErrNotEnabled) {
		return "", false, ErrNoResume
	}
	if err != nil {
		return "", false, err
	}
	defer resumed.Close()
	if fresh, _ := resumed.SessionToken(); fresh != "" {
		token = fresh
	}
	return token, admin, nil
}

// recycleAfter is how long a session keeps one node connection: each new
// connection is answered a fresh token, so a session active for longer
// than the node's token lifetime still holds a token that resumes.
const recycleAfter = 5 * time.Minute

// errBusy: every node connection the dashboard may hold is in use.
var errBusy = errors.New("dashboard: every connection to the node is in use; try again shortly")

// client returns ss's connection to the node, dialling it with the
// session's token when it has none or its connection is old, and a
// release the caller must call when done with it. At most maxConns
// connections are open or being dialled: a dial takes its place in the
// bound first, the least recently used idle connection giving its up,
// and when none is idle the call is refused (errBusy) rather than the
// bound passed. A dial first renews the token with the browser's address
// (addr) when Config.Login is a Refresher.
func (d *Dashboard) client(ctx context.Context, ss *session, addr string) (*client.Client, func(), error) {
	s := d.sessions
	s.mu.Lock()
	now := s.now()
	if ss.cl != nil && (ss.busy > 0 || now.Sub(ss.dialedAt) < recycleAfter) {
		cl := s.useLocked(ss, now)
		s.mu.Unlock()
		return cl, d.releaser(ss), nil
	}
	s.closeConnLocked(ss)
	token := ss.token
	if !s.reserveLocked() {
		s.mu.Unlock()
		return nil, nil, errBusy
	}
	s.mu.Unlock()

	cl, err := d.dial(ctx, token, addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.conns--
		if refusedSession(err) {
			s.removeLocked(ss)
		}
		return nil, nil, err
	}
	if s.byID[ss.id] != ss || ss.cl != nil {
		// The session ended, or another of its requests dialled
		// meanwhile: this connection gives its place back.
		cl.Close()
		s.conns--
		if ss.cl == nil {
			return nil, nil, errSessionGone
		}
		return s.useLocked(ss, now), d.releaser(ss), nil
	}
	ss.cl, ss.dialedAt = cl, now
	return s.useLocked(ss, now), d.releaser(ss), nil
}

// dial connects to the node with token, renewed first in the node's
// process with the browser's address when the dashboard can: the
// renewal, which the node checks, limits and audits like any login by
// token, is the browser's, and the dial presents a token issued a moment
// ago.
func (d *Dashboard) dial(ctx context.Context, token, addr string) (*client.Client, error) {
	if r, ok := d.cfg.Login.(Refresher); ok {
		fresh, err := r.Refresh(ctx, token, addr)
		if err != nil {
			return nil, err
		}
		token = fresh
	}
	return client.Dial(ctx, d.node.addr, d.node.opts(client.WithSessionToken(token))...)
}

// reserveLocked takes a place in the connection bound for a dial,
// closing the least recently used idle connection if need be; false if
// every place is held by a connection in use or a dial.
func (s *store) reserveLocked() bool {
	for s.conns >= s.maxConns {
		if !s.closeLRULocked() {
			return false
		}
	}
	s.conns++
	return true
}

func (s *store) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserveLocked()
}

func (s *store) unreserve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns--
}

func (s *store) useLocked(ss *session, now time.Time) *client.Client {
	ss.usedAt = now
	ss.busy++
	return ss.cl
}

func (d *Dashboard) releaser(ss *session) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			d.sessions.mu.Lock()
			ss.busy--
			d.sessions.mu.Unlock()
		})
	}
}

// closeLRULocked closes the least recently used idle connection; false
// if none is open and idle.
func (s *store) closeLRULocked() bool {
	var lru *session
	for _, o := range s.byID {
		if o.cl != nil && o.busy == 0 && (lru == nil || o.usedAt.Before(lru.usedAt)) {
			lru = o
		}
	}
	if lru == nil {
		return false
	}
	s.closeConnLocked(lru)
	return true
}

// refusedSession reports whether the node refused the session's token
// for good: only a new login helps.
func refusedSession(err error) bool {
	return errors.Is(err, client.ErrSessionExpired) || errors.Is(err, client.ErrSessionRevoked) ||
		errors.Is(err, client.ErrInvalidSession) || errors.Is(err, client.ErrTLSRequired) ||
		errors.Is(err, client.ErrInvalidCredentials)
}
