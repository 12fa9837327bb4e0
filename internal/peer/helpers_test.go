package peer

// Shared fixtures: clusters of transports over loopback TCP and over a
// MemNetwork, so that the contract tests run against both; waiting on
// conditions with a deadline; goroutine counting; a throwaway PKI.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/testpki"
)

const waitLimit = 10 * time.Second

// waitFor polls cond until it holds or waitLimit passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if cond() {
		return
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitLimit)
	for {
		select {
		case <-tick.C:
			if cond() {
				return
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// testConfig is a small configuration for node id on a free port.
func testConfig(id uint64) Config {
	return Config{NodeID: id, ClusterID: "test", ListenAddr: "127.0.0.1:0", RedialMin: 5 * time.Millisecond,
		RedialMax: 50 * time.Millisecond, Logger: quietLogger}
}

// kind of cluster a contract test runs on.
type impl struct {
	name string
	// start makes n transports (ids 1..n) with cfg changed by adjust,
	// lets register add handlers, starts them and tells each where the
	// others are. Close runs at cleanup.
	start func(t *testing.T, n int, adjust func(*Config), register func(Transport)) []Transport
}

var impls = []impl{{"tcp", startTCP}, {"mem", startMem}}

func startTCP(t *testing.T, n int, adjust func(*Config), register func(Transport)) []Transport {
	t.Helper()
	var ts []Transport
	for i := 1; i <= n; i++ {
		cfg := testConfig(uint64(i))
		if adjust != nil {
			adjust(&cfg)
		}
		tr, err := NewTCP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if register != nil {
			register(tr)
		}
		if err := tr.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts = append(ts, tr)
	}
	for _, a := range ts {
		for _, b := range ts {
			a.SetAddr(b.ID(), b.(*TCPTransport).Addr())
		}
	}
	return ts
}

func startMem(t *testing.T, n int, adjust func(*Config), register func(Transport)) []Transport {
	t.Helper()
	net := NewMemNetwork()
	var ts []Transport
	for i := 1; i <= n; i++ {
		cfg := testConfig(uint64(i))
		if adjust != nil {
			adjust(&cfg)
		}
		tr, err := net.NewTransport(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if register != nil {
			register(tr)
		}
		if err := tr.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		ts = append(ts, tr)
	}
	for _, a := range ts {
		for _, b := range ts {
			a.SetAddr(b.ID(), MemAddr(b.ID()))
		}
	}
	return ts
}

// inbox collects one-way frames per (source, channel), in arrival order.
type inbox struct {
	mu   sync.Mutex
	msgs map[[2]uint64][][]byte
}

func newInbox() *inbox { return &inbox{msgs: make(map[[2]uint64][][]byte)} }

func (b *inbox) handler(ch Channel) Handler {
	return func(from uint64, p []byte) {
		b.mu.Lock()
		defer b.mu.Unlock()
		k := [2]uint64{from, uint64(ch)}
		b.msgs[k] = append(b.msgs[k], p)
	}
}

func (b *inbox) count(from uint64, ch Channel) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs[[2]uint64{from, uint64(ch)}])
}

func (b *inbox) get(from uint64, ch Channel) [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.msgs[[2]uint64{from, uint64(ch)}]...)
}

// sendRetrying sends, yielding while the destination's queue is full.
func sendRetrying(t testing.TB, tr Transport, to uint64, ch Channel, p []byte) {
	t.Helper()
	for {
		err := tr.Send(to, ch, p)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrBackpressure) {
			t.Errorf("send: %v", err)
			return
		}
		runtime.Gosched()
	}
}

// checkNoLeak records the goroutine count now and, at the returned
// function, waits for it to come back down.
func checkNoLeak(t *testing.T) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(waitLimit)
		for runtime.NumGoroutine() > before {
			select {
			case <-tick.C:
			case <-deadline:
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
			}
		}
	}
}

// testPKI is a throwaway certificate authority issuing node certificates
// for 127.0.0.1, good for both ends of a connection, written as PEM files.
type testPKI struct {
	*testpki.CA
	caFile string
}

func newTestPKI(t *testing.T, name string) *testPKI {
	t.Helper()
	ca := testpki.NewCA(t, name)
	return &testPKI{CA: ca, caFile: testpki.WriteFile(t, t.TempDir(), "ca.pem", ca.PEM)}
}

// config is node's mutual TLS configuration, with a certificate from p
// naming node-<node>, trusting ca.
func (p *testPKI) config(t *testing.T, node uint64, ca *testPKI) *tls.Config {
	t.Helper()
	return p.tlsConfig(t, ca, fmt.Sprintf("node-%d", node))
}

// issueFor is a mutual TLS configuration trusting p, with a certificate
// from p of common name cn and the URI SANs uris.
func (p *testPKI) issueFor(t *testing.T, cn string, uris ...*url.URL) *tls.Config {
	t.Helper()
	return p.tlsConfig(t, p, cn, uris...)
}

// tlsConfig writes a certificate for 127.0.0.1, good for both ends of a
// connection, and loads it as LoadMutualTLS does, trusting trust.
func (p *testPKI) tlsConfig(t *testing.T, trust *testPKI, cn string, uris ...*url.URL) *tls.Config {
	t.Helper()
	c, k := p.Issue(t, testpki.Leaf{
		CommonName: cn,
		Usage:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPs:        testpki.LocalhostIPs,
		URIs:       uris,
	})
	dir := t.TempDir()
	cfg, err := LoadMutualTLS(testpki.WriteFile(t, dir, "cert.pem", c), testpki.WriteFile(t, dir, "key.pem", k), trust.caFile)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
