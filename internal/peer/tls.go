package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
)

// LoadMutualTLS builds the TLS configuration of --peer-tls-cert,
// --peer-tls-key and --peer-tls-ca: this node's certificate and key
// (PEM), presented both when dialling and when accepting, and the CA
// (PEM, one or more certificates) that every peer's certificate must
// chain to, in both directions. A dialled peer's certificate must also
// name the host of the address it was dialled at, so a node's
// certificate carries both server and client authentication and names
// its advertised peer host. It must also name the node's id (NodeURI),
// unless Config.TLSAnyNodeID.
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

// NodeURI is the URI subject alternative name that binds a certificate
// to a node id: malachi-node://<id>. A node's certificate carries it (or,
// for certificates made by hand, the subject common name node-<id>), so
// that a peer holding a certificate of the cluster's CA cannot claim
// another node's id in its handshake.
func NodeURI(node uint64) *url.URL {
	return &url.URL{Scheme: nodeURIScheme, Host: strconv.FormatUint(node, 10)}
}

const nodeURIScheme = "malachi-node"

// certNamesNode reports whether cert names node: a URI SAN NodeURI(node)
// or the subject common name node-<id>.
func certNamesNode(cert *x509.Certificate, node uint64) bool {
	id := strconv.FormatUint(node, 10)
	for _, u := range cert.URIs {
		if u.Scheme == nodeURIScheme && u.Host == id && (u.Path == "" || u.Path == "/") {
			return true
		}
	}
	return cert.Subject.CommonName == "node-"+id
}

// checkPeerNode refuses a TLS peer whose certificate does not name node.
// conn is not a TLS connection when TLS is off: nothing to check.
func checkPeerNode(cfg Config, conn net.Conn, node uint64) error {
	tc, ok := conn.(*tls.Conn)
	if !ok || cfg.TLSAnyNodeID {
		return nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 || !certNamesNode(certs[0], node) {
		return fmt.Errorf("the certificate does not name node %d (want the URI SAN %s or the common name node-%d)",
			node, NodeURI(node), node)
	}
	return nil
}

// checkMutualTLS refuses a configuration that would let either side of
// a connection go unverified: no certificate, no verification of either
// side, a per-connection configuration (GetConfigForClient could return
// one without verification, and re-checking it per handshake would only
// move the failure to run time), or a protocol version below TLS 1.2.
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
	case c.GetConfigForClient != nil:
		return errors.New("peer: TLS must not set GetConfigForClient: every connection uses the one verified configuration")
	case c.MinVersion != 0 && c.MinVersion < tls.VersionTLS12, c.MaxVersion != 0 && c.MaxVersion < tls.VersionTLS12:
		return errors.New("peer: TLS versions below 1.2 are refused")
	}
	return nil
}
