package e2e

// Nodes started with --peer-tls-cert/--peer-tls-key/--peer-tls-ca talk to
// each other over mutual TLS only, each with a certificate of its own; the
// cluster forms and replicates over it as it does in the clear.

import (
	"context"
	"crypto/x509"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/testpki"
)

// peerCertFiles writes the certificate and key of node id, signed by ca:
// it names the node (the common name node-<id> and the URI SAN
// malachi-node://<id>) and the address it is dialled at, 127.0.0.1, for
// both ends of a connection.
func peerCertFiles(t *testing.T, ca *testpki.CA, dir string, id int) (cert, key string) {
	t.Helper()
	name := "node-" + strconv.Itoa(id)
	c, k := ca.Issue(t, testpki.Leaf{
		CommonName: name,
		IPs:        testpki.LocalhostIPs,
		URIs:       []*url.URL{{Scheme: "malachi-node", Host: strconv.Itoa(id)}},
		Usage:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	return testpki.WriteFile(t, dir, name+".pem", c), testpki.WriteFile(t, dir, name+"-key.pem", k)
}

// TestClusterOverPeerTLS forms three nodes over mutual TLS and replicates
// a topic created through one to the others.
func TestClusterOverPeerTLS(t *testing.T) {
	ca := testpki.NewCA(t, "test peer CA")
	dir := t.TempDir()
	caFile := testpki.WriteFile(t, dir, "ca.pem", ca.PEM)
	c := startClusterEach(t, 3, func(id int) []string {
		cert, key := peerCertFiles(t, ca, dir, id)
		return []string{"--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", caFile}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writableThrough(t, ctx, c, "over-tls", 3, []int{1, 2, 3})
}
