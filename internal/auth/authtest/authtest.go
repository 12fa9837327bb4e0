// Package authtest makes credentials for tests: a certificate authority
// that issues client and server certificates, and token signing keys with
// their JSON Web Key Set.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA returns a fresh self-signed CA valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf describes a certificate to issue. Zero NotBefore/NotAfter mean
// valid from an hour ago for a day.
type Leaf struct {
	CN                  string
	Emails, DNS         []string
	URIs                []string
	IPs                 []net.IP
	NotBefore, NotAfter time.Time
	Server              bool // server auth usage instead of client auth
}

// Issue signs a certificate for l.
func (ca *CA) Issue(t testing.TB, l Leaf) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageClientAuth
	if l.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: l.CN},
		NotBefore: l.NotBefore, NotAfter: l.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		EmailAddresses: l.Emails, DNSNames: l.DNS, IPAddresses: l.IPs,
	}
	for _, u := range l.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// WriteCA writes the CA certificate as PEM into dir and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir string) string {
	t.Helper()
	return writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Cert.Raw)
}

// WritePair writes c's certificate and key as PEM files named name.pem
// and name.key in dir and returns their paths.
func WritePair(t testing.TB, dir, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", c.Certificate[0]),
		writePEM(t, filepath.Join(dir, name+".key"), "PRIVATE KEY", der)
}

func writePEM(t testing.TB, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// Signer is a token signing key.
type Signer struct {
	Kid    string
	Method jwt.SigningMethod
	Key    crypto.Signer
}

// NewSigners returns one RS256, one ES256 and one EdDSA signer, with kids
// prefix+"rsa", prefix+"ec" and prefix+"ed".
func NewSigners(t testing.TB, prefix string) []Signer {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, dk, _ := ed25519.GenerateKey(rand.Reader)
	return []Signer{
		{prefix + "rsa", jwt.SigningMethodRS256, rk},
		{prefix + "ec", jwt.SigningMethodES256, ek},
		{prefix + "ed", jwt.SigningMethodEdDSA, dk},
	}
}

// JWKS returns the public JSON Web Key Set of signers.
func JWKS(t testing.TB, signers ...Signer) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, s := range signers {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: s.Key.Public(), KeyID: s.Kid, Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Sign returns a compact JWT of claims signed by s, with s's kid.
func (s Signer) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(s.Method, claims)
	tok.Header["kid"] = s.Kid
	out, err := tok.SignedString(s.Key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// NoneToken returns an unsigned token (alg "none") with kid.
func NoneToken(t testing.TB, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodNone, claims)
	tok.Header["kid"] = kid
	out, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// HMACToken returns an HS256 token whose secret is s's public key in DER:
// the algorithm-confusion forgery.
func HMACToken(t testing.TB, s Signer, claims jwt.MapClaims) string {
	t.Helper()
	der, _ := x509.MarshalPKIXPublicKey(s.Key.Public())
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = s.Kid
	out, err := tok.SignedString(der)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
