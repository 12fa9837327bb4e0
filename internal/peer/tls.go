package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadMutualTLS builds the TLS configuration of --peer-tls-cert,
// --peer-tls-key and --peer-tls-ca: this node's certificate and key
// (PEM), presented both when dialling and when accepting, and the CA
// (PEM, one or more certificates) that every peer's certificate must
// chain to, in both directions. A dialled peer's certificate must also
// name the host of the address it was dialled at, so a node's
// certificate carries both server and client authentication and names
// its advertised peer host.
func LoadMutualTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("peer: loading the certificate and key: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("peer: reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("peer: %s holds no PEM certificate", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// checkMutualTLS refuses a configuration that would let either side of
// a connection go unverified.
func checkMutualTLS(c *tls.Config) error {
	switch {
	case c == nil:
		return nil
	case len(c.Certificates) == 0 && c.GetCertificate == nil:
		return errors.New("peer: TLS needs this node's certificate")
	case c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs == nil:
		return errors.New("peer: TLS must require and verify peers' certificates (ClientAuth and ClientCAs)")
	case c.RootCAs == nil || c.InsecureSkipVerify:
		return errors.New("peer: TLS must verify the certificates of dialled peers (RootCAs)")
	}
	return nil
}
