package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/malachi-log/malachi/internal/auth/authtest"
	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// tlsSetup is a CA, the server's TLS files signed by it, and a client
// configuration that trusts it.
type tlsSetup struct {
	ca   *authtest.CA
	scfg Config
}

func newTLSSetup(t *testing.T) *tlsSetup {
	dir := t.TempDir()
	ca := authtest.NewCA(t, "test CA")
	cert, key := authtest.WritePair(t, dir, "server", ca.Issue(t, authtest.Leaf{CN: "node", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}))
	return &tlsSetup{ca: ca, scfg: Config{TLSCertFile: cert, TLSKeyFile: key, TLSClientCAFile: ca.WriteCA(t, dir)}}
}

func (ts *tlsSetup) client(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ts.ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS13}
}

// forcing sends cert whatever CAs the server asks for, as a client
// trying a certificate from another CA would.
func (ts *tlsSetup) forcing(cert tls.Certificate) *tls.Config {
	cfg := ts.client()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg
}

// mtlsLogin sends mtls_auth and returns the refusal ("" for success) or
// the read error of a connection the TLS layer ended.
func mtlsLogin(c *rawClient) (string, error) {
	c.send(1, &wire.MTLSAuthRequest{})
	_, _, reason, err := c.recv()
	return reason, err
}

// TestMTLSAuth maps a verified client certificate to a user, refuses the
// rest, and ends the identity when the certificate expires.
func TestMTLSAuth(t *testing.T) {
	ts := newTLSSetup(t)
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{MTLS: broker.MTLSConfig{Enabled: true}}}, ts.scfg)
	now := time.Now()

	c := n.dialTLS(t, ts.client(ts.ca.Issue(t, authtest.Leaf{CN: "consumer", NotAfter: now.Add(2 * time.Hour)})))
	if reason, err := mtlsLogin(c); reason != "" || err != nil {
		t.Fatalf("valid certificate: %q, %v", reason, err)
	}
	c.ok(2, &wire.ListTopicsRequest{})
	c.refused(3, createUserReq("x", "x-pass", "admin"), wire.ReasonPermissionDenied)

	refusals := map[string]struct {
		cfg  *tls.Config
		want string
	}{
		"unknown user":   {ts.client(ts.ca.Issue(t, authtest.Leaf{CN: "ghost"})), wire.ReasonInvalidCredentials},
		"no common name": {ts.client(ts.ca.Issue(t, authtest.Leaf{DNS: []string{"consumer"}})), wire.ReasonInvalidCredentials},
		"no certificate": {ts.client(), wire.ReasonNoPeerCertificate},
	}
	for name, tt := range refusals {
		if reason, err := mtlsLogin(n.dialTLS(t, tt.cfg)); reason != tt.want || err != nil {
			t.Errorf("%s: %q, %v; want %q", name, reason, err, tt.want)
		}
	}
	// Certificates the TLS layer refuses never reach mtls_auth: the
	// connection ends with a TLS alert instead of an answer.
	evil := authtest.NewCA(t, "evil CA")
	for name, cert := range map[string]tls.Certificate{
		"expired":  ts.ca.Issue(t, authtest.Leaf{CN: "consumer", NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}),
		"wrong CA": evil.Issue(t, authtest.Leaf{CN: "consumer"}),
	} {
		if reason, err := mtlsLogin(n.dialTLS(t, ts.forcing(cert))); err == nil {
			t.Errorf("%s: answered %q, want the handshake refused", name, reason)
		}
	}
	// Plaintext has no certificate to offer.
	if reason, err := mtlsLogin(n.dial(t)); reason != wire.ReasonMTLSAuthUnavailable || err != nil {
		t.Errorf("plaintext: %q, %v", reason, err)
	}
	// Passwords still work over TLS without a certificate.
	n.dialTLS(t, ts.client()).login("app", "app123")

	// Past the certificate's expiry the open connection is refused.
	n.clock.Advance(3 * time.Hour)
	c.refused(4, &wire.ListTopicsRequest{}, wire.ReasonInvalidCredentials)
	c.closed()
}

// TestMTLSIdentityRuleAndDisabled: a SAN rule picks the user from the
// SAN; without mTLS enabled, key 12 answers mtls_auth_disabled.
func TestMTLSIdentityRuleAndDisabled(t *testing.T) {
	ts := newTLSSetup(t)
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{MTLS: broker.MTLSConfig{Enabled: true, Identity: "san:dns"}}}, ts.scfg)
	cert := ts.ca.Issue(t, authtest.Leaf{CN: "admin", DNS: []string{"consumer"}})
	c := n.dialTLS(t, ts.client(cert))
	if reason, err := mtlsLogin(c); reason != "" || err != nil {
		t.Fatalf("SAN login: %q, %v", reason, err)
	}
	c.refused(2, &wire.ListUsersRequest{}, wire.ReasonPermissionDenied) // consumer, not admin

	off := startAuthNode(t, broker.Config{}, ts.scfg)
	if reason, err := mtlsLogin(off.dialTLS(t, ts.client(cert))); reason != wire.ReasonMTLSAuthDisabled || err != nil {
		t.Fatalf("mTLS off: %q, %v", reason, err)
	}
}

// jwksServer serves a key set that the test can replace, counting
// fetches.
type jwksServer struct {
	mu      sync.Mutex
	body    []byte
	fetches atomic.Int32
	*httptest.Server
}

func newJWKSServer(t *testing.T, body []byte) *jwksServer {
	j := &jwksServer{body: body}
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		w.Write(j.body)
	}))
	t.Cleanup(j.Close)
	return j
}

func (j *jwksServer) set(body []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.body = body
}

func tokenLogin(c *rawClient, token string) string {
	c.send(1, &wire.TokenAuthRequest{JWT: &token})
	_, _, reason, err := c.recv()
	if err != nil {
		return err.Error()
	}
	return reason
}

// TestTokenAuth verifies JWTs end to end: the three algorithms, the
// refusals, a key rotated in at the JWKS URL, and the identity ending at
// the token's expiry.
func TestTokenAuth(t *testing.T) {
	fileKeys := authtest.NewSigners(t, "file-")
	urlKeys := authtest.NewSigners(t, "url-")
	rotated := authtest.NewSigners(t, "rotated-")
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(file, authtest.JWKS(t, fileKeys...), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := newJWKSServer(t, authtest.JWKS(t, urlKeys...))
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{OIDC: broker.OIDCConfig{
		Enabled: true, Issuer: "https://idp.test", Audience: "malachi", JWKSFile: file, JWKSURL: srv.URL,
	}}}, Config{})
	now := n.clock.Now()
	claims := func(sub string, exp time.Time) jwt.MapClaims {
		return jwt.MapClaims{"iss": "https://idp.test", "aud": "malachi", "sub": sub, "iat": now.Unix(), "exp": exp.Unix()}
	}
	valid := claims("consumer", now.Add(time.Hour))
	for _, k := range append(fileKeys, urlKeys...) {
		c := n.dial(t)
		if reason := tokenLogin(c, k.Sign(t, valid)); reason != "" {
			t.Fatalf("%s: %q", k.Kid, reason)
		}
		c.ok(2, &wire.ListTopicsRequest{})
	}
	with := func(k, v string) jwt.MapClaims {
		c := claims("consumer", now.Add(time.Hour))
		c[k] = v
		return c
	}
	other := authtest.NewSigners(t, "file-")[0] // same kid, another key
	for name, tok := range map[string]string{
		"expired":        fileKeys[0].Sign(t, claims("consumer", now.Add(-time.Hour))),
		"wrong issuer":   fileKeys[0].Sign(t, with("iss", "https://evil.test")),
		"wrong audience": fileKeys[0].Sign(t, with("aud", "someone-else")),
		"wrong key":      other.Sign(t, valid),
		"alg none":       authtest.NoneToken(t, fileKeys[0].Kid, valid),
		"HS256":          authtest.HMACToken(t, fileKeys[0], valid),
		"unknown user":   fileKeys[1].Sign(t, claims("ghost", now.Add(time.Hour))),
		"unknown kid":    rotated[0].Sign(t, valid), // not rotated in yet
	} {
		if reason := tokenLogin(n.dial(t), tok); reason != wire.ReasonInvalidCredentials {
			t.Errorf("%s: %q, want invalid_credentials", name, reason)
		}
	}
	// The issuer rotates its keys: an unknown kid refetches the set, at
	// most once per JWKSMinInterval.
	srv.set(authtest.JWKS(t, rotated...))
	before := srv.fetches.Load()
	if reason := tokenLogin(n.dial(t), rotated[1].Sign(t, valid)); reason != wire.ReasonInvalidCredentials {
		t.Fatalf("rotated key within the minimum interval: %q", reason)
	}
	if srv.fetches.Load() != before {
		t.Fatal("fetched again within the minimum interval")
	}
	n.clock.Advance(time.Minute)
	c := n.dial(t)
	if reason := tokenLogin(c, rotated[2].Sign(t, claims("consumer", now.Add(5*time.Minute)))); reason != "" {
		t.Fatalf("rotated key after the interval: %q", reason)
	}
	// The open connection ends with its token.
	c.ok(2, &wire.ListTopicsRequest{})
	n.clock.Advance(5 * time.Minute)
	c.refused(3, &wire.ListTopicsRequest{}, wire.ReasonInvalidCredentials)
	c.closed()
}

// TestTokenPermsClaimAndDisabled: with a permissions claim the token is
// the authority; without token auth configured, key 13 answers
// oidc_auth_disabled.
func TestTokenPermsClaimAndDisabled(t *testing.T) {
	keys := authtest.NewSigners(t, "k-")
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, authtest.JWKS(t, keys...), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startAuthNode(t, broker.Config{Auth: broker.AuthConfig{OIDC: broker.OIDCConfig{
		Enabled: true, Issuer: "https://idp.test", Audience: "malachi", JWKSFile: file, PermsClaim: "malachi_perms",
	}}}, Config{})
	now := n.clock.Now()
	tok := keys[2].Sign(t, jwt.MapClaims{
		"iss": "https://idp.test", "aud": "malachi", "sub": "robot", "exp": now.Add(time.Hour).Unix(),
		"malachi_perms": []string{"consume"},
	})
	c := n.dial(t)
	if reason := tokenLogin(c, tok); reason != "" {
		t.Fatalf("robot: %q", reason)
	}
	c.ok(2, &wire.ListTopicsRequest{})
	c.refused(3, &wire.ListUsersRequest{}, wire.ReasonPermissionDenied)

	off := startAuthNode(t, broker.Config{}, Config{})
	if reason := tokenLogin(off.dial(t), tok); reason != wire.ReasonOIDCAuthDisabled {
		t.Fatalf("token auth off: %q", reason)
	}
}
