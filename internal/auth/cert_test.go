package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/auth/authtest"
)

func state(chain ...tls.Certificate) *tls.ConnectionState {
	st := &tls.ConnectionState{}
	for _, c := range chain {
		st.PeerCertificates = append(st.PeerCertificates, c.Leaf)
	}
	return st
}

func TestVerifiedLeaf(t *testing.T) {
	ca, evil := authtest.NewCA(t, "ca"), authtest.NewCA(t, "evil")
	good := ca.Issue(t, authtest.Leaf{CN: "alice"})
	now := time.Now()
	expired := ca.Issue(t, authtest.Leaf{CN: "alice", NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	future := ca.Issue(t, authtest.Leaf{CN: "alice", NotBefore: now.Add(time.Hour)})
	forged := evil.Issue(t, authtest.Leaf{CN: "alice"})
	server := ca.Issue(t, authtest.Leaf{CN: "alice", Server: true})

	if leaf, err := VerifiedLeaf(state(good), ca.Pool(), now); err != nil || leaf.Subject.CommonName != "alice" {
		t.Fatalf("good certificate: %v", err)
	}
	// A chain the handshake verified is trusted without roots here.
	verified := state(good)
	verified.VerifiedChains = [][]*x509.Certificate{{good.Leaf, ca.Cert}}
	if _, err := VerifiedLeaf(verified, nil, now); err != nil {
		t.Fatalf("handshake-verified chain: %v", err)
	}
	for name, tt := range map[string]struct {
		st    *tls.ConnectionState
		roots *x509.CertPool
		want  error
	}{
		"no state":       {nil, ca.Pool(), ErrNoCertificate},
		"no certificate": {state(), ca.Pool(), ErrNoCertificate},
		"no roots":       {state(good), nil, ErrUnverifiedCert},
		"expired":        {state(expired), ca.Pool(), ErrUnverifiedCert},
		"not yet valid":  {state(future), ca.Pool(), ErrUnverifiedCert},
		"wrong CA":       {state(forged), ca.Pool(), ErrUnverifiedCert},
		"server usage":   {state(server), ca.Pool(), ErrUnverifiedCert},
		"expired, marked": {func() *tls.ConnectionState {
			s := state(expired)
			s.VerifiedChains = [][]*x509.Certificate{{expired.Leaf}}
			return s
		}(), nil, ErrUnverifiedCert},
	} {
		if _, err := VerifiedLeaf(tt.st, tt.roots, now); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", name, err, tt.want)
		}
	}
}

func TestCertUser(t *testing.T) {
	ca := authtest.NewCA(t, "ca")
	c := ca.Issue(t, authtest.Leaf{
		CN: "alice", Emails: []string{"bob@example.com", "x@example.com"},
		DNS: []string{"carol.svc"}, URIs: []string{"spiffe://example.org/ns/prod/sa/dave"},
	}).Leaf
	for rule, want := range map[string]string{
		"": "alice", CertRuleCN: "alice", CertRuleSANEmail: "bob@example.com",
		CertRuleSANDNS: "carol.svc", CertRuleSANURI: "spiffe://example.org/ns/prod/sa/dave",
	} {
		if got, err := CertUser(c, rule); got != want || err != nil {
			t.Errorf("rule %q: %q, %v; want %q", rule, got, err, want)
		}
	}
	bare := ca.Issue(t, authtest.Leaf{}).Leaf
	for _, rule := range []string{CertRuleCN, CertRuleSANEmail, CertRuleSANDNS, CertRuleSANURI, "san:ip"} {
		if _, err := CertUser(bare, rule); !errors.Is(err, ErrUnmappedCert) {
			t.Errorf("rule %q on a bare certificate: %v", rule, err)
		}
	}
	if !ValidCertRule("san:uri") || ValidCertRule("san:ip") || ValidCertRule("") {
		t.Error("ValidCertRule")
	}
}
