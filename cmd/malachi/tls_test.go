package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// devCertsNode writes development certificates and starts a fake node
// that serves TLS with them, verifying client certificates when given,
// as a broker with mtls_auth enabled does. It returns the certificate
// directory.
func devCertsNode(t *testing.T, c *cli) (*fakeNode, string) {
	t.Helper()
	dir := t.TempDir()
	c.ok("dev-certs", dir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, devServer), filepath.Join(dir, devServerKey))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, devCA))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	return startFakeNode(t, cfg, statusOK), dir
}

// TestCLIOverTLS: with dev-certs' CA the CLI talks TLS, and each way to
// authenticate sends its own first frame over the TLS connection.
func TestCLIOverTLS(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	f, dir := devCertsNode(t, c)
	c.env = append(c.env, "MALACHI_SERVER="+f.addr())
	ca, cert, key := filepath.Join(dir, devCA), filepath.Join(dir, devClient), filepath.Join(dir, devClientKey)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	c.ok("status", "--tls-ca", ca, "--password", "pw")
	c.ok("status", "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--auth", "mtls")
	c.ok("status", "--tls-ca", ca, "--token", "jwt-flag")
	envCLI := *c
	envCLI.env = append(append([]string(nil), c.env...), "MALACHI_TLS_CA="+ca, "MALACHI_TOKEN_FILE="+tokenFile)
	envCLI.ok("status")
	// The server certificate names localhost; dialling it by IP with the
	// name given apart still verifies.
	c.ok("status", "--tls-ca", ca, "--tls-server-name", "localhost", "--password", "pw")

	want := []fakeAuth{
		{key: wire.KeyAuth, user: "admin", password: "pw"},
		{key: wire.KeyMTLSAuth, peerCN: "admin"},
		{key: wire.KeyTokenAuth, jwt: "jwt-flag"},
		{key: wire.KeyTokenAuth, jwt: "from-file"},
		{key: wire.KeyAuth, user: "admin", password: "pw"},
	}
	got := f.authsSeen()
	if len(got) != len(want) {
		t.Fatalf("authentications %+v, want %d", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if !g.tls || g.key != w.key || g.user != w.user || g.password != w.password || g.jwt != w.jwt || w.peerCN != "" && g.peerCN != w.peerCN {
			t.Errorf("authentication %d: %+v, want %+v over TLS", i, g, w)
		}
	}

	// Without the CA the server is not trusted, and nothing is sent.
	stderr := c.fails(1, "status", "--tls")
	if !strings.Contains(stderr, "TLS with "+f.addr()+" failed") || !strings.Contains(stderr, "--tls-ca") {
		t.Errorf("untrusted server: %q", stderr)
	}
	// Plain TCP to a TLS port: the hint points at TLS.
	if stderr := c.fails(1, "status"); !strings.Contains(stderr, "pass --tls or --tls-ca") {
		t.Errorf("plain connection to a TLS server: %q", stderr)
	}
	if n := len(f.authsSeen()); n != len(want) {
		t.Fatalf("%d more authentications reached the server", n-len(want))
	}
}

// TestContextSavesTLS: a context keeps the TLS files (as absolute paths)
// and the way to authenticate, and a later command uses them.
func TestContextSavesTLS(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	f, dir := devCertsNode(t, c)
	// Relative paths, resolved against the directory of the save.
	save := *c
	save.dir = dir
	save.ok("context", "save", "secure", "--server", f.addr(), "--tls-ca", devCA,
		"--tls-cert", devClient, "--tls-key", devClientKey, "--auth", "mtls")
	c.ok("status")
	got := f.authsSeen()
	if len(got) != 1 || got[0].key != wire.KeyMTLSAuth || got[0].peerCN != "admin" || !got[0].tls {
		t.Fatalf("authentications %+v, want one mtls_auth as admin over TLS", got)
	}
	out := c.ok("context", "list")
	if !strings.Contains(out, "mtls") || !strings.Contains(out, "yes") {
		t.Fatalf("context list:\n%s", out)
	}
}

// TestSecurityFlagMistakes: combinations that cannot work are usage
// errors, found before connecting.
func TestSecurityFlagMistakes(t *testing.T) {
	t.Parallel()
	f := startFakeNode(t, nil, statusOK)
	c := newCLI(t, f.addr())
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--auth", "mtls"}, "--auth mtls needs a client certificate"},
		{[]string{"--auth", "mtls", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls=false"}, "--auth mtls needs TLS"},
		{[]string{"--auth", "token"}, "--auth token needs --token or --token-file"},
		{[]string{"--token", "a", "--token-file", "b"}, "not both"},
		{[]string{"--auth", "password", "--token", "a"}, "a token was given but --auth is password"},
		{[]string{"--auth", "kerberos"}, "--auth is password, mtls or token"},
	}
	for _, tc := range cases {
		stderr := c.fails(2, append([]string{"status"}, tc.args...)...)
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("status %s: %q, want %q", strings.Join(tc.args, " "), stderr, tc.want)
		}
	}
	envCLI := *c
	envCLI.env = append(append([]string(nil), c.env...), "MALACHI_TLS=maybe")
	if stderr := envCLI.fails(2, "status"); !strings.Contains(stderr, "MALACHI_TLS is true or false") {
		t.Errorf("MALACHI_TLS=maybe: %q", stderr)
	}
	if n := len(f.authsSeen()); n != 0 {
		t.Fatalf("%d authentications reached the server", n)
	}
}

// TestServeTLS: `serve --tls-only` with dev-certs files serves TLS alone,
// the CLI points a plaintext attempt at the TLS flags, and SIGHUP makes
// the node load a rotated certificate (the periodic check is off, so
// nothing else could).
func TestServeTLS(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := t.TempDir()
	c.ok("dev-certs", dir)
	oldCA := filepath.Join(t.TempDir(), "old-ca.pem")
	if b, err := os.ReadFile(filepath.Join(dir, devCA)); err != nil || os.WriteFile(oldCA, b, 0o600) != nil {
		t.Fatal("copying ca.pem", err)
	}
	addr, proc := startServeWith(t, c, "--tls-cert", filepath.Join(dir, devServer), "--tls-key", filepath.Join(dir, devServerKey),
		"--tls-client-ca", filepath.Join(dir, devCA), "--tls-only", "--tls-reload-interval", "-1s")
	c.env = append(c.env, "MALACHI_SERVER="+addr)

	c.ok("status", "--tls-ca", oldCA)
	if stderr := c.fails(1, "status"); !strings.Contains(stderr, "tls_required") || !strings.Contains(stderr, "--tls-ca") {
		t.Fatalf("plaintext status: %q", stderr)
	}

	c.ok("dev-certs", dir, "--force") // a new CA, and a server certificate it signed
	newCA := filepath.Join(dir, devCA)
	if stderr := c.fails(1, "status", "--tls-ca", newCA); !strings.Contains(stderr, "TLS with") {
		t.Fatalf("the rotated certificate is served before SIGHUP: %q", stderr)
	}
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	cfg, err := client.NewTLSConfig(newCA, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	// The reload runs when the node handles the signal: wait for the
	// first handshake that verifies against the new CA.
	deadline := time.Now().Add(waitFor)
	for {
		cl, err := client.Dial(t.Context(), addr, client.WithTLS(cfg), client.WithCredentials("admin", "admin123"))
		if err == nil {
			cl.Close()
			break
		}
		if !errors.Is(err, client.ErrTLS) || time.Now().After(deadline) {
			t.Fatalf("after SIGHUP: %v", err)
		}
	}
	c.ok("status", "--tls-ca", newCA)
}

// TestCLIAgainstTLSNode: the CLI against a real node with TLS and
// mtls_auth, using the files dev-certs wrote: the client certificate
// logs in as its CN.
func TestCLIAgainstTLSNode(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := t.TempDir()
	c.ok("dev-certs", dir, "--client-user", "admin")
	ca := filepath.Join(dir, devCA)
	n := clienttest.Start(t, clienttest.WithTLS(filepath.Join(dir, devServer), filepath.Join(dir, devServerKey), ca), clienttest.WithMTLSAuth())
	c.env = append(c.env, "MALACHI_SERVER="+n.Addr(), "MALACHI_TLS_CA="+ca)
	c.ok("topic", "create", "tls-orders")
	c.ok("user", "list", "--auth", "mtls", "--tls-cert", filepath.Join(dir, devClient), "--tls-key", filepath.Join(dir, devClientKey))
	c.ok("user", "add", "carol", "--new-password", "carol-pw", "--perms", "consume")
	c.ok("topic", "list", "--user", "carol", "--password", "carol-pw")
}
