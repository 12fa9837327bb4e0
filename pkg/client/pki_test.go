package client

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/malachi-log/malachi/internal/testpki"
)

// testPKI is a throwaway certificate authority with a server certificate
// for localhost and 127.0.0.1 and a client certificate, written as PEM
// files as an operator would have them.
type testPKI struct {
	caFile                        string
	serverCertFile, serverKeyFile string
	clientCert, clientKey         string
	server                        tls.Certificate
	pool                          *x509.CertPool
}

func newTestPKI(t *testing.T, clientCN string) *testPKI {
	t.Helper()
	ca := testpki.NewCA(t, "test CA")
	dir := t.TempDir()
	p := &testPKI{pool: ca.Pool(), caFile: testpki.WriteFile(t, dir, "ca.pem", ca.PEM)}
	c, k := ca.Issue(t, testpki.Leaf{CommonName: "localhost", IPs: testpki.LocalhostIPs, DNSNames: testpki.LocalhostNames})
	p.serverCertFile, p.serverKeyFile = testpki.WriteFile(t, dir, "server.pem", c), testpki.WriteFile(t, dir, "server-key.pem", k)
	var err error
	if p.server, err = tls.X509KeyPair(c, k); err != nil {
		t.Fatal(err)
	}
	c, k = ca.Issue(t, testpki.Leaf{CommonName: clientCN, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	p.clientCert, p.clientKey = testpki.WriteFile(t, dir, "client.pem", c), testpki.WriteFile(t, dir, "client-key.pem", k)
	return p
}

// serverConfig is the fake broker's side: the server certificate, and
// client certificates verified against the CA when presented (as a
// broker with mtls_auth enabled does).
func (p *testPKI) serverConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientCAs:    p.pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	}
}
