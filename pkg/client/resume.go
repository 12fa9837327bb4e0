package client

import "time"

// WithSessionToken makes connections log in with a session token that an
// earlier login was answered (see SessionToken), by session_auth (wire key
// 84) alone: no password, certificate or JWT is sent or kept. It suits a
// process that acts for a user who logged in elsewhere, such as a web
// console that checks the password once and keeps only the token. Each
// connection is answered a fresh token, which later redials use; once the
// node refuses the token (expired, revoked, or sent in the clear after a
// TLS login) the dial fails with ErrSessionExpired, ErrSessionRevoked,
// ErrInvalidSession or ErrTLSRequired and only a new login helps. It
// needs wire v2. If several ways to authenticate are given, the last
// applies.
func WithSessionToken(token string) Option {
	return func(c *config) {
		c.auth, c.user, c.password, c.tokenSource = authSession, "", "", nil
		c.resumeToken = token
	}
}

// SessionToken returns the newest session token the node answered a login
// of this client with, and when it expires (zero when the node did not
// say: wire v1's auth answer carries no expiry). It is "" before any
// token, and after the node refused the last one. The token stands for
// the user until it expires: keep it as carefully as a password.
func (c *Client) SessionToken() (string, time.Time) {
	s := c.cfg.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.expiresMs == 0 {
		return s.token, time.Time{}
	}
	return s.token, time.UnixMilli(int64(s.expiresMs))
}
