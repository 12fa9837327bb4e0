package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLS on the client port.
//
// One port serves both plaintext and TLS. A TLS connection starts with a
// handshake record, whose first byte is 0x16; a plaintext connection
// starts with the length prefix of its first frame, which is at most
// MaxPreAuthFrame (≤ 16 MiB), so its first byte is 0x00 or 0x01. The
// server reads that one byte and either runs the TLS handshake over it or
// reads frames in the clear — or, with TLSOnly, answers tls_required and
// closes. One port keeps deployment simple (no second address to open,
// publish and monitor) and lets a fleet move to TLS client by client.
//
// The certificate is served through GetConfigForClient from an atomic
// pointer, so a reload affects only handshakes that start after it:
// established connections keep their TLS state and are never dropped.

// recordTypeHandshake is the first byte of every TLS connection.
const recordTypeHandshake = 0x16

// tlsFiles is the TLS configuration read from the configured files, and
// what is needed to read it again.
type tlsFiles struct {
	certFile, keyFile, caFile string
	logger                    *slog.Logger

	mu      sync.Mutex // serialises reloads
	stamps  [3]fileStamp
	current atomic.Pointer[tls.Config]
	base    *tls.Config // what tls.Server gets: hands out current

	reloadErrors atomic.Uint64
}

// fileStamp is what the watcher compares to notice a changed file.
type fileStamp struct {
	mod  time.Time
	size int64
}

func loadTLSFiles(cfg Config) (*tlsFiles, error) {
	t := &tlsFiles{certFile: cfg.TLSCertFile, keyFile: cfg.TLSKeyFile, caFile: cfg.TLSClientCAFile, logger: cfg.Logger}
	t.base = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.current.Load(), nil
		},
	}
	if err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the files and, if they make a valid configuration,
// installs it for new handshakes.
func (t *tlsFiles) reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stamps = t.stat()
	cfg, err := t.build()
	if err != nil {
		t.reloadErrors.Add(1)
		return err
	}
	t.current.Store(cfg)
	return nil
}

// build reads the files into a server configuration: TLS 1.2 at least
// (Go negotiates 1.3 with every client that offers it), and with a
// client CA, client certificates requested and verified when presented.
func (t *tlsFiles) build() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return nil, fmt.Errorf("server: TLS certificate %s, key %s: %w", t.certFile, t.keyFile, err)
	}
	if leaf := cert.Leaf; leaf != nil {
		if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			// Served anyway: refusing to start would take plaintext
			// clients down too, and a reload can still fix it.
			t.logger.Error("TLS certificate is not valid now; clients will refuse it",
				"file", t.certFile, "not_before", leaf.NotBefore, "not_after", leaf.NotAfter)
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("server: TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: TLS client CA %s holds no PEM certificate", t.caFile)
		}
		cfg.ClientCAs = pool
		// Verified when given: clients that authenticate with a password
		// or a token connect over TLS without a certificate.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		// A resumed session would carry the client chain verified at its
		// first handshake, perhaps against a CA since removed: every
		// connection verifies its client certificate afresh.
		cfg.SessionTicketsDisabled = true
	}
	return cfg, nil
}

func (t *tlsFiles) stat() [3]fileStamp {
	var out [3]fileStamp
	for i, name := range []string{t.certFile, t.keyFile, t.caFile} {
		if name == "" {
			continue
		}
		if fi, err := os.Stat(name); err == nil {
			out[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
		}
	}
	return out
}

// watch reloads when a file's modification time or size changes, until
// quit closes. A failed reload is logged once per change: a certificate
// and key written one after the other fail until both are in place, and
// the second write is a change of its own that triggers the next try.
func (t *tlsFiles) watch(every time.Duration, quit <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-quit:
			return
		case <-tick.C:
		}
		t.mu.Lock()
		changed := t.stat() != t.stamps
		t.mu.Unlock()
		if !changed {
			continue
		}
		if err := t.reload(); err != nil {
			t.logger.Error("TLS reload failed; keeping the previous certificate", "err", err)
			continue
		}
		t.logger.Info("TLS certificate reloaded", "file", t.certFile)
	}
}

// sniffedConn gives back the bytes read to tell TLS from plaintext
// before reading on from the socket.
type sniffedConn struct {
	net.Conn
	first []byte
}

func (s *sniffedConn) Read(p []byte) (int, error) {
	if len(s.first) > 0 {
		n := copy(p, s.first)
		s.first = s.first[n:]
		return n, nil
	}
	return s.Conn.Read(p)
}

// errPlaintextRefused ends a plaintext connection on a TLSOnly port.
var errPlaintextRefused = errors.New("server: plaintext connection on a TLS-only port")
