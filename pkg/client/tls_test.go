package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/wire"
)

func answerStatus(fc *fakeConn, corr uint32, req wire.Request) {
	fc.ok(corr, wire.StatusResponse{NodeID: "n"})
}

// authPayload is the exact payload of an auth (key 0) frame.
func authPayload(user, password string) []byte {
	return wire.AuthRequest{User: &user, Password: &password}.AppendPayload(nil)
}

// TestTLSDialAndRedial: over TLS with a private CA, the first frame (the
// password auth) and every later request travel inside the TLS session,
// and so does the connection the client redials after losing the first.
func TestTLSDialAndRedial(t *testing.T) {
	pki := newTestPKI(t, "alice")
	f := startFakeTLS(t, pki.serverConfig(), answerStatus)
	cfg, err := NewTLSConfig(pki.caFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := dialFake(t, f, WithTLS(cfg))
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.dropAll()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("call after the connection dropped: %v", err)
	}
	firsts := f.firstFrames()
	if len(firsts) != 2 {
		t.Fatalf("%d connections, want 2", len(firsts))
	}
	for i, ff := range firsts {
		if !ff.tls || ff.key != wire.KeyAuth || !bytes.Equal(ff.payload, authPayload("u", "p")) {
			t.Errorf("connection %d: first frame %+v, want auth u/p over TLS", i, ff)
		}
	}
}

// TestTLSRefusals: a server the client cannot trust, or one that does not
// speak TLS, fails the dial with ErrTLS, which is not retriable, before
// any credential is sent.
func TestTLSRefusals(t *testing.T) {
	pki := newTestPKI(t, "alice")
	tlsFake := startFakeTLS(t, pki.serverConfig(), answerStatus)
	plainFake := startFake(t, answerStatus)
	trusting, err := NewTLSConfig(pki.caFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	wrongName, err := NewTLSConfig(pki.caFile, "", "", "other.example")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		f    *fakeBroker
		cfg  *tls.Config
	}{
		{"unknown CA", tlsFake, &tls.Config{MinVersion: tls.VersionTLS12}},
		{"wrong server name", tlsFake, wrongName},
		{"server without TLS", plainFake, trusting},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(t.Context(), tc.f.ln.Addr().String(), WithCredentials("u", "secret"), WithTLS(tc.cfg))
			if !errors.Is(err, ErrTLS) || IsRetriable(err) {
				t.Fatalf("got %v, want ErrTLS, not retriable", err)
			}
		})
	}
	if n := len(tlsFake.firstFrames()) + len(plainFake.firstFrames()); n != 0 {
		t.Fatalf("%d frames reached the servers", n)
	}
}

// TestTLSServerName: the name the certificate must carry defaults to the
// host dialled and can be set apart from it.
func TestTLSServerName(t *testing.T) {
	pki := newTestPKI(t, "alice")
	f := startFakeTLS(t, pki.serverConfig(), answerStatus)
	_, port, _ := strings.Cut(f.ln.Addr().String(), ":")
	cfg, err := NewTLSConfig(pki.caFile, "", "", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(t.Context(), "127.0.0.1:"+port, WithCredentials("u", "p"), WithTLS(cfg))
	if err != nil {
		t.Fatalf("dial 127.0.0.1 with server name localhost: %v", err)
	}
	c.Close()
	if cfg.ServerName != "localhost" {
		t.Fatal("Dial changed the caller's tls.Config")
	}
	c, err = Dial(t.Context(), "localhost:"+port, WithCredentials("u", "p"), WithTLS(&tls.Config{RootCAs: pki.pool}))
	if err != nil {
		t.Fatalf("dial localhost, name from the address: %v", err)
	}
	c.Close()
}

// TestMTLSAuth: the first frame is mtls_auth with an empty payload, over
// a TLS session in which the server verified the client certificate.
func TestMTLSAuth(t *testing.T) {
	pki := newTestPKI(t, "alice")
	f := startFakeTLS(t, pki.serverConfig(), answerStatus)
	cfg, err := NewTLSConfig(pki.caFile, pki.clientCert, pki.clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(t.Context(), f.ln.Addr().String(), WithTLS(cfg), WithMTLSAuth())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	firsts := f.firstFrames()
	if len(firsts) != 1 || firsts[0].key != wire.KeyMTLSAuth || len(firsts[0].payload) != 0 ||
		!firsts[0].tls || firsts[0].peerCN != "alice" {
		t.Fatalf("first frames %+v, want mtls_auth with an empty payload from alice's certificate", firsts)
	}
}

// TestMTLSAuthNeedsClientCertificate: without TLS or without a client
// certificate, WithMTLSAuth fails at Dial, before connecting.
func TestMTLSAuthNeedsClientCertificate(t *testing.T) {
	pki := newTestPKI(t, "alice")
	f := startFakeTLS(t, pki.serverConfig(), answerStatus)
	noCert, err := NewTLSConfig(pki.caFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]Option{
		"no TLS":         {WithMTLSAuth()},
		"no certificate": {WithTLS(noCert), WithMTLSAuth()},
	} {
		if _, err := Dial(t.Context(), f.ln.Addr().String(), opts...); err == nil || !strings.Contains(err.Error(), "client certificate") {
			t.Errorf("%s: got %v, want an error naming the client certificate", name, err)
		}
	}
	if n := len(f.firstFrames()); n != 0 {
		t.Fatalf("%d frames reached the server", n)
	}
}

// TestServerRefusesClientCertificate: a server that requires a client
// certificate from its own CA and gets another fails the dial with ErrTLS.
// Under TLS 1.3 the refusal arrives only after the client's handshake, as
// the answer to the first frame.
func TestServerRefusesClientCertificate(t *testing.T) {
	pki := newTestPKI(t, "alice")
	stranger := newTestPKI(t, "mallory")
	srvCfg := pki.serverConfig()
	srvCfg.ClientAuth = tls.RequireAndVerifyClientCert
	f := startFakeTLS(t, srvCfg, answerStatus)
	cfg, err := NewTLSConfig(pki.caFile, stranger.clientCert, stranger.clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dial(t.Context(), f.ln.Addr().String(), WithTLS(cfg), WithMTLSAuth())
	if !errors.Is(err, ErrTLS) || IsRetriable(err) {
		t.Fatalf("got %v, want ErrTLS, not retriable", err)
	}
}

// TestTokenAuth: the first frame is token_auth carrying exactly the JWT
// (surrounding whitespace, as files have, trimmed).
func TestTokenAuth(t *testing.T) {
	f := startFake(t, answerStatus)
	c, err := Dial(t.Context(), f.ln.Addr().String(), WithToken("eyJ.payload.sig\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// str(jwt): present tag, u32 length, bytes.
	want := append([]byte{1, 0, 0, 0, 15}, "eyJ.payload.sig"...)
	firsts := f.firstFrames()
	if len(firsts) != 1 || firsts[0].key != wire.KeyTokenAuth || !bytes.Equal(firsts[0].payload, want) {
		t.Fatalf("first frames %+v, want token_auth %x", firsts, want)
	}
}

// TestTokenSourceRefetchedOnRedial: every connection asks the source for
// a token, so a renewed token is used after a redial.
func TestTokenSourceRefetchedOnRedial(t *testing.T) {
	f := startFake(t, answerStatus)
	var (
		mu    sync.Mutex
		calls int
	)
	src := func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return "token-" + string(rune('0'+calls)), nil
	}
	c, err := Dial(t.Context(), f.ln.Addr().String(), WithTokenSource(src))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f.dropAll()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	firsts := f.firstFrames()
	if len(firsts) != 2 {
		t.Fatalf("%d connections, want 2", len(firsts))
	}
	for i, want := range []string{"token-1", "token-2"} {
		jwt := want
		if p := (wire.TokenAuthRequest{JWT: &jwt}).AppendPayload(nil); firsts[i].key != wire.KeyTokenAuth || !bytes.Equal(firsts[i].payload, p) {
			t.Errorf("connection %d: first frame %+v, want token_auth %s", i, firsts[i], want)
		}
	}
}

// TestTokenSourceFailure: a failing or empty source fails the dial, and
// nothing is sent.
func TestTokenSourceFailure(t *testing.T) {
	f := startFake(t, answerStatus)
	boom := errors.New("identity provider down")
	_, err := Dial(t.Context(), f.ln.Addr().String(), WithTokenSource(func(context.Context) (string, error) { return "", boom }))
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the source's error", err)
	}
	if _, err := Dial(t.Context(), f.ln.Addr().String(), WithToken(" \n")); err == nil {
		t.Fatal("an empty token was accepted")
	}
	if _, err := Dial(t.Context(), f.ln.Addr().String(), WithTokenSource(nil)); err == nil {
		t.Fatal("a nil token source was accepted")
	}
	if n := len(f.firstFrames()); n != 0 {
		t.Fatalf("%d frames reached the server", n)
	}
}

// TestLastAuthOptionWins: of several ways to authenticate, the last one
// given is used.
func TestLastAuthOptionWins(t *testing.T) {
	f := startFake(t, answerStatus)
	c, err := Dial(t.Context(), f.ln.Addr().String(), WithToken("jwt"), WithCredentials("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if ff := f.firstFrames(); len(ff) != 1 || ff[0].key != wire.KeyAuth || !bytes.Equal(ff[0].payload, authPayload("u", "p")) {
		t.Fatalf("first frames %+v, want auth u/p", ff)
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	pki := newTestPKI(t, "alice")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string][4]string{
		"missing CA":          {filepath.Join(t.TempDir(), "none.pem"), "", "", ""},
		"CA without PEM":      {notPEM, "", "", ""},
		"certificate alone":   {"", pki.clientCert, "", ""},
		"key alone":           {"", "", pki.clientKey, ""},
		"mismatched key pair": {"", pki.clientCert, pki.serverKeyFile, ""},
	}
	for name, a := range cases {
		if _, err := NewTLSConfig(a[0], a[1], a[2], a[3]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cfg, err := NewTLSConfig("", pki.clientCert, pki.clientKey, "n")
	if err != nil || cfg.RootCAs != nil || len(cfg.Certificates) != 1 || cfg.ServerName != "n" || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("config %+v, %v", cfg, err)
	}
}
