package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDevCerts: the chain verifies for the usages each certificate is
// for, and no other; the server certificate names the loopback addresses
// and --host; the client certificate names --client-user; keys are
// ECDSA P-256 and readable by the owner only.
func TestDevCerts(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := filepath.Join(t.TempDir(), "certs")
	c.ok("dev-certs", dir, "--host", "broker.internal", "--host", "10.0.0.5", "--client-user", "alice")

	for _, name := range devCertFiles {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "-key.pem") && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
		if fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s: mode %v is writable by others", name, fi.Mode().Perm())
		}
	}
	ca := readCert(t, filepath.Join(dir, devCA))
	server := readCert(t, filepath.Join(dir, devServer))
	client := readCert(t, filepath.Join(dir, devClient))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if !ca.IsCA {
		t.Fatal("ca.pem is not a CA")
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1", "broker.internal", "10.0.0.5"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "elsewhere.example"}); err == nil {
		t.Error("server certificate verifies for a name it was not made for")
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if client.Subject.CommonName != "alice" {
		t.Errorf("client certificate CN %q, want alice", client.Subject.CommonName)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("the client certificate also serves as a server certificate")
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the server certificate also serves as a client certificate")
	}
	for _, cert := range []*x509.Certificate{ca, server, client} {
		if k, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", cert.Subject.CommonName, cert.PublicKey)
		}
	}
}

// TestDevCertsRefusesToOverwrite: a second run changes nothing unless
// --force, and --force leaves keys 0600 even where a file was looser.
func TestDevCertsRefusesToOverwrite(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := t.TempDir()
	c.ok("dev-certs", dir)
	before := map[string][]byte{}
	for _, name := range devCertFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		before[name] = b
	}
	if stderr := c.fails(1, "dev-certs", dir); !strings.Contains(stderr, "--force") {
		t.Fatalf("second run: %q", stderr)
	}
	for _, name := range devCertFiles {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(b, before[name]) {
			t.Fatalf("%s changed without --force", name)
		}
	}

	// One file alone is enough to refuse, and nothing else is written.
	lone := t.TempDir()
	if err := os.WriteFile(filepath.Join(lone, devClientKey), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.fails(1, "dev-certs", lone)
	if _, err := os.Stat(filepath.Join(lone, devCA)); err == nil {
		t.Fatal("a refused run wrote ca.pem")
	}

	key := filepath.Join(dir, devServerKey)
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("dev-certs", dir, "--force")
	if b, _ := os.ReadFile(filepath.Join(dir, devCAKey)); bytes.Equal(b, before[devCAKey]) {
		t.Fatal("--force did not write a new CA key")
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key after --force over a 0644 file: %v, %v", fi.Mode(), err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".dev-certs-*")); len(matches) != 0 {
		t.Fatalf("temporary files left behind: %v", matches)
	}
}
