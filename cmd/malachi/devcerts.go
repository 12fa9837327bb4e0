package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// The files dev-certs writes, in the order it reports them.
const (
	devCA        = "ca.pem"
	devCAKey     = "ca-key.pem"
	devServer    = "server.pem"
	devServerKey = "server-key.pem"
	devClient    = "client.pem"
	devClientKey = "client-key.pem"
	certFileMode = 0o644
	keyFileMode  = 0o600
)

var devCertFiles = []string{devCA, devCAKey, devServer, devServerKey, devClient, devClientKey}

// devCertsOptions are what dev-certs may vary.
type devCertsOptions struct {
	hosts      []string // extra server names or IP addresses
	clientUser string   // CN of the client certificate
	days       int
	force      bool
}

func newDevCertsCmd() *cobra.Command {
	o := devCertsOptions{}
	cmd := &cobra.Command{
		Use:   "dev-certs DIR",
		Short: "Write a development CA with a server and a client certificate",
		Long: `Write, into DIR, a certificate authority and two certificates it signs, for
trying TLS and mutual TLS on a development machine:

  ca.pem, ca-key.pem          the CA; clients trust ca.pem, servers check
                              client certificates against it
  server.pem, server-key.pem  for localhost, 127.0.0.1 and ::1, plus --host
  client.pem, client-key.pem  for the user --client-user (its CN), for --auth mtls

Keys are ECDSA P-256, written readable by you only. Existing files are not
overwritten without --force. This is no substitute for certificates from your
organisation's CA in production.`,
		Example: `  malachi dev-certs ./certs
  malachi dev-certs ./certs --host broker.internal --host 10.0.0.5 --client-user alice --force
  malachi status --tls-ca ./certs/ca.pem --tls-cert ./certs/client.pem --tls-key ./certs/client-key.pem --auth mtls`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.clientUser == "" {
				return usageErr("--client-user may not be empty")
			}
			if o.days <= 0 {
				return usageErr("--days must be positive")
			}
			dir := args[0]
			if err := writeDevCerts(dir, o, time.Now()); err != nil {
				return &exitError{code: 1, err: err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s: %s\n", safeText(dir), strings.Join(devCertFiles, ", "))
			p := func(name string) string { return safeText(filepath.Join(dir, name)) }
			fmt.Fprintf(cmd.ErrOrStderr(), `next:
  malachi serve --dev --tls-cert %s --tls-key %s --tls-client-ca %s
  malachi status --tls-ca %s
  malachi status --tls-ca %s --tls-cert %s --tls-key %s --auth mtls   (as %s, on a node with mtls_auth on)
`, p(devServer), p(devServerKey), p(devCA), p(devCA), p(devCA), p(devClient), p(devClientKey), safeText(o.clientUser))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&o.hosts, "host", nil, "another DNS name or IP address for the server certificate (repeatable)")
	fl.StringVar(&o.clientUser, "client-user", "admin", "the user the client certificate names (its subject CN)")
	fl.IntVar(&o.days, "days", 365, "how many days the certificates are valid")
	fl.BoolVar(&o.force, "force", false, "overwrite existing files")
	return cmd
}

// writeDevCerts generates the CA and both certificates and writes them
// into dir. Without o.force it writes nothing if any of the files exists.
func writeDevCerts(dir string, o devCertsOptions, now time.Time) error {
	if !o.force {
		var existing []string
		for _, name := range devCertFiles {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				existing = append(existing, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if len(existing) > 0 {
			return fmt.Errorf("%s already holds %s: pass --force to overwrite", dir, strings.Join(existing, ", "))
		}
	}
	files, err := generateDevCerts(o, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range devCertFiles {
		mode := os.FileMode(certFileMode)
		if strings.HasSuffix(name, "-key.pem") {
			mode = keyFileMode
		}
		if err := writeNewFile(filepath.Join(dir, name), files[name], mode, o.force); err != nil {
			return err
		}
	}
	return nil
}

// writeNewFile writes data to path with exactly mode. The data goes to a
// temporary file first, made with mode before any byte is written, so a
// key is never readable by others, not even for a moment and not even
// when it replaces a file with looser permissions. Without replace, an
// existing path is an error and is left alone.
func writeNewFile(path string, data []byte, mode os.FileMode, replace bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dev-certs-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed or linked and removed
	err = tmp.Chmod(mode)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if replace {
		return os.Rename(tmp.Name(), path)
	}
	// A hard link fails if path exists, where a rename would replace it.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s already exists: pass --force to overwrite", path)
		}
		return err
	}
	return nil
}

// generateDevCerts returns the PEM contents of each file.
func generateDevCerts(o devCertsOptions, now time.Time) (map[string][]byte, error) {
	// Back-date a little, so that a machine whose clock is slightly
	// behind still accepts certificates made a moment ago.
	notBefore := now.Add(-time.Hour)
	notAfter := now.AddDate(0, 0, o.days)
	files := map[string][]byte{}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Malachi development CA", Organization: []string{"Malachi development"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		// The CA signs leaves only, never another CA.
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := signCert(ca, ca, caKey, caKey, files, devCA, devCAKey)
	if err != nil {
		return nil, err
	}
	ca, err = x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost", Organization: []string{"Malachi development"}},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range o.hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else if h != "" {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := signLeaf(server, ca, caKey, files, devServer, devServerKey); err != nil {
		return nil, err
	}

	clientCert := &x509.Certificate{
		Subject:     pkix.Name{CommonName: o.clientUser, Organization: []string{"Malachi development"}},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := signLeaf(clientCert, ca, caKey, files, devClient, devClientKey); err != nil {
		return nil, err
	}
	return files, nil
}

// signLeaf makes a key for tmpl and has the CA sign it.
func signLeaf(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, files map[string][]byte, certName, keyName string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	_, err = signCert(tmpl, ca, key, caKey, files, certName, keyName)
	return err
}

// signCert has signer sign tmpl, for key's public half, with a random
// serial number, stores the certificate and key as PEM in files and
// returns the certificate's DER.
func signCert(tmpl, parent *x509.Certificate, key, signer *ecdsa.PrivateKey, files map[string][]byte, certName, keyName string) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	files[certName] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	files[keyName] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return der, nil
}
