package server

import (
	"bufio"
	"encoding/base64"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/auth/authtest"
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// sessionAnswer is an answer to session_auth: the ok payload, or the
// refusal with its hint.
type sessionAnswer struct {
	resp   wire.SessionAuthResponse
	reason string
	hintMs uint32
}

// sessionAuth sends session_auth and reads its answer, which is ok (code
// 0) or a refusal with a hint (code 2), never a v1 error.
func (c *rawClient) sessionAuth(t *testing.T, corr uint32, req *wire.SessionAuthRequest) sessionAnswer {
	t.Helper()
	c.send(corr, req)
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	body, err := wire.ReadFrame(c.br, 0, nil)
	if err != nil {
		t.Fatalf("session_auth: %v", err)
	}
	got, code, payload, err := wire.ParseResponse(body)
	if err != nil || got != corr {
		t.Fatalf("session_auth: answer to %d, err %v", got, err)
	}
	var a sessionAnswer
	switch code {
	case wire.CodeOK:
		err = a.resp.Decode(payload)
	case wire.CodeErrorHint:
		a.reason, a.hintMs, err = wire.DecodeHintError(payload)
	default:
		t.Fatalf("session_auth answered with code %d", code)
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// resume logs the connection in with a session token.
func (c *rawClient) resume(t *testing.T, token string) wire.SessionAuthResponse {
	t.Helper()
	a := c.sessionAuth(t, 1, &wire.SessionAuthRequest{Token: &token})
	if a.reason != "" {
		t.Fatalf("resume refused: %s", a.reason)
	}
	return a.resp
}

// loginToken logs in as user with a password (v1 auth) and returns the
// session token.
func (n *authNode) loginToken(t *testing.T, user, pass string) (*rawClient, string) {
	t.Helper()
	c := n.dial(t)
	var tok wire.TokenResponse
	if err := tok.Decode(c.ok(1, &wire.AuthRequest{User: &user, Password: &pass})); err != nil {
		t.Fatal(err)
	}
	return c, tok.Token
}

// refusedResume wants session_auth with token refused with want, and the
// connection closed.
func (n *authNode) refusedResume(t *testing.T, token, want string) {
	t.Helper()
	c := n.dial(t)
	if a := c.sessionAuth(t, 1, &wire.SessionAuthRequest{Token: &token}); a.reason != want {
		t.Fatalf("resume: reason %q, want %q", a.reason, want)
	}
	c.closed()
}

// TestSessionResume: the token a v1 login answers logs a new connection in
// as the same user without a password, and resuming answers a fresh token
// that works in turn.
func TestSessionResume(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	_, token := n.loginToken(t, "app", "app123")
	c := n.dial(t)
	resp := c.resume(t, token)
	if !resp.Resumed || resp.Token == "" {
		t.Fatalf("resume answered %+v", resp)
	}
	wantExp := n.clock.Now().Add(time.Hour).UnixMilli()
	if int64(resp.ExpiresMs) != wantExp {
		t.Fatalf("token expires at %d, want %d (1 h)", resp.ExpiresMs, wantExp)
	}
	c.ok(2, &wire.CreateTopicRequest{Topic: str("t"), Bits: 4})
	c.ok(6, produceReq("t", "v")) // app may produce: the account's permissions
	c.refused(3, &wire.ListUsersRequest{}, wire.ReasonPermissionDenied)
	n.dial(t).resume(t, resp.Token)
	// Re-authenticating an open connection by token works too.
	c.send(4, &wire.SessionAuthRequest{Token: &resp.Token})
	if got, _, reason, err := c.recv(); got != 4 || reason != "" || err != nil {
		t.Fatalf("re-auth by token: answer to %d, %q, %v", got, reason, err)
	}
	c.ok(5, &wire.ListTopicsRequest{})
}

// TestSessionRefusals: an expired, altered, foreign or revoked token is
// refused with its own reason (code 2), and closes the connection.
func TestSessionRefusals(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin, _ := n.loginToken(t, "admin", "admin123")
	_, token := n.loginToken(t, "app", "app123")

	raw, _ := base64.RawURLEncoding.DecodeString(token)
	raw[len(raw)/2] ^= 1
	n.refusedResume(t, base64.RawURLEncoding.EncodeToString(raw), wire.ReasonInvalidSession)
	n.refusedResume(t, "not-a-token", wire.ReasonInvalidSession)
	other := startAuthNode(t, broker.Config{}, Config{}) // another cluster secret
	other.refusedResume(t, token, wire.ReasonInvalidSession)

	n.clock.Advance(time.Hour)
	n.refusedResume(t, token, wire.ReasonSessionExpired)
	n.clock.Advance(-time.Hour)
	n.dial(t).resume(t, token)

	admin.ok(2, &wire.ChangePasswordRequest{User: str("app"), NewPassword: str("app123")})
	n.refusedResume(t, token, wire.ReasonSessionRevoked)

	_, token = n.loginToken(t, "app", "app123")
	admin.ok(3, &wire.DeleteUserRequest{User: str("app")})
	n.refusedResume(t, token, wire.ReasonSessionRevoked)
	// Created again with the same password: still another account.
	admin.ok(4, createUserReq("app", "app123", "produce", "consume"))
	n.refusedResume(t, token, wire.ReasonSessionRevoked)
}

// TestResumedConnectionIsRevoked: a connection logged in by token loses
// its identity like any other when the password changes.
func TestResumedConnectionIsRevoked(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	admin, _ := n.loginToken(t, "admin", "admin123")
	_, token := n.loginToken(t, "app", "app123")
	c := n.dial(t)
	c.resume(t, token)
	c.ok(2, &wire.ListTopicsRequest{})
	admin.ok(2, &wire.ChangePasswordRequest{User: str("app"), NewPassword: str("changed")})
	c.refused(3, &wire.ListTopicsRequest{}, wire.ReasonInvalidCredentials)
	c.closed()
}

// TestSessionMaxAge: resuming renews the token, but never past
// SessionMaxAge from the password login.
func TestSessionMaxAge(t *testing.T) {
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{SessionTTL: time.Hour, SessionMaxAge: 2 * time.Hour}}, Config{})
	_, token := n.loginToken(t, "app", "app123")
	for range 2 {
		n.clock.Advance(50 * time.Minute)
		token = n.dial(t).resume(t, token).Token
	}
	n.clock.Advance(25 * time.Minute) // 2 h 5 min after the login, within the last token's hour
	n.refusedResume(t, token, wire.ReasonSessionExpired)
}

// TestSessionAuthPasswordFallback: a refused (or absent) token falls back
// to the password in the same request; without one the token's refusal
// is the answer.
func TestSessionAuthPasswordFallback(t *testing.T) {
	n := startAuthNode(t, broker.Config{}, Config{})
	bad, user, pass := "bad-token", "app", "app123"
	a := n.dial(t).sessionAuth(t, 1, &wire.SessionAuthRequest{Token: &bad, User: &user, Password: &pass})
	if a.reason != "" || a.resp.Resumed || a.resp.Token == "" {
		t.Fatalf("fallback answered %+v", a)
	}
	a = n.dial(t).sessionAuth(t, 1, &wire.SessionAuthRequest{User: &user, Password: &pass})
	if a.reason != "" || a.resp.Resumed {
		t.Fatalf("password-only session_auth answered %+v", a)
	}
	n.dial(t).resume(t, a.resp.Token)
	wrong := "wrong"
	a = n.dial(t).sessionAuth(t, 1, &wire.SessionAuthRequest{User: &user, Password: &wrong})
	if a.reason != wire.ReasonInvalidCredentials || a.hintMs != 0 {
		t.Fatalf("wrong password answered %+v", a)
	}
}

// TestSessionTokenFromTLSNeedsTLS: a token issued over TLS is refused in
// the clear, and once it has crossed the network unencrypted it never
// resumes again.
// A certificate login resumes as the certificate's user, and its token
// expires with the certificate.
func TestSessionTokenFromTLSNeedsTLS(t *testing.T) {
	ts := newTLSSetup(t)
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{MTLS: broker.MTLSConfig{Enabled: true}}}, ts.scfg)
	c := n.dialTLS(t, ts.client())
	var tok wire.TokenResponse
	if err := tok.Decode(c.ok(1, &wire.AuthRequest{User: str("app"), Password: str("app123")})); err != nil {
		t.Fatal(err)
	}
	fresh := n.dialTLS(t, ts.client()).resume(t, tok.Token)
	// Sent in the clear it is refused, and, having crossed the network
	// unencrypted, never resumes again, even over TLS.
	n.refusedResume(t, fresh.Token, wire.ReasonTLSRequired)
	if a := n.dialTLS(t, ts.client()).sessionAuth(t, 1, &wire.SessionAuthRequest{Token: &fresh.Token}); a.reason != wire.ReasonSessionRevoked {
		t.Fatalf("an exposed token resumed over TLS: %+v", a)
	}

	notAfter := n.clock.Now().Add(30 * time.Minute).Truncate(time.Second)
	mc := n.dialTLS(t, ts.client(ts.ca.Issue(t, authtest.Leaf{CN: "consumer", NotAfter: notAfter})))
	if err := tok.Decode(mc.ok(1, &wire.MTLSAuthRequest{})); err != nil {
		t.Fatal(err)
	}
	rc := n.dialTLS(t, ts.client()) // no certificate: the token is the login
	if resp := rc.resume(t, tok.Token); int64(resp.ExpiresMs) != notAfter.UnixMilli() {
		t.Fatalf("a certificate login's token expires at %d, want the certificate's %d", resp.ExpiresMs, notAfter.UnixMilli())
	}
	rc.refused(2, createUserReq("x", "x-pass", "admin"), wire.ReasonPermissionDenied)
	rc.ok(3, &wire.ListTopicsRequest{})
}

// TestLoginStorm: a storm of password logins from one address is bounded
// (one hash at a time, a queue of four per address) and refused beyond
// that with rate_limit_exceeded and a retry-after hint, while another
// address's logins are never crowded out; every client is served in the
// end by trying again.
func TestLoginStorm(t *testing.T) {
	const storm, others = 16, 3
	auth := broker.AuthConfig{HashConcurrency: 1, LoginQueue: 8, LoginQueuePerAddr: 4, MaxFailures: 1000, HashWait: time.Hour}
	n := startAuthNode(t, broker.Config{Auth: auth}, Config{})
	var (
		mu       sync.Mutex
		refusals []sessionAnswer
		wg       sync.WaitGroup
	)
	login := func(from string, mayRefuse bool) {
		user, pass := "app", "app123"
		for {
			c := n.dialFrom(t, from)
			a := c.sessionAuth(t, 1, &wire.SessionAuthRequest{User: &user, Password: &pass})
			if a.reason == "" {
				return
			}
			mu.Lock()
			refusals = append(refusals, a)
			mu.Unlock()
			if !mayRefuse {
				t.Errorf("a login from %s was refused (%s) while another address flooded", from, a.reason)
				return
			}
		}
	}
	for range storm {
		wg.Go(func() { login("127.0.0.1", true) })
	}
	for range others {
		wg.Go(func() { login("127.0.0.2", false) })
	}
	wg.Wait()
	for _, a := range refusals {
		if a.reason != wire.ReasonRateLimitExceeded || a.hintMs == 0 {
			t.Fatalf("refusal %+v: want rate_limit_exceeded with a hint", a)
		}
	}
	st := n.b.AuthStats()
	if st.HashesPeak > 1 || st.QueuedPeak > 8 {
		t.Fatalf("%d hashes ran at once and %d logins waited; the bounds are 1 and 8", st.HashesPeak, st.QueuedPeak)
	}
	t.Logf("%d logins served, %d refusals with hints", storm+others, len(refusals))
}

// dialFrom connects from a loopback address of its own, so the node sees
// another client address.
func (n *authNode) dialFrom(t *testing.T, ip string) *rawClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", n.s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// BenchmarkSessionResume is a login by session token through a real
// socket: dial, session_auth, answer.
func BenchmarkSessionResume(b *testing.B) {
	n := startAuthNode(b, broker.Config{}, Config{MaxConnsPerIP: 1 << 20})
	c := n.dial(b)
	var tok wire.TokenResponse
	if err := tok.Decode(c.ok(1, &wire.AuthRequest{User: str("app"), Password: str("app123")})); err != nil {
		b.Fatal(err)
	}
	req := &wire.SessionAuthRequest{Token: &tok.Token}
	for b.Loop() {
		nc, err := net.Dial("tcp", n.s.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		rc := &rawClient{t: b, nc: nc, br: bufio.NewReader(nc)}
		rc.ok(1, req)
		nc.Close()
	}
}
