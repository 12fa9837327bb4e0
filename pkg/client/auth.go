package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/malachi-log/malachi/internal/wire"
)

// authMethod is how a connection authenticates: its first frame.
type authMethod uint8

const (
	authNone     authMethod = iota
	authPassword            // key 0, auth: user and password
	authMTLS                // key 12, mtls_auth: the TLS client certificate
	authToken               // key 13, token_auth: a JWT
	authSession             // key 84 alone: a session token (WithSessionToken)
)

// WithTLS makes the client connect over TLS with cfg, for the first
// connection and every redial (subscriptions included). cfg is cloned at
// Dial; if its ServerName is empty, the host of the address passed to Dial
// is used, so the server certificate must name that host or IP address.
// Leave RootCAs nil to trust the system's roots, or see NewTLSConfig to
// load a private CA and a client certificate from files.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) { c.tls = cfg }
}

// WithMTLSAuth makes connections authenticate with the TLS client
// certificate (wire key 12, mtls_auth): the broker maps the verified
// certificate to a user, and no password or token is sent. It needs
// WithTLS with a client certificate (tls.Config.Certificates or
// GetClientCertificate), and a broker whose TLS listener verifies client
// certificates. If several ways to authenticate are given, the last
// applies.
func WithMTLSAuth() Option {
	return func(c *config) {
		c.auth, c.user, c.password, c.tokenSource = authMTLS, "", "", nil
	}
}

// WithToken makes connections authenticate with a JWT (wire key 13,
// token_auth) issued by the identity provider the broker trusts. The
// same token is sent on every redial; once it may have expired, use
// WithTokenSource instead. Send tokens only over TLS (WithTLS): a token is
// as good as a password until it expires.
func WithToken(jwt string) Option {
	return WithTokenSource(func(context.Context) (string, error) { return jwt, nil })
}

// WithTokenSource is WithToken with a token fetched anew for every
// connection the client makes (the first, every redial, every
// Subscription), so a long-lived client keeps working as tokens are
// renewed. src is called with the dial's context and may block, within
// the dial timeout; its error fails the dial.
func WithTokenSource(src func(ctx context.Context) (string, error)) Option {
	return func(c *config) {
		c.auth, c.user, c.password, c.tokenSource = authToken, "", "", src
	}
}

// NewTLSConfig builds a TLS configuration for WithTLS from PEM files.
// caFile holds the certificates that may sign the server's certificate;
// empty trusts the system's roots instead. certFile and keyFile are a
// client certificate and its private key, for brokers that require one and
// for WithMTLSAuth; both or neither must be given. serverName overrides
// the name the server certificate must carry (default: the host dialled).
func NewTLSConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	// TLS 1.2 is the oldest version the broker accepts, and the oldest
	// without known weaknesses in its default cipher suites.
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("malachi: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("malachi: TLS CA: no PEM certificate in %s", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("malachi: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("malachi: a TLS client certificate needs both the certificate and the key file")
	}
	return cfg, nil
}

// prepare checks the options Dial was given and fixes what redials use.
func (cfg *config) prepare(addr string) error {
	if cfg.wireVersion != 1 && cfg.wireVersion != 2 {
		return fmt.Errorf("malachi: WithWireVersion(%d): the client speaks wire versions 1 and 2", cfg.wireVersion)
	}
	switch cfg.auth {
	case authNone:
		return errors.New("malachi: Dial needs WithCredentials, WithMTLSAuth, WithToken or WithTokenSource")
	case authToken:
		if cfg.tokenSource == nil {
			return errors.New("malachi: WithTokenSource needs a token source")
		}
	case authMTLS:
		if cfg.tls == nil || len(cfg.tls.Certificates) == 0 && cfg.tls.GetClientCertificate == nil {
			return errors.New("malachi: WithMTLSAuth needs WithTLS with a client certificate")
		}
	case authSession:
		if cfg.resumeToken == "" {
			return errors.New("malachi: WithSessionToken needs a token")
		}
		if cfg.wireVersion < 2 {
			return errors.New("malachi: WithSessionToken needs wire v2 (session_auth)")
		}
	}
	cfg.sess = &session{}
	if cfg.auth == authSession {
		cfg.sess.token, cfg.sess.known, cfg.sess.served = cfg.resumeToken, true, true
	}
	if cfg.pause == nil {
		cfg.pause = sleep
	}
	if cfg.seeds != nil {
		cfg.seeds.addrs = append([]string{addr}, cfg.seeds.addrs...)
	}
	if cfg.tls != nil {
		// A clone, so that the caller may change or reuse its config. An
		// empty ServerName is filled in per address by handshake.
		cfg.tls = cfg.tls.Clone()
	}
	return nil
}

// authRequest is the first frame of a new connection. With p.session it
// is session_auth: the resumption token, and the user and password when the
// client logs in with them.
func (cfg *config) authRequest(ctx context.Context, p authPlan) (wire.Request, error) {
	if p.session {
		req := wire.SessionAuthRequest{Token: optStr(p.token)}
		if cfg.auth == authPassword {
			req.User, req.Password = str(cfg.user), str(cfg.password)
		}
		return req, nil
	}
	switch cfg.auth {
	case authMTLS:
		return wire.MTLSAuthRequest{}, nil
	case authSession:
		// The token expired by this clock, was refused, or the node no
		// longer serves session_auth: only a new login can go on.
		return nil, fmt.Errorf("malachi: no session token left to resume (log in again): %w", ErrSessionExpired)
	case authToken:
		jwt, err := cfg.tokenSource(ctx)
		if err != nil {
			return nil, fmt.Errorf("malachi: token source: %w", err)
		}
		// Tokens read from files and environment variables often carry a
		// trailing newline, which is never part of a JWT.
		jwt = strings.TrimSpace(jwt)
		if jwt == "" {
			return nil, errors.New("malachi: token source returned an empty token")
		}
		return wire.TokenAuthRequest{JWT: &jwt}, nil
	}
	user, pass := cfg.user, cfg.password
	return wire.AuthRequest{User: &user, Password: &pass}, nil
}

// handshake runs the TLS handshake on nc. A certificate the client does
// not trust, a server that does not speak TLS or a refusal by the server
// is ErrTLS, which retrying will not cure; anything else is a broken
// connection.
func handshake(ctx context.Context, nc net.Conn, cfg *tls.Config, addr string) (*tls.Conn, error) {
	if cfg.ServerName == "" {
		// The handshake starts on a connection already dialled, which
		// carries no host name: the certificate must name the host of the
		// address dialled.
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(nc, cfg)
	err := tc.HandshakeContext(ctx)
	if err == nil {
		return tc, nil
	}
	nc.Close()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, ErrRequestTimeout) {
		return nil, cause // the caller's context ended
	}
	if refusal := tlsRefusal(err); refusal != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrTLS, addr, refusal)
	}
	return nil, fmt.Errorf("%w: TLS handshake with %s: %w", ErrDisconnected, addr, err)
}

// tlsRefusal returns the error inside err that means the TLS session
// cannot be made as configured, as opposed to a network failure, or nil.
// It returns the inner error so that the caller can wrap it without the
// ErrDisconnected around it, which would make it look retriable.
func tlsRefusal(err error) error {
	var (
		verify *tls.CertificateVerificationError
		header tls.RecordHeaderError
		alert  tls.AlertError
		op     *net.OpError
	)
	switch {
	case errors.As(err, &verify):
		return verify
	case errors.As(err, &header):
		return header
	case errors.As(err, &alert):
		return alert
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert from the server, such as
		// bad_certificate, as a net.OpError with this Op. Under TLS 1.3 the
		// server checks the client certificate after the client has
		// finished its handshake, so this arrives on the first read.
		return op
	}
	return nil
}
