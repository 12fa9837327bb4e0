package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/malachi-log/malachi/internal/auth/authtest"
	"github.com/malachi-log/malachi/internal/clock"
)

func openAuth(t testing.TB, ac AuthConfig) (*Broker, *clock.Manual) {
	t.Helper()
	mc := clock.NewManual(time.Now())
	b, err := Open(context.Background(), Config{DataDir: t.TempDir(), Clock: mc, Logger: slog.New(slog.DiscardHandler), Auth: ac})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.SeedUsers(context.Background(), true, ""); err != nil {
		t.Fatal(err)
	}
	return b, mc
}

// TestUnverifiedCertificateRefused: a certificate the TLS layer did not
// verify proves nothing, whatever name it carries.
func TestUnverifiedCertificateRefused(t *testing.T) {
	b, _ := openAuth(t, AuthConfig{MTLS: MTLSConfig{Enabled: true}})
	leaf := authtest.NewCA(t, "ca").Issue(t, authtest.Leaf{CN: "admin"}).Leaf
	st := &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf}}
	_, err := b.Login(context.Background(), Credentials{Method: MethodMTLS, TLS: st, ListenerVerifies: true, Addr: "10.0.0.1"})
	if !errors.Is(err, ErrCredentials) {
		t.Fatalf("unverified certificate: %v", err)
	}
	_, err = b.Login(context.Background(), Credentials{Method: MethodMTLS, TLS: st, Addr: "10.0.0.1"})
	if !errors.Is(err, ErrMTLSUnavailable) {
		t.Fatalf("listener that does not verify: %v", err)
	}
}

// TestAuthConfigValidation refuses methods that would refuse everyone.
func TestAuthConfigValidation(t *testing.T) {
	for name, ac := range map[string]AuthConfig{
		"bad identity rule": {MTLS: MTLSConfig{Enabled: true, Identity: "san:ip"}},
		"token, no issuer":  {OIDC: OIDCConfig{Enabled: true, Audience: "a", JWKSURL: "http://x"}},
		"token, no keys":    {OIDC: OIDCConfig{Enabled: true, Issuer: "i", Audience: "a"}},
		"token, bad file":   {OIDC: OIDCConfig{Enabled: true, Issuer: "i", Audience: "a", JWKSFile: "/nonexistent"}},
		"zero lockout step": {LockoutSteps: []int64{1, 0}},
	} {
		_, err := Open(context.Background(), Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Auth: ac})
		if err == nil {
			t.Errorf("%s: opened", name)
		}
	}
}

// TestJWKSFetchIsBounded: an oversized or failing key set is not used,
// and with no keys at all token_auth answers oidc_misconfigured.
func TestJWKSFetchIsBounded(t *testing.T) {
	keys := authtest.NewSigners(t, "k-")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"keys":[` + strings.Repeat(" ", 2<<10) + `]}`))
	}))
	defer srv.Close()
	b, mc := openAuth(t, AuthConfig{OIDC: OIDCConfig{
		Enabled: true, Issuer: "i", Audience: "a", JWKSURL: srv.URL, JWKSMaxBytes: 1 << 10,
	}})
	tok := keys[0].Sign(t, jwt.MapClaims{"iss": "i", "aud": "a", "sub": "admin", "exp": mc.Now().Add(time.Hour).Unix()})
	_, err := b.Login(context.Background(), Credentials{Method: MethodToken, Token: tok, Addr: "10.0.0.2"})
	if !errors.Is(err, ErrOIDCMisconfigured) {
		t.Fatalf("oversized key set: %v", err)
	}
}
