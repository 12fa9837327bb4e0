package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"
)

// Rules that pick the user name out of a verified client certificate.
const (
	CertRuleCN       = "cn"        // the subject's common name (the default)
	CertRuleSANEmail = "san:email" // the first email address SAN
	CertRuleSANDNS   = "san:dns"   // the first DNS name SAN
	CertRuleSANURI   = "san:uri"   // the first URI SAN, e.g. a SPIFFE id
)

// Errors of client-certificate authentication.
var (
	ErrNoCertificate  = errors.New("auth: no client certificate")
	ErrUnverifiedCert = errors.New("auth: client certificate not verified")
	ErrUnmappedCert   = errors.New("auth: client certificate names no user")
)

// ValidCertRule reports whether rule is one of the CertRule constants.
func ValidCertRule(rule string) bool {
	switch rule {
	case CertRuleCN, CertRuleSANEmail, CertRuleSANDNS, CertRuleSANURI:
		return true
	}
	return false
}

// VerifiedLeaf returns the client certificate of a TLS connection once it
// is known to chain to a trusted CA and to be valid at now. A chain the
// TLS handshake verified is trusted as it stands; otherwise, when roots is
// set, the chain the client sent is verified against roots here (for a
// listener that requests certificates without verifying them). With
// neither, the certificate is refused: an unverified certificate proves
// nothing.
func VerifiedLeaf(state *tls.ConnectionState, roots *x509.CertPool, now time.Time) (*x509.Certificate, error) {
	if state == nil || len(state.PeerCertificates) == 0 {
		return nil, ErrNoCertificate
	}
	leaf := state.PeerCertificates[0]
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, ErrUnverifiedCert
	}
	if len(state.VerifiedChains) > 0 {
		return state.VerifiedChains[0][0], nil
	}
	if roots == nil {
		return nil, ErrUnverifiedCert
	}
	inter := x509.NewCertPool()
	for _, c := range state.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, errors.Join(ErrUnverifiedCert, err)
	}
	return leaf, nil
}

// CertUser returns the user name rule picks from cert. A rule naming a SAN
// kind takes the first SAN of that kind; a certificate without one (or
// with an empty common name, for "cn") maps to no user.
func CertUser(cert *x509.Certificate, rule string) (string, error) {
	var name string
	switch rule {
	case CertRuleCN, "":
		name = cert.Subject.CommonName
	case CertRuleSANEmail:
		name = first(cert.EmailAddresses)
	case CertRuleSANDNS:
		name = first(cert.DNSNames)
	case CertRuleSANURI:
		if len(cert.URIs) > 0 {
			name = cert.URIs[0].String()
		}
	}
	if name == "" {
		return "", ErrUnmappedCert
	}
	return name, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
