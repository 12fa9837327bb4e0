package e2e

// Nodes started with --peer-tls-cert/--peer-tls-key/--peer-tls-ca talk to
// each other over mutual TLS only, each with a certificate of its own; the
// cluster forms and replicates over it as it does in the clear.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// peerCA is a certificate authority that signs node certificates.
type peerCA struct {
	dir  string
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	file string // the CA certificate, PEM
}

func newPeerCA(t *testing.T) *peerCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test peer CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &peerCA{dir: t.TempDir(), key: key, cert: cert}
	ca.file = writePEM(t, ca.dir, "ca.pem", "CERTIFICATE", der)
	return ca
}

// node writes the certificate and key of node id: it names the node (the
// common name node-<id> and the URI SAN malachi-node://<id>) and the
// address it is dialled at, 127.0.0.1, for both ends of a connection.
func (ca *peerCA) node(t *testing.T, id int) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	name := "node-" + strconv.Itoa(id)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(int64(100 + id)), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:        []*url.URL{{Scheme: "malachi-node", Host: strconv.Itoa(id)}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, ca.dir, name+".pem", "CERTIFICATE", der), writePEM(t, ca.dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterOverPeerTLS forms three nodes over mutual TLS and replicates
// a topic created through one to the others.
func TestClusterOverPeerTLS(t *testing.T) {
	ca := newPeerCA(t)
	c := startClusterEach(t, 3, func(id int) []string {
		cert, key := ca.node(t, id)
		return []string{"--peer-tls-cert", cert, "--peer-tls-key", key, "--peer-tls-ca", ca.file}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writableThrough(t, ctx, c, "over-tls", 3, []int{1, 2, 3})
}
