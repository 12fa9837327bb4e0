package broker

// Abuse of the login throttle by an unauthenticated client.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/malachi-log/malachi/internal/auth/authtest"
)

// Password failures with an empty user name must not drain a bucket that
// certificate and token logins check: a few addresses must not lock every
// certificate and token client of the node out.
func TestEmptyUserNameCannotLockOutCertAndTokenLogins(t *testing.T) {
	keys := authtest.NewSigners(t, "k-")
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwks, authtest.JWKS(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := authtest.NewCA(t, "ca")
	b, mc := openAuth(t, AuthConfig{
		MTLS: MTLSConfig{Enabled: true},
		OIDC: OIDCConfig{Enabled: true, Issuer: "i", Audience: "a", JWKSFile: jwks},
	})
	ctx := context.Background()
	tok := keys[0].Sign(t, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "admin", "exp": mc.Now().Add(time.Hour).Unix()})
	if _, err := b.Login(ctx, Credentials{Method: MethodToken, Token: tok, Addr: "192.0.2.1"}); err != nil {
		t.Fatalf("token login before: %v", err)
	}
	// Attacker: 5 wrong passwords with user "" from each of 6 addresses.
	for a := 0; a < 6; a++ {
		for i := 0; i < 5; i++ {
			b.Login(ctx, Credentials{Method: MethodPassword, User: "", Password: "x", Addr: "198.51.100." + string(rune('1'+a))})
		}
	}
	_, err := b.Login(ctx, Credentials{Method: MethodToken, Token: tok, Addr: "192.0.2.1"})
	if err != nil {
		t.Errorf("valid token login from an unrelated address refused: %v", err)
	}
	leaf := ca.Issue(t, authtest.Leaf{CN: "admin"}).Leaf
	st := &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca.Cert}}}
	_, err = b.Login(ctx, Credentials{Method: MethodMTLS, TLS: st, ListenerVerifies: true, Addr: "192.0.2.9"})
	if err != nil {
		t.Errorf("valid mTLS login from an unrelated address refused: %v", err)
	}
}

// Parallel wrong guesses from one address: the hash takes tens of ms, so
// unless attempts are charged before it, all of them pass the throttle
// before any failure lands. At most MaxFailures may be checked.
func TestParallelGuessesCannotBypassLockout(t *testing.T) {
	b, _ := openAuth(t, AuthConfig{HashWait: 30 * time.Second})
	ctx := context.Background()
	var mu sync.Mutex
	verified := 0
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Login(ctx, Credentials{Method: MethodPassword, User: "admin", Password: "guess", Addr: "203.0.113.5"})
			if errors.Is(err, ErrCredentials) {
				mu.Lock()
				verified++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if verified > 5 {
		t.Errorf("%d passwords actually checked from one address (lock at 5, address bucket 30, user bucket 30)", verified)
	}
}

// TestTokenWithinLeewayStaysValid: a token the login accepted thanks to
// the clock-skew leeway (exp just passed) must not be refused on the very
// next request.
func TestTokenWithinLeewayStaysValid(t *testing.T) {
	keys := authtest.NewSigners(t, "k-")
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(jwks, authtest.JWKS(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	b, mc := openAuth(t, AuthConfig{OIDC: OIDCConfig{Enabled: true, Issuer: "i", Audience: "a", JWKSFile: jwks}})
	tok := keys[0].Sign(t, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "admin", "exp": mc.Now().Add(-10 * time.Second).Unix()})
	id, err := b.Login(context.Background(), Credentials{Method: MethodToken, Token: tok, Addr: "192.0.2.1"})
	if err != nil {
		t.Fatalf("login within the leeway: %v", err)
	}
	if err := b.CheckIdentity(*id); err != nil {
		t.Fatalf("the next request: %v", err)
	}
	mc.Advance(time.Minute)
	if err := b.CheckIdentity(*id); err == nil {
		t.Fatal("still valid past exp and the leeway")
	}
}
