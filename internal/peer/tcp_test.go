package peer

// TCPTransport on loopback against hand-made peers that misbehave on
// purpose at the frame level: one that never reads, one that sends a
// damaged or oversize frame, one that speaks another version; plus
// handshake refusals between real transports, a restart, and mutual TLS.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func newTCP(t *testing.T, cfg Config, register func(*TCPTransport)) *TCPTransport {
	t.Helper()
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
	return tr
}

// rawPeer is a listener that answers the handshake as node id and then
// does what the test says with the connection.
func rawPeer(t *testing.T, id uint64, then func(net.Conn, *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, _, err := readFrame(br, maxHelloBytes); err != nil {
			t.Errorf("raw peer: reading the hello: %v", err)
			return
		}
		ack := helloAck{version: protocolVersion, node: id, ok: true}
		if _, err := c.Write(encodeFrame(kindHelloAck, 0, 0, ack.encode())); err != nil {
			t.Errorf("raw peer: %v", err)
			return
		}
		then(c, br)
	}()
	return ln.Addr().String()
}

// rawDial connects to tr as node from and completes the handshake.
func rawDial(t *testing.T, tr *TCPTransport, h hello) (net.Conn, *bufio.Reader, helloAck) {
	t.Helper()
	c, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(encodeFrame(kindHello, 0, 0, h.encode())); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	f, _, err := readFrame(br, maxHelloBytes)
	if err != nil {
		t.Fatalf("reading the handshake answer: %v", err)
	}
	ack, err := decodeHelloAck(f.payload)
	if err != nil {
		t.Fatal(err)
	}
	return c, br, ack
}

// waitClosed waits for the other side to close c.
func waitClosed(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitLimit))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("connection not closed by the transport: %v", err)
	}
}

func TestBackpressureWhenPeerNeverReads(t *testing.T) {
	stop := make(chan struct{})
	addr := rawPeer(t, 2, func(net.Conn, *bufio.Reader) { <-stop })
	defer close(stop)
	cfg := testConfig(1)
	cfg.MaxFrameBytes, cfg.MaxQueueBytes, cfg.MaxQueueFrames = 64<<10, 1<<20, 1024
	a := newTCP(t, cfg, nil)
	a.SetAddr(2, addr)
	// Connected first, so that the queue fills behind a blocked write
	// rather than behind the dial.
	sendRetrying(t, a, 2, ChannelRaft, []byte("first"))
	waitFor(t, "the first write", func() bool { return a.Stats().Nodes[2].FramesSent == 1 })
	payload := make([]byte, 60<<10)
	var err error
	sent := 0
	for ; sent < 100000; sent++ {
		if err = a.Send(2, ChannelReplication, payload); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrBackpressure) {
		t.Fatalf("after %d sends: %v", sent, err)
	}
	st := a.Stats().Nodes[2]
	if !st.Connected || st.Refused != 1 || st.QueueBytes > 1<<20 || st.QueueFrames > 1024 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestCorruptFrameClosesConnectionAndIsCounted(t *testing.T) {
	box := newInbox()
	b := newTCP(t, testConfig(2), func(tr *TCPTransport) { tr.Handle(ChannelRaft, box.handler(ChannelRaft)) })
	c, br, ack := rawDial(t, b, hello{version: protocolVersion, from: 1, to: 2, cluster: "test"})
	if !ack.ok {
		t.Fatalf("handshake refused: %s", ack.reason)
	}
	good := encodeFrame(kindMessage, ChannelRaft, 0, []byte("good"))
	bad := encodeFrame(kindMessage, ChannelRaft, 0, []byte("flipped"))
	bad[len(bad)-1] ^= 0x01
	if _, err := c.Write(append(append(append([]byte{}, good...), bad...), good...)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c, br)
	if got := b.Stats().CorruptFrames; got != 1 {
		t.Errorf("CorruptFrames = %d", got)
	}
	if msgs := box.get(1, ChannelRaft); len(msgs) != 1 || string(msgs[0]) != "good" {
		t.Errorf("delivered %q; want only the frame before the damaged one", msgs)
	}
}

func TestOversizeFrameReceivedClosesConnection(t *testing.T) {
	box := newInbox()
	cfg := testConfig(2)
	cfg.MaxFrameBytes = minFrameBytes
	b := newTCP(t, cfg, func(tr *TCPTransport) { tr.Handle(ChannelRaft, box.handler(ChannelRaft)) })
	c, br, _ := rawDial(t, b, hello{version: protocolVersion, from: 1, to: 2, cluster: "test"})
	if _, err := c.Write(encodeFrame(kindMessage, ChannelRaft, 0, make([]byte, minFrameBytes))); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c, br)
	if st := b.Stats(); st.OversizeFrames != 1 || box.count(1, ChannelRaft) != 0 {
		t.Errorf("oversize frames %d, delivered %d", st.OversizeFrames, box.count(1, ChannelRaft))
	}

	// A sender allowed larger frames than the receiver loses its
	// connection on the large one, and the next frame arrives on a new one.
	big := testConfig(1)
	big.MaxFrameBytes = 4 * minFrameBytes
	a := newTCP(t, big, nil)
	a.SetAddr(2, b.Addr())
	if err := a.Send(2, ChannelRaft, make([]byte, 2*minFrameBytes)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the receiver to refuse the frame", func() bool { return b.Stats().OversizeFrames == 2 })
	waitFor(t, "a small frame after the refusal", func() bool {
		sendRetrying(t, a, 2, ChannelRaft, []byte("small"))
		return box.count(1, ChannelRaft) > 0
	})
	for _, m := range box.get(1, ChannelRaft) {
		if string(m) != "small" {
			t.Fatalf("delivered a %d-byte frame", len(m))
		}
	}
}

func TestHandshakeMismatchRefused(t *testing.T) {
	b := newTCP(t, testConfig(2), func(tr *TCPTransport) {
		tr.HandleCall(ChannelForward, func(context.Context, uint64, []byte) ([]byte, error) { return []byte("ok"), nil })
	})
	other := testConfig(1)
	other.ClusterID = "another"
	a := newTCP(t, other, nil)
	a.SetAddr(2, b.Addr())
	_, err := a.Call(context.Background(), 2, ChannelForward, nil)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), `cluster "another"`) {
		t.Fatalf("call across clusters: %v", err)
	}
	if a.Stats().HandshakeFailures == 0 {
		t.Errorf("the dialling side did not count its handshake failure")
	}
	// The listener counts its refusal after writing it, so the dialler
	// may read the refusal first.
	waitFor(t, "the listening side to count its handshake failure", func() bool { return b.Stats().HandshakeFailures > 0 })

	// Node 1 thinks node 3 lives at node 2's address.
	c := newTCP(t, testConfig(1), nil)
	c.SetAddr(3, b.Addr())
	if _, err := c.Call(context.Background(), 3, ChannelForward, nil); !errors.Is(err, ErrHandshake) ||
		!strings.Contains(err.Error(), "addressed to node 3, this is node 2") {
		t.Fatalf("call to the wrong node: %v", err)
	}
	if st := c.Stats().Nodes[3]; st.DialFailures == 0 || st.Connected {
		t.Errorf("stats of a refused destination: %+v", st)
	}

	// Another protocol version.
	_, _, ack := rawDial(t, b, hello{version: protocolVersion + 1, from: 1, to: 2, cluster: "test"})
	if ack.ok || !strings.Contains(ack.reason, "protocol version 2") {
		t.Fatalf("another version: %+v", ack)
	}

	// The right cluster and node still get through.
	d := newTCP(t, testConfig(1), nil)
	d.SetAddr(2, b.Addr())
	if resp, err := d.Call(context.Background(), 2, ChannelForward, nil); err != nil || string(resp) != "ok" {
		t.Fatalf("matching handshake: %q, %v", resp, err)
	}
}

func TestReconnectAfterRestart(t *testing.T) {
	box1, box2 := newInbox(), newInbox()
	b := newTCP(t, testConfig(2), func(tr *TCPTransport) { tr.Handle(ChannelRaft, box1.handler(ChannelRaft)) })
	a := newTCP(t, testConfig(1), nil)
	a.SetAddr(2, b.Addr())
	sendRetrying(t, a, 2, ChannelRaft, []byte("before"))
	waitFor(t, "the first frame", func() bool { return box1.count(1, ChannelRaft) == 1 })
	addr := b.Addr()
	b.Close()

	cfg := testConfig(2)
	cfg.ListenAddr = addr
	newTCP(t, cfg, func(tr *TCPTransport) { tr.Handle(ChannelRaft, box2.handler(ChannelRaft)) })
	// Frames written before the old connection's failure was noticed
	// are lost (at most once); probe until the new node hears one.
	waitFor(t, "a frame to the restarted node", func() bool {
		sendRetrying(t, a, 2, ChannelRaft, []byte("probe"))
		return box2.count(1, ChannelRaft) > 0
	})
	probes := box2.count(1, ChannelRaft)
	for i := range 100 {
		sendRetrying(t, a, 2, ChannelRaft, []byte{byte(i)})
	}
	waitFor(t, "100 frames after the restart", func() bool { return box2.count(1, ChannelRaft) >= probes+100 })
	got := box2.get(1, ChannelRaft)
	for i, m := range got[len(got)-100:] {
		if len(m) != 1 || m[0] != byte(i) {
			t.Fatalf("frame %d after the restart is %q", i, m)
		}
	}
	if st := a.Stats().Nodes[2]; st.Dials < 2 {
		t.Errorf("dials = %d, want a redial", st.Dials)
	}
}

func TestMutualTLS(t *testing.T) {
	ca, rogue := newTestPKI(t, "cluster CA"), newTestPKI(t, "unknown CA")
	echo := func(tr *TCPTransport) {
		tr.HandleCall(ChannelForward, func(_ context.Context, from uint64, req []byte) ([]byte, error) { return req, nil })
	}
	start := func(id uint64, tlsFrom *testPKI, trust *testPKI) *TCPTransport {
		cfg := testConfig(id)
		cfg.TLS = tlsFrom.config(t, id, trust)
		return newTCP(t, cfg, echo)
	}
	call := func(from, to *TCPTransport) error {
		from.SetAddr(to.ID(), to.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		resp, err := from.Call(ctx, to.ID(), ChannelForward, []byte("hello"))
		if err == nil && string(resp) != "hello" {
			t.Fatalf("echo: %q", resp)
		}
		return err
	}

	t.Run("both verified", func(t *testing.T) {
		check := checkNoLeak(t)
		a, b := start(1, ca, ca), start(2, ca, ca)
		if err := call(a, b); err != nil {
			t.Fatal(err)
		}
		if err := call(b, a); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b.Close()
		check()
	})
	t.Run("dialler's certificate from an unknown CA", func(t *testing.T) {
		a, b := start(1, rogue, ca), start(2, ca, ca)
		if err := call(a, b); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call: %v", err)
		}
		waitFor(t, "the acceptor to count the refusal", func() bool { return b.Stats().HandshakeFailures > 0 })
	})
	t.Run("acceptor's certificate from an unknown CA", func(t *testing.T) {
		a, b := start(1, ca, ca), start(2, rogue, ca)
		err := call(a, b)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrHandshake) {
			t.Fatalf("call: %v", err)
		}
		if a.Stats().HandshakeFailures == 0 {
			t.Error("the dialler did not count the refusal")
		}
	})
	t.Run("plaintext dialler", func(t *testing.T) {
		a, b := newTCP(t, testConfig(1), nil), start(2, ca, ca)
		if err := call(a, b); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call: %v", err)
		}
	})
}

func TestConfigRefusesHalfTLS(t *testing.T) {
	ca := newTestPKI(t, "cluster CA")
	good := ca.config(t, 1, ca)
	for name, mutate := range map[string]func(*Config){
		"no client verification": func(c *Config) { c.TLS.ClientAuth = 0 },
		"no roots":               func(c *Config) { c.TLS.RootCAs = nil },
		"skip verify":            func(c *Config) { c.TLS.InsecureSkipVerify = true },
		"no certificate":         func(c *Config) { c.TLS.Certificates = nil },
	} {
		cfg := testConfig(1)
		cfg.TLS = good.Clone()
		mutate(&cfg)
		if _, err := NewTCP(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadMutualTLS(ca.caFile, ca.caFile, ca.caFile); err == nil {
		t.Error("LoadMutualTLS took a CA certificate as a key")
	}
	if _, err := NewTCP(Config{}); err == nil {
		t.Error("NodeID 0 accepted")
	}
}

func TestSetAddrMovesTheConnection(t *testing.T) {
	box1, box2 := newInbox(), newInbox()
	old := newTCP(t, testConfig(2), func(tr *TCPTransport) { tr.Handle(ChannelRaft, box1.handler(ChannelRaft)) })
	moved := newTCP(t, testConfig(2), func(tr *TCPTransport) { tr.Handle(ChannelRaft, box2.handler(ChannelRaft)) })
	a := newTCP(t, testConfig(1), nil)
	a.SetAddr(2, old.Addr())
	sendRetrying(t, a, 2, ChannelRaft, []byte("to the old address"))
	waitFor(t, "the frame at the old address", func() bool { return box1.count(1, ChannelRaft) == 1 })
	a.SetAddr(2, moved.Addr())
	waitFor(t, "a frame at the new address", func() bool {
		sendRetrying(t, a, 2, ChannelRaft, []byte("to the new address"))
		return box2.count(1, ChannelRaft) > 0
	})
	// Frames written before the old connection closed may have landed
	// there; none may go there once the new connection carries traffic.
	before := box1.count(1, ChannelRaft)
	sendRetrying(t, a, 2, ChannelRaft, []byte("after"))
	waitFor(t, "the last frame at the new address", func() bool {
		msgs := box2.get(1, ChannelRaft)
		return string(msgs[len(msgs)-1]) == "after"
	})
	if box1.count(1, ChannelRaft) != before {
		t.Fatal("a frame went to the old address after the move")
	}
}
