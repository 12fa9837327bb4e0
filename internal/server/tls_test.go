package server

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/testpki"
	"github.com/malachi-log/malachi/internal/wire"
)

// testCA is a certificate authority made for one test.
type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	return &testCA{testpki.NewCA(t, name)}
}

func (ca *testCA) pool() *x509.CertPool { return ca.Pool() }

// leaf describes a certificate to issue.
type leaf struct {
	name     string
	serial   int64
	client   bool          // a client certificate rather than a server one
	validFor time.Duration // from an hour ago; negative: expired
}

// issue returns a PEM certificate and key signed by ca. Server
// certificates name 127.0.0.1 and localhost.
func (ca *testCA) issue(t *testing.T, l leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.Issue(t, l.spec())
}

func (l leaf) spec() testpki.Leaf {
	if l.validFor == 0 {
		l.validFor = 24 * time.Hour
	}
	start := time.Now().Add(-time.Hour)
	s := testpki.Leaf{CommonName: l.name, Serial: max(l.serial, 2), NotBefore: start, NotAfter: start.Add(l.validFor)}
	if l.validFor < 0 {
		s.NotBefore, s.NotAfter = start.Add(-24*time.Hour), start
	}
	if l.client {
		s.Usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		s.IPs, s.DNSNames = testpki.LocalhostIPs, testpki.LocalhostNames
	}
	return s
}

// clientCert is a tls.Certificate for a client.
func (ca *testCA) clientCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	return ca.KeyPair(t, leaf{name: name, client: true}.spec())
}

// writeFile replaces path with data through a rename, as certificate
// tooling does, so a reader never sees half a file.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsFilesFor writes a server certificate from ca and returns a Config
// naming the files.
func tlsFilesFor(t *testing.T, ca *testCA, l leaf) Config {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{TLSCertFile: filepath.Join(dir, "cert.pem"), TLSKeyFile: filepath.Join(dir, "key.pem")}
	c, k := ca.issue(t, l)
	writeFile(t, cfg.TLSCertFile, c)
	writeFile(t, cfg.TLSKeyFile, k)
	return cfg
}

// dialTLS connects with TLS and completes the handshake.
func dialTLS(t *testing.T, s *Server, cfg *tls.Config) (*client, *tls.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := tls.DialWithDialer(&d, "tcp", s.Addr().String(), cfg)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}, nc, nil
}

func mustDialTLS(t *testing.T, s *Server, cfg *tls.Config) (*client, *tls.Conn) {
	t.Helper()
	c, tc, err := dialTLS(t, s, cfg)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	return c, tc
}

// roundTrip authenticates, produces n records to a new topic and fetches
// them back.
func (c *client) roundTrip(topic string, n int) {
	c.t.Helper()
	c.auth()
	c.createTopic(2, topic)
	recs := make([]wire.Record, n)
	for i := range recs {
		recs[i] = wire.Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}
	}
	c.request(3, &wire.ProduceRequest{Topic: &topic, Records: recs})
	var cr wire.CountResponse
	if err := cr.Decode(c.answer(3)); err != nil || int(cr.Count) != n {
		c.t.Fatalf("produce answered %d (%v)", cr.Count, err)
	}
	c.request(4, &wire.FetchRequest{Topic: &topic, Max: uint32(n)})
	var fr wire.FetchResponse
	if err := fr.Decode(c.answer(4)); err != nil {
		c.t.Fatal(err)
	}
	if len(fr.Records) != n {
		c.t.Fatalf("fetched %d records, want %d", len(fr.Records), n)
	}
	for i, r := range fr.Records {
		if string(r.Value) != strconv.Itoa(i) {
			c.t.Fatalf("record %d is %q", i, r.Value)
		}
	}
}

// serial returns the serial number of the certificate the server showed.
func serial(tc *tls.Conn) int64 {
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestTLSRoundTrip: a TLS client completes a TLS 1.3 handshake against a
// certificate from a CA it trusts and produces and fetches; the server
// records the handshake; a TLS 1.2 client is served too, one that offers
// only TLS 1.1 is not; and a plaintext client shares the port.
func TestTLSRoundTrip(t *testing.T) {
	ca := newTestCA(t, "test CA")
	s := serveOn(t, tlsFilesFor(t, ca, leaf{name: "node"}), loopbackListener(t))

	c, tc := mustDialTLS(t, s, &tls.Config{RootCAs: ca.pool()})
	if v := tc.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Fatalf("negotiated %s, want TLS 1.3", tls.VersionName(v))
	}
	c.roundTrip("secure", 20)
	st := onlyConn(t, s).tlsState()
	if st == nil || !st.HandshakeComplete || st.Version != tls.VersionTLS13 || len(st.PeerCertificates) != 0 {
		t.Fatalf("server-side TLS state %+v", st)
	}

	c12, tc12 := mustDialTLS(t, s, &tls.Config{RootCAs: ca.pool(), MaxVersion: tls.VersionTLS12})
	if v := tc12.ConnectionState().Version; v != tls.VersionTLS12 {
		t.Fatalf("negotiated %s, want TLS 1.2", tls.VersionName(v))
	}
	c12.auth()
	if _, _, err := dialTLS(t, s, &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("a TLS 1.1 handshake succeeded")
	}

	p := dialPlain(t, s)
	p.auth()
	p.request(2, &wire.StatusRequest{})
	p.answer(2)
	if got := s.Stats().TLSHandshakeErrors; got != 1 {
		t.Fatalf("TLSHandshakeErrors = %d, want 1 (the TLS 1.1 client)", got)
	}
}

// TestTLSOnlyRefusesPlaintext: with TLSOnly a plaintext client is
// answered tls_required on correlation id 0 and closed, before anything
// it sent is acted on; TLS clients are served.
func TestTLSOnlyRefusesPlaintext(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cfg := tlsFilesFor(t, ca, leaf{name: "node"})
	cfg.TLSOnly = true
	s := serveOn(t, cfg, loopbackListener(t))

	p := dialPlain(t, s)
	user, pass := "admin", "admin123"
	p.request(1, &wire.AuthRequest{User: &user, Password: &pass})
	p.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	body, err := wire.ReadFrame(p.br, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	corr, code, payload, _ := wire.ParseResponse(body)
	if reason, _ := wire.DecodeError(payload); corr != 0 || code != wire.CodeError || reason != wire.ReasonTLSRequired {
		t.Fatalf("plaintext client got corr %d code %d %q", corr, code, reason)
	}
	if _, err := wire.ReadFrame(p.br, 0, nil); err == nil {
		t.Fatal("the plaintext connection is still open")
	}
	if got := s.Stats().PlaintextRefused; got != 1 {
		t.Fatalf("PlaintextRefused = %d", got)
	}

	c, _ := mustDialTLS(t, s, &tls.Config{RootCAs: ca.pool()})
	c.roundTrip("secure", 3)
}

// TestTLSReloadKeepsOpenConnections: a new certificate, installed by
// ReloadTLS (the SIGHUP path) or noticed by the file watcher, is served
// to new handshakes while a connection opened before keeps working on
// its original session. A reload that fails keeps the last good pair.
func TestTLSReloadKeepsOpenConnections(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cfg := tlsFilesFor(t, ca, leaf{name: "node", serial: 10})
	cfg.TLSReloadInterval = 10 * time.Millisecond
	s := serveOn(t, cfg, loopbackListener(t))
	trust := &tls.Config{RootCAs: ca.pool()}

	old, oldTC := mustDialTLS(t, s, trust)
	old.auth()
	if serial(oldTC) != 10 {
		t.Fatalf("first certificate has serial %d", serial(oldTC))
	}
	corr := uint32(2)
	stillServes := func() {
		t.Helper()
		old.request(corr, &wire.StatusRequest{})
		old.answer(corr)
		corr++
	}

	// The watcher notices changed files.
	c, k := ca.issue(t, leaf{name: "node", serial: 11})
	writeFile(t, cfg.TLSKeyFile, k)
	writeFile(t, cfg.TLSCertFile, c)
	waitFor(t, "the watcher to load serial 11", func() {}, func() bool {
		_, tc := mustDialTLS(t, s, trust)
		defer tc.Close()
		return serial(tc) == 11
	})
	stillServes()

	// A pair that does not match fails to load; the last good one stays.
	c, _ = ca.issue(t, leaf{name: "node", serial: 12})
	writeFile(t, cfg.TLSCertFile, c)
	if err := s.ReloadTLS(); err == nil {
		t.Fatal("ReloadTLS accepted a certificate with another certificate's key")
	}
	if s.Stats().TLSReloadErrors == 0 {
		t.Fatal("the failed reload was not counted")
	}
	_, tc := mustDialTLS(t, s, trust)
	if serial(tc) != 11 {
		t.Fatalf("after a failed reload the server shows serial %d, want 11", serial(tc))
	}
	stillServes()

	// ReloadTLS, as on SIGHUP. The watcher is stopped by nothing here:
	// either may load the pair first.
	c, k = ca.issue(t, leaf{name: "node", serial: 13})
	writeFile(t, cfg.TLSKeyFile, k)
	writeFile(t, cfg.TLSCertFile, c)
	if err := s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	_, tc = mustDialTLS(t, s, trust)
	if serial(tc) != 13 {
		t.Fatalf("after ReloadTLS the server shows serial %d, want 13", serial(tc))
	}
	stillServes()
	if serial(oldTC) != 10 {
		t.Fatal("the open connection's session changed")
	}
}

// TestTLSClientRefusesUntrustedCertificates: a client that trusts another
// CA, or gets an expired certificate, refuses the handshake; the node
// keeps serving clients that trust it.
func TestTLSClientRefusesUntrustedCertificates(t *testing.T) {
	ca := newTestCA(t, "test CA")
	other := newTestCA(t, "other CA")
	s := serveOn(t, tlsFilesFor(t, ca, leaf{name: "node"}), loopbackListener(t))

	_, _, err := dialTLS(t, s, &tls.Config{RootCAs: other.pool()})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("a client trusting another CA got %v, want an unknown authority error", err)
	}
	c, _ := mustDialTLS(t, s, &tls.Config{RootCAs: ca.pool()})
	c.auth()

	expired := serveOn(t, tlsFilesFor(t, ca, leaf{name: "node", validFor: -1}), loopbackListener(t))
	_, _, err = dialTLS(t, expired, &tls.Config{RootCAs: ca.pool()})
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Fatalf("a client shown an expired certificate got %v, want an expired certificate error", err)
	}
}

// TestTLSClientCertificates: with a client CA the server verifies a
// client certificate that is presented and exposes the verified chain to
// authentication; a client without one still connects (to authenticate
// with a password or a token); one whose certificate another CA signed
// is refused.
func TestTLSClientCertificates(t *testing.T) {
	ca := newTestCA(t, "test CA")
	clients := newTestCA(t, "client CA")
	rogue := newTestCA(t, "rogue CA")
	cfg := tlsFilesFor(t, ca, leaf{name: "node"})
	cfg.TLSClientCAFile = filepath.Join(t.TempDir(), "clients.pem")
	writeFile(t, cfg.TLSClientCAFile, clients.PEM)
	s := serveOn(t, cfg, loopbackListener(t))
	if !s.verifiesClientCerts() {
		t.Fatal("verifiesClientCerts is false with a client CA")
	}

	t.Run("verified", func(t *testing.T) {
		c, _ := mustDialTLS(t, s, &tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{clients.clientCert(t, "alice")}})
		c.auth()
		st := onlyConn(t, s).tlsState()
		if st == nil || len(st.VerifiedChains) == 0 || st.VerifiedChains[0][0].Subject.CommonName != "alice" {
			t.Fatalf("server-side TLS state has no verified chain for alice: %+v", st)
		}
		if root := st.VerifiedChains[0][len(st.VerifiedChains[0])-1]; !root.Equal(clients.Cert) {
			t.Fatalf("chain ends at %s, want the client CA", root.Subject)
		}
		c.nc.Close()
		waitFor(t, "the connection to end", func() {}, func() bool { return connCount(s) == 0 })
	})
	t.Run("no certificate", func(t *testing.T) {
		c, _ := mustDialTLS(t, s, &tls.Config{RootCAs: ca.pool()})
		c.roundTrip("nocert", 2)
		st := onlyConn(t, s).tlsState()
		if st == nil || len(st.PeerCertificates) != 0 || len(st.VerifiedChains) != 0 {
			t.Fatalf("server-side TLS state %+v", st)
		}
		c.nc.Close()
		waitFor(t, "the connection to end", func() {}, func() bool { return connCount(s) == 0 })
	})
	t.Run("rogue certificate", func(t *testing.T) {
		before := s.Stats().TLSHandshakeErrors
		// Go's client leaves out a certificate the server's list of CAs
		// does not name; GetClientCertificate sends it regardless. In TLS
		// 1.3 the client's handshake ends before the server has checked
		// it: the refusal arrives on the first read.
		cert := rogue.clientCert(t, "mallory")
		c, _, err := dialTLS(t, s, &tls.Config{RootCAs: ca.pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		}})
		if err == nil {
			user, pass := "admin", "admin123"
			c.request(1, &wire.AuthRequest{User: &user, Password: &pass})
			c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = wire.ReadFrame(c.br, 0, nil)
		}
		if err == nil {
			t.Fatal("a client certificate from another CA was accepted")
		}
		waitFor(t, "the failed handshake to be counted", func() {}, func() bool { return s.Stats().TLSHandshakeErrors > before })
	})
}

// TestTLSHandshakeTimesOut: a client that starts a TLS record and stalls
// is closed at the auth timeout, like one that never authenticates.
func TestTLSHandshakeTimesOut(t *testing.T) {
	ca := newTestCA(t, "test CA")
	cfg := tlsFilesFor(t, ca, leaf{name: "node"})
	cfg.AuthTimeout = 200 * time.Millisecond
	s := serveOn(t, cfg, loopbackListener(t))
	for _, first := range [][]byte{{recordTypeHandshake}, nil} {
		c := dialPlain(t, s)
		if _, err := c.nc.Write(first); err != nil {
			t.Fatal(err)
		}
		c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.br.ReadByte(); err == nil {
			t.Fatal("the server sent something")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the server did not close the stalled connection")
		}
	}
	waitFor(t, "the connections to end", func() {}, func() bool { return connCount(s) == 0 })
}

// TestConfigValidation: Listen refuses settings out of range, naming them.
func TestConfigValidation(t *testing.T) {
	ca := newTestCA(t, "test CA")
	files := tlsFilesFor(t, ca, leaf{name: "node"})
	for name, cfg := range map[string]Config{
		"tiny frame":               {MaxFrame: 100},
		"pre-auth above the frame": {MaxFrame: 64 << 10, MaxPreAuthFrame: 128 << 10},
		"pre-auth of 32 MiB":       {MaxFrame: 64 << 20, MaxPreAuthFrame: 32 << 20},
		"tiny budget":              {MaxConnBytes: 1 << 10},
		"negative timeout":         {IdleTimeout: -time.Second},
		"negative in-flight":       {MaxInFlight: -1},
		"cert without key":         {TLSCertFile: files.TLSCertFile},
		"tls-only without cert":    {TLSOnly: true},
		"client CA without cert":   {TLSClientCAFile: files.TLSCertFile},
		"missing cert file":        {TLSCertFile: files.TLSCertFile + ".missing", TLSKeyFile: files.TLSKeyFile},
		"client CA not PEM":        {TLSCertFile: files.TLSCertFile, TLSKeyFile: files.TLSKeyFile, TLSClientCAFile: files.TLSKeyFile},
	} {
		cfg.Addr = "127.0.0.1:0"
		s := New(cfg, nil)
		if err := s.Listen(); err == nil {
			s.ln.Close()
			t.Errorf("%s: Listen accepted %+v", name, cfg)
		}
	}
	files.Addr = "127.0.0.1:0"
	s := New(files, nil)
	if err := s.Listen(); err != nil {
		t.Fatalf("a valid TLS configuration: %v", err)
	}
	s.Shutdown(t.Context())
}
