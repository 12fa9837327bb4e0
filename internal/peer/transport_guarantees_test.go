package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestTLSHelloMustMatchCertificate: with mutual TLS, a node holding a
// valid certificate (node 3's) dials node 1 and says in its hello that it
// is node 2. The acceptor checks the certificate chain but never ties the
// hello's node id to the certificate, so the connection is taken as node
// 2's: its frames reach the raft handler as if node 2 sent them, and the
// genuine node 2's connection is closed (registerSource keeps one
// connection per source id).
func TestTLSHelloMustMatchCertificate(t *testing.T) {
	ca := newTestPKI(t, "cluster CA")
	box := newInbox()
	cfg1 := testConfig(1)
	cfg1.TLS = ca.config(t, 1, ca)
	n1 := newTCP(t, cfg1, func(tr *TCPTransport) { tr.Handle(ChannelRaft, box.handler(ChannelRaft)) })

	cfg2 := testConfig(2)
	cfg2.TLS = ca.config(t, 2, ca)
	n2 := newTCP(t, cfg2, nil)
	n2.SetAddr(1, n1.Addr())
	sendRetrying(t, n2, 1, ChannelRaft, []byte("genuine"))
	waitFor(t, "node 2's frame", func() bool { return box.count(2, ChannelRaft) == 1 })

	// Node 3's certificate, claiming to be node 2.
	tc := ca.config(t, 3, ca).Clone()
	tc.ServerName = "127.0.0.1"
	conn, err := tls.Dial("tcp", n1.Addr(), tc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(encodeFrame(kindHello, 0, 0, hello{version: protocolVersion, from: 2, to: 1, cluster: "test"}.encode())); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	f, _, err := readFrame(br, maxHelloBytes)
	if err == nil {
		var ack helloAck
		if ack, err = decodeHelloAck(f.payload); err == nil && !ack.ok {
			return // refused: what we want
		}
	}
	if err != nil {
		return // connection refused or closed: also fine
	}
	if _, err := conn.Write(encodeFrame(kindMessage, ChannelRaft, 0, []byte("spoofed"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the spoofed frame or a refusal", func() bool { return box.count(2, ChannelRaft) >= 2 })
	msgs := box.get(2, ChannelRaft)
	t.Fatalf("a peer holding node 3's certificate was accepted as node 2; node 1 received %q from \"node 2\"", msgs)
}

// TestInboundOrderAcrossReconnect: Handler promises one frame at a time,
// in order, per source and channel. When the dialler replaces its
// connection (here SetAddr to another spelling of the same listener; a
// write timeout against a slow handler does the same), the acceptor
// starts a reader for the new connection while the old reader is still
// inside the handler, and still holds frames read into its buffer. The
// new connection's frames are delivered concurrently with, and before,
// the old connection's remaining ones.
func TestInboundOrderAcrossReconnect(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }

	var mu sync.Mutex
	var order []uint32
	inHandler := 0
	overlapped := false
	handler := func(from uint64, p []byte) {
		seq := binary.BigEndian.Uint32(p)
		mu.Lock()
		order = append(order, seq)
		inHandler++
		if inHandler > 1 {
			overlapped = true
		}
		mu.Unlock()
		if seq == 1 {
			<-release
		}
		mu.Lock()
		inHandler--
		mu.Unlock()
	}
	b := newTCP(t, testConfig(2), func(tr *TCPTransport) {
		tr.Handle(ChannelRaft, handler)
		tr.HandleCall(ChannelForward, func(_ context.Context, _ uint64, req []byte) ([]byte, error) { return req, nil })
	})
	t.Cleanup(unblock) // runs before b's Close, which waits for the reader
	a := newTCP(t, testConfig(1), nil)
	a.SetAddr(2, b.Addr())
	for i := uint32(1); i <= 50; i++ {
		sendRetrying(t, a, 2, ChannelRaft, binary.BigEndian.AppendUint32(nil, i))
	}
	snapshot := func() ([]uint32, bool) {
		mu.Lock()
		defer mu.Unlock()
		return append([]uint32(nil), order...), overlapped
	}
	waitFor(t, "frame 1 in the handler", func() bool { o, _ := snapshot(); return len(o) >= 1 })

	_, port, err := net.SplitHostPort(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	a.SetAddr(2, net.JoinHostPort("::ffff:127.0.0.1", port)) // same listener, new connection
	sendRetrying(t, a, 2, ChannelRaft, binary.BigEndian.AppendUint32(nil, 51))
	// A call behind frame 51 on the new connection: once it is answered,
	// the new connection's reader has handled frame 51. A transport that
	// holds the new connection back until the old reader is done does not
	// answer while frame 1 is in its handler; the call's context bounds
	// that case, which passes.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		_, err := a.Call(ctx, 2, ChannelForward, []byte("probe"))
		if err == nil || ctx.Err() != nil {
			break
		}
		if !errors.Is(err, ErrConnectionLost) && !errors.Is(err, ErrUnreachable) {
			t.Fatalf("probe call: %v", err)
		}
	}
	o, over := snapshot()
	unblock()
	if over {
		t.Fatalf("frame 51 was handed to the handler while frame 1 was still in it; delivery order so far %v", o)
	}
}

// blockingAfterPrefix yields one frame's length prefix and then reports
// how large a buffer the frame reader offers for the body before a single
// body byte has arrived.
type blockingAfterPrefix struct {
	prefix    []byte
	allocated uint64 // heap bytes allocated between the prefix and the first body read
	firstRead int    // size of the first body read
	start     uint64
	done      bool
}

func (r *blockingAfterPrefix) Read(p []byte) (int, error) {
	if len(r.prefix) > 0 {
		n := copy(p, r.prefix)
		r.prefix = r.prefix[n:]
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		r.start = ms.TotalAlloc
		return n, nil
	}
	if !r.done {
		r.done = true
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		r.allocated = ms.TotalAlloc - r.start
		r.firstRead = len(p)
	}
	return 0, io.ErrUnexpectedEOF // the peer stalls; here, it gives up
}

// TestFrameBufferFollowsReceivedBytes: readFrame allocates the whole
// frame as soon as it has read the 4-byte length prefix, before any of
// the body (or its checksum) has arrived, and the connection has no read
// deadline after the handshake. A peer (anyone who can send a hello,
// when TLS is off) that sends one prefix per connection and then stalls
// pins MaxFrameBytes per connection: 256 connections x 16 MiB = 4 GiB
// with the defaults (B1). Memory held for a frame should follow the
// bytes received.
func TestFrameBufferFollowsReceivedBytes(t *testing.T) {
	const frameLen = 16 << 20
	r := &blockingAfterPrefix{prefix: binary.BigEndian.AppendUint32(nil, frameLen)}
	br := bufio.NewReaderSize(r, readBufferSize)
	_, _, err := readFrame(br, frameLen)
	if err == nil {
		t.Fatal("a frame with no body was accepted")
	}
	t.Logf("before any body byte: %d bytes allocated, first body read of %d bytes", r.allocated, r.firstRead)
	if r.allocated >= frameLen/2 {
		t.Fatalf("%d bytes allocated for a frame of which no body byte had arrived (length prefix %d)", r.allocated, frameLen)
	}
}

// TestCallFailsWhenDestinationCloses: a call is running in the
// destination's handler when the destination shuts down. Over TCP the
// connection drops and the caller gets ErrConnectionLost at once; the
// in-memory twin, which promises the same contract, drops the answer and
// leaves the caller waiting for its context: with a context without a
// deadline, for ever. Tests of the packages above then see a hang where
// production sees a fast, retriable failure.
func TestCallFailsWhenDestinationCloses(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			ts := im.start(t, 2, nil, func(tr Transport) {
				if tr.ID() != 2 {
					return
				}
				tr.HandleCall(ChannelForward, func(ctx context.Context, _ uint64, _ []byte) ([]byte, error) {
					started <- struct{}{}
					<-ctx.Done()
					return nil, ctx.Err()
				})
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := ts[0].Call(ctx, 2, ChannelForward, []byte("req"))
				done <- err
			}()
			<-started
			ts[1].Close()
			select {
			case err := <-done:
				if !errors.Is(err, ErrConnectionLost) && !errors.Is(err, ErrUnreachable) && !errors.Is(err, ErrClosed) {
					t.Fatalf("call: %v, want ErrConnectionLost", err)
				}
			case <-time.After(waitLimit):
				cancel()
				t.Fatalf("the call was still waiting %v after its destination closed", waitLimit)
			}
		})
	}
}

// TestTLSConfigForClientCannotDropVerification: checkMutualTLS inspects
// the top-level fields only. A configuration whose GetConfigForClient
// returns a config without client verification passes NewTCP, and a
// dialler with no certificate at all is then accepted.
func TestTLSConfigForClientCannotDropVerification(t *testing.T) {
	ca := newTestPKI(t, "cluster CA")
	good := ca.config(t, 1, ca)
	loose := good.Clone()
	inner := good.Clone()
	inner.ClientAuth = tls.NoClientCert
	inner.ClientCAs = nil
	loose.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return inner, nil }
	cfg := testConfig(1)
	cfg.TLS = loose
	tr, err := NewTCP(cfg)
	if err != nil {
		return // refused at configuration: fine
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	client := &tls.Config{RootCAs: good.RootCAs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	conn, err := tls.Dial("tcp", tr.Addr(), client)
	if err != nil {
		return // refused at the handshake: fine
	}
	defer conn.Close()
	conn.Write(encodeFrame(kindHello, 0, 0, hello{version: protocolVersion, from: 9, to: 1, cluster: "test"}.encode()))
	conn.SetReadDeadline(time.Now().Add(waitLimit))
	f, _, err := readFrame(bufio.NewReader(conn), maxHelloBytes)
	if err != nil {
		return
	}
	if ack, err := decodeHelloAck(f.payload); err == nil && ack.ok {
		t.Fatal("a dialler without any certificate was accepted by a transport configured for mutual TLS")
	}
}
