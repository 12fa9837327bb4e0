package peer

// Node ids bound to certificates, configurations that could skip
// verification, and frames that stall on a real socket.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

func echoCalls(tr *TCPTransport) {
	tr.HandleCall(ChannelForward, func(_ context.Context, _ uint64, req []byte) ([]byte, error) { return req, nil })
}

func callOnce(t *testing.T, from, to *TCPTransport) error {
	t.Helper()
	from.SetAddr(to.ID(), to.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	_, err := from.Call(ctx, to.ID(), ChannelForward, []byte("ping"))
	return err
}

// TestTLSCertificateNamesNode: the node id is read from the URI SAN
// malachi-node://<id> or the common name node-<id>; a dialler refuses an
// acceptor whose certificate names another node, and TLSAnyNodeID turns
// both checks off.
func TestTLSCertificateNamesNode(t *testing.T) {
	ca := newTestPKI(t, "cluster CA")
	start := func(id uint64, tc *tls.Config, anyID bool) *TCPTransport {
		cfg := testConfig(id)
		cfg.TLS, cfg.TLSAnyNodeID = tc, anyID
		return newTCP(t, cfg, echoCalls)
	}
	t.Run("URI SAN", func(t *testing.T) {
		a := start(1, ca.issueFor(t, "some host", NodeURI(1)), false)
		b := start(2, ca.issueFor(t, "another host", NodeURI(2)), false)
		if err := callOnce(t, a, b); err != nil {
			t.Fatal(err)
		}
		if err := callOnce(t, b, a); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("acceptor holds another node's certificate", func(t *testing.T) {
		a := start(1, ca.config(t, 1, ca), false)
		b := start(2, ca.config(t, 3, ca), false)
		err := callOnce(t, a, b)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrHandshake) {
			t.Fatalf("call to an acceptor with node 3's certificate: %v", err)
		}
	})
	t.Run("dialler holds another node's certificate", func(t *testing.T) {
		a := start(1, ca.config(t, 3, ca), false)
		b := start(2, ca.config(t, 2, ca), false)
		if err := callOnce(t, a, b); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call from a dialler with node 3's certificate: %v", err)
		}
		waitFor(t, "the acceptor to count the refusal", func() bool { return b.Stats().HandshakeFailures > 0 })
	})
	t.Run("certificate naming no node", func(t *testing.T) {
		a := start(1, ca.issueFor(t, "127.0.0.1"), false)
		b := start(2, ca.config(t, 2, ca), false)
		if err := callOnce(t, a, b); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call from a dialler whose certificate names no node: %v", err)
		}
	})
	t.Run("TLSAnyNodeID", func(t *testing.T) {
		a := start(1, ca.config(t, 3, ca), true)
		b := start(2, ca.config(t, 4, ca), true)
		if err := callOnce(t, a, b); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCertNamesNode: only an exact id names a node.
func TestCertNamesNode(t *testing.T) {
	for _, tc := range []struct {
		cn   string
		uris []*url.URL
		want bool
	}{
		{"node-7", nil, true},
		{"node-77", nil, false},
		{"node-07", nil, false},
		{"x", []*url.URL{NodeURI(7)}, true},
		{"x", []*url.URL{{Scheme: "malachi-node", Host: "77"}}, false},
		{"x", []*url.URL{{Scheme: "https", Host: "7"}}, false},
		{"x", []*url.URL{{Scheme: "malachi-node", Host: "7", Path: "/other"}}, false},
		{"x", []*url.URL{NodeURI(8), NodeURI(7)}, true},
	} {
		c := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}, URIs: tc.uris}
		if got := certNamesNode(c, 7); got != tc.want {
			t.Errorf("CN %q, URIs %v: names node 7 = %v, want %v", tc.cn, tc.uris, got, tc.want)
		}
	}
	if s := NodeURI(12).String(); s != "malachi-node://12" {
		t.Errorf("NodeURI(12) = %s", s)
	}
}

// TestConfigRefusesLooseTLS: a configuration that could let a handshake
// skip verification, or fall below TLS 1.2, is refused at NewTCP.
func TestConfigRefusesLooseTLS(t *testing.T) {
	ca := newTestPKI(t, "cluster CA")
	good := ca.config(t, 1, ca)
	for name, change := range map[string]func(*tls.Config){
		"GetConfigForClient": func(c *tls.Config) {
			c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return nil, nil }
		},
		"MinVersion TLS 1.1": func(c *tls.Config) { c.MinVersion = tls.VersionTLS11 },
		"MaxVersion TLS 1.0": func(c *tls.Config) { c.MinVersion, c.MaxVersion = 0, tls.VersionTLS10 },
	} {
		cfg := testConfig(1)
		cfg.TLS = good.Clone()
		change(cfg.TLS)
		if _, err := NewTCP(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cfg := testConfig(1)
	cfg.TLS = good.Clone()
	cfg.TLS.MinVersion = tls.VersionTLS12
	if _, err := NewTCP(cfg); err != nil {
		t.Errorf("TLS 1.2: %v", err)
	}
}

// TestStalledFrameClosesConnection: a peer that sends a frame's length
// prefix and stops loses its connection after FrameReadTimeout; an idle
// connection, between frames, keeps it.
func TestStalledFrameClosesConnection(t *testing.T) {
	cfg := testConfig(1)
	cfg.FrameReadTimeout = 50 * time.Millisecond
	box := newInbox()
	tr := newTCP(t, cfg, func(tr *TCPTransport) { tr.Handle(ChannelRaft, box.handler(ChannelRaft)) })

	idle, _, ack := rawDial(t, tr, hello{version: protocolVersion, from: 2, to: 1, cluster: "test"})
	if !ack.ok {
		t.Fatalf("handshake refused: %s", ack.reason)
	}
	c, br, ack := rawDial(t, tr, hello{version: protocolVersion, from: 3, to: 1, cluster: "test"})
	if !ack.ok {
		t.Fatalf("handshake refused: %s", ack.reason)
	}
	if _, err := c.Write(binary.BigEndian.AppendUint32(nil, 1<<20)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c, br)
	// The idle connection still carries frames after the stalled one
	// was closed.
	if _, err := idle.Write(encodeFrame(kindMessage, ChannelRaft, 0, []byte("late"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle connection's frame", func() bool { return box.count(2, ChannelRaft) == 1 })
}

// TestLargeFrameReadInChunks: a frame many times readChunk arrives
// whole, in one buffer of its exact length.
func TestLargeFrameReadInChunks(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), (5*readChunk+3)/16+1)
	enc := encodeFrame(kindMessage, ChannelReplication, 0, payload)
	f, n, err := readFrame(bufio.NewReaderSize(bytes.NewReader(enc), 4096), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(enc) || !bytes.Equal(f.payload, payload) || f.ch != ChannelReplication {
		t.Fatalf("read %d bytes, payload equal %v, channel %v", n, bytes.Equal(f.payload, payload), f.ch)
	}
}

// TestReconnectDeliversAfterOldReaderLeaves: while the old connection's
// reader is inside the handler, the new connection waits; once the
// handler returns, the new connection's frames are delivered, after
// whatever the old one delivered and never before it.
func TestReconnectDeliversAfterOldReaderLeaves(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []uint32
	b := newTCP(t, testConfig(2), func(tr *TCPTransport) {
		tr.Handle(ChannelRaft, func(_ uint64, p []byte) {
			seq := binary.BigEndian.Uint32(p)
			mu.Lock()
			order = append(order, seq)
			mu.Unlock()
			if seq == 1 {
				<-release
			}
		})
	})
	a := newTCP(t, testConfig(1), nil)
	a.SetAddr(2, b.Addr())
	delivered := func() []uint32 {
		mu.Lock()
		defer mu.Unlock()
		return append([]uint32(nil), order...)
	}
	for i := uint32(1); i <= 20; i++ {
		sendRetrying(t, a, 2, ChannelRaft, binary.BigEndian.AppendUint32(nil, i))
	}
	waitFor(t, "frame 1 in the handler", func() bool { return len(delivered()) == 1 })
	_, port, err := net.SplitHostPort(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	a.SetAddr(2, net.JoinHostPort("::ffff:127.0.0.1", port))
	waitFor(t, "the new connection", func() bool { return a.Stats().Nodes[2].Dials >= 2 && a.Stats().Nodes[2].Connected })
	sendRetrying(t, a, 2, ChannelRaft, binary.BigEndian.AppendUint32(nil, 21))
	close(release)
	waitFor(t, "frame 21", func() bool { o := delivered(); return len(o) > 0 && o[len(o)-1] == 21 })
	o := delivered()
	for i := 1; i < len(o); i++ {
		if o[i] <= o[i-1] {
			t.Fatalf("delivery order %v", o)
		}
	}
}
