package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/malachi-log/malachi/pkg/client"
)

// Ways to authenticate, the values of --auth.
const (
	authPassword = "password"
	authMTLS     = "mtls"
	authToken    = "token"
)

// secureFlags are the TLS and authentication flags. The client commands
// take them globally; bench registers its own copy, as it does --server.
type secureFlags struct {
	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	auth          string
	token         string
	tokenFile     string
}

func (f *secureFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.tls, "tls", false, "connect over TLS (env MALACHI_TLS); implied by the other --tls-* flags")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM file of the CA that signs the server certificate; default: the system's roots (env MALACHI_TLS_CA)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM file of a client certificate, for --auth mtls or servers that require one (env MALACHI_TLS_CERT)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM file of the client certificate's private key (env MALACHI_TLS_KEY)")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "name the server certificate must carry; default: the host of --server (env MALACHI_TLS_SERVER_NAME)")
	fs.StringVar(&f.auth, "auth", "", "how to authenticate: password, mtls or token; default: token if one is given, else password (env MALACHI_AUTH)")
	fs.StringVar(&f.token, "token", "", "JWT for --auth token (env MALACHI_TOKEN)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the JWT for --auth token, read at each connection (env MALACHI_TOKEN_FILE)")
}

// Where a setting came from, lowest first.
const (
	fromDefault = iota
	fromContext
	fromEnv
	fromFlag
)

// pickFrom returns the flag's value if it was set on the command line,
// else the environment variable's if set and not empty, else def; and
// which of them it was (def counts as fromContext when it is not empty,
// because that is what callers pass).
func pickFrom(fs *pflag.FlagSet, flag, value, env, def string) (string, int) {
	if fs.Changed(flag) {
		return value, fromFlag
	}
	if v, ok := os.LookupEnv(env); ok && v != "" {
		return v, fromEnv
	}
	if def != "" {
		return def, fromContext
	}
	return "", fromDefault
}

// resolveSecurity fills the TLS and authentication part of s from the
// flags, the environment and ctx (nil for none), highest first, and
// checks that the combination makes sense. passwordGiven says whether
// --password or MALACHI_PASSWORD was set, which chooses password
// authentication over a method saved in the context.
func resolveSecurity(fs *pflag.FlagSet, f *secureFlags, ctx *savedContext, passwordGiven bool, s *settings) error {
	if ctx == nil {
		ctx = &savedContext{}
	}
	s.TLSCA, _ = pickFrom(fs, "tls-ca", f.tlsCA, "MALACHI_TLS_CA", ctx.TLSCA)
	s.TLSCert, _ = pickFrom(fs, "tls-cert", f.tlsCert, "MALACHI_TLS_CERT", ctx.TLSCert)
	s.TLSKey, _ = pickFrom(fs, "tls-key", f.tlsKey, "MALACHI_TLS_KEY", ctx.TLSKey)
	s.TLSServerName, _ = pickFrom(fs, "tls-server-name", f.tlsServerName, "MALACHI_TLS_SERVER_NAME", ctx.TLSServerName)
	// Any TLS file or name implies TLS: a CA given while the password
	// still goes out in clear would be a trap. Only an explicit
	// --tls=false (or MALACHI_TLS=false) turns it off.
	s.TLS = ctx.TLS || s.TLSCA != "" || s.TLSCert != "" || s.TLSKey != "" || s.TLSServerName != ""
	if v, ok := os.LookupEnv("MALACHI_TLS"); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return usageErr("MALACHI_TLS is true or false, not %q", v)
		}
		s.TLS = b
	}
	if fs.Changed("tls") {
		s.TLS = f.tls
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return usageErr("--tls-cert and --tls-key go together: a client certificate needs its key")
	}

	token, tokenFrom := pickFrom(fs, "token", f.token, "MALACHI_TOKEN", "")
	file, fileFrom := pickFrom(fs, "token-file", f.tokenFile, "MALACHI_TOKEN_FILE", ctx.TokenFile)
	switch {
	case token == "" || file == "":
	case tokenFrom > fileFrom:
		file = ""
	case fileFrom > tokenFrom:
		token = ""
	default:
		return usageErr("give a token or a token file, not both (--token / MALACHI_TOKEN, --token-file / MALACHI_TOKEN_FILE)")
	}
	s.Token, s.TokenFile = token, file
	tokenGiven := tokenFrom >= fromEnv && token != "" || fileFrom >= fromEnv && file != ""

	auth, authFrom := pickFrom(fs, "auth", f.auth, "MALACHI_AUTH", ctx.Auth)
	switch {
	case authFrom >= fromEnv:
	case tokenGiven:
		auth = authToken
	case passwordGiven:
		auth = authPassword
	case auth != "":
	case token != "" || file != "":
		auth = authToken
	default:
		auth = authPassword
	}
	s.Auth = auth
	switch auth {
	case authPassword:
	case authMTLS:
		if s.TLSCert == "" {
			return usageErr("--auth mtls needs a client certificate: --tls-cert and --tls-key")
		}
		if !s.TLS {
			return usageErr("--auth mtls needs TLS")
		}
	case authToken:
		if s.Token == "" && s.TokenFile == "" {
			return usageErr("--auth token needs --token or --token-file (or MALACHI_TOKEN / MALACHI_TOKEN_FILE)")
		}
	default:
		return usageErr("--auth is password, mtls or token, not %q", auth)
	}
	if tokenGiven && auth != authToken {
		return usageErr("a token was given but --auth is %s", auth)
	}
	return nil
}

// clientOptions turns s into the options of client.Dial.
func (s *settings) clientOptions() ([]client.Option, error) {
	var opts []client.Option
	if s.Wire != 0 {
		opts = append(opts, client.WithWireVersion(s.Wire))
	}
	if s.Timeout > 0 {
		opts = append(opts, client.WithDialTimeout(s.Timeout), client.WithRequestTimeout(s.Timeout))
	}
	if s.TLS {
		cfg, err := client.NewTLSConfig(s.TLSCA, s.TLSCert, s.TLSKey, s.TLSServerName)
		if err != nil {
			return nil, &exitError{code: 1, err: err}
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	switch s.Auth {
	case authMTLS:
		opts = append(opts, client.WithMTLSAuth())
	case authToken:
		if s.Token != "" {
			opts = append(opts, client.WithToken(s.Token))
		} else {
			opts = append(opts, client.WithTokenSource(fileToken(s.TokenFile)))
		}
	default:
		opts = append(opts, client.WithCredentials(s.User, s.Password))
	}
	return opts, nil
}

// fileToken reads the token from path at every connection, so that a
// token a sidecar or the platform renews in place keeps working.
func fileToken(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading the token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// sameServer reports whether two addresses name the same server as
// typed: host names compare without case, and nothing is resolved, so
// "localhost:4040" and "127.0.0.1:4040" differ. Erring that way only
// costs an explicit --use-context-credentials.
func sameServer(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return strings.EqualFold(ha, hb) && pa == pb
}

// absPath makes a file path saved in a context independent of the
// directory the context is used from.
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
