package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// fakeBroker is a scripted wire server for tests of the client's own
// machinery (multiplexing, retries, cancellation) that a real broker
// cannot be made to exercise on demand. Every authentication frame (auth,
// mtls_auth, token_auth) succeeds, and the first frame of each connection
// other than api_versions is kept for inspection; every other request
// goes to handle, which answers through fc.reply whenever it likes (or
// never).
//
// By default it is a node that predates wire v2: it refuses api_versions
// with unknown_api_key, so clients speak wire v1 to it. fakeOptions
// change that.
type fakeBroker struct {
	ln     net.Listener
	handle func(fc *fakeConn, corr uint32, req wire.Request)
	opts   fakeOptions

	mu     sync.Mutex
	auths  int
	conns  []*fakeConn
	firsts []firstFrame
	keys   []uint16 // every request key received, in order
}

// fakeOptions say how a fake answers api_versions (key 79).
type fakeOptions struct {
	// versions, when set, answers api_versions (before auth or after).
	versions *wire.APIVersionsResponse
	// strict answers anything but an auth frame before auth with
	// auth_required and closes the connection, as nodes did before wire
	// v2.
	strict bool
}

// firstFrame is the first request frame of a connection, as received.
type firstFrame struct {
	key     uint16
	payload []byte
	// tls is whether it arrived over TLS; peerCN is the subject CN of the
	// client certificate the server verified, "" for none.
	tls    bool
	peerCN string
}

type fakeConn struct {
	nc net.Conn
	mu sync.Mutex
}

// reply writes one whole frame.
func (fc *fakeConn) reply(frame []byte) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.nc.Write(frame)
}

func (fc *fakeConn) ok(corr uint32, resp wire.Response) {
	fc.reply(wire.AppendOKFrame(nil, corr, resp))
}

func (fc *fakeConn) refuse(corr uint32, reason string) {
	fc.reply(wire.AppendErrorFrame(nil, corr, reason))
}

func startFake(t *testing.T, handle func(fc *fakeConn, corr uint32, req wire.Request)) *fakeBroker {
	t.Helper()
	return startFakeWith(t, fakeOptions{}, handle)
}

func startFakeWith(t *testing.T, opts fakeOptions, handle func(fc *fakeConn, corr uint32, req wire.Request)) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveFake(t, ln, handle, opts)
}

// startFakeTLS is startFake behind a TLS listener with cfg.
func startFakeTLS(t *testing.T, cfg *tls.Config, handle func(fc *fakeConn, corr uint32, req wire.Request)) *fakeBroker {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveFake(t, ln, handle, fakeOptions{})
}

func serveFake(t *testing.T, ln net.Listener, handle func(fc *fakeConn, corr uint32, req wire.Request), opts fakeOptions) *fakeBroker {
	f := &fakeBroker{ln: ln, handle: handle, opts: opts}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			fc := &fakeConn{nc: nc}
			f.mu.Lock()
			f.conns = append(f.conns, fc)
			f.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.serve(fc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, fc := range f.conns {
			fc.nc.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	return f
}

func (f *fakeBroker) serve(fc *fakeConn) {
	first := firstFrame{}
	if tc, ok := fc.nc.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return
		}
		first.tls = true
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
			first.peerCN = certs[0].Subject.CommonName
		}
	}
	defer fc.nc.Close()
	br := bufio.NewReader(fc.nc)
	authed := false
	for n := 0; ; {
		body, err := wire.ReadFrame(br, 0, nil)
		if errors.Is(err, wire.ErrFrameTooLarge) {
			// As the broker does; a TLS ClientHello sent to a plain
			// listener reads as such a frame.
			fc.refuse(0, wire.ReasonFrameTooLarge)
		}
		if err != nil {
			return
		}
		key, corr, payload, err := wire.ParseRequestHeader(body)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.keys = append(f.keys, key)
		f.mu.Unlock()
		if key == wire.KeyAPIVersions {
			f.mu.Lock()
			opts := f.opts
			f.mu.Unlock()
			switch {
			case !authed && opts.strict:
				fc.refuse(corr, wire.ReasonAuthRequired)
				return
			case opts.versions != nil:
				fc.ok(corr, opts.versions)
			default:
				fc.refuse(corr, wire.ReasonUnknownAPIKey)
			}
			continue
		}
		if n == 0 {
			first.key, first.payload = key, bytes.Clone(payload)
			f.mu.Lock()
			f.firsts = append(f.firsts, first)
			f.mu.Unlock()
		}
		n++
		req, err := wire.DecodeRequest(key, payload)
		if err != nil {
			fc.refuse(corr, wire.ReasonMalformedRequest)
			continue
		}
		switch req.(type) {
		case *wire.AuthRequest, *wire.MTLSAuthRequest, *wire.TokenAuthRequest:
			f.mu.Lock()
			f.auths++
			f.mu.Unlock()
			authed = true
			fc.ok(corr, wire.TokenResponse{Token: "t"})
			continue
		}
		f.handle(fc, corr, req)
	}
}

// setOptions changes how later api_versions frames are answered.
func (f *fakeBroker) setOptions(opts fakeOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opts = opts
}

// receivedKeys returns the key of every request received so far.
func (f *fakeBroker) receivedKeys() []uint16 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.keys)
}

func (f *fakeBroker) authCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.auths
}

// firstFrames returns the first frame of every connection so far.
func (f *fakeBroker) firstFrames() []firstFrame {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.firsts)
}

// dropAll closes every server-side connection.
func (f *fakeBroker) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fc := range f.conns {
		fc.nc.Close()
	}
}

func dialFake(t *testing.T, f *fakeBroker, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{WithCredentials("u", "p")}, opts...)
	c, err := Dial(t.Context(), f.ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ignore never answers.
func ignore(*fakeConn, uint32, wire.Request) {}

func TestDialNeedsCredentials(t *testing.T) {
	f := startFake(t, ignore)
	if _, err := Dial(t.Context(), f.ln.Addr().String()); err == nil {
		t.Fatal("Dial without credentials succeeded")
	}
}

// TestPipelinedAnswersOutOfOrder holds 64 concurrent requests until all
// arrived, answers them in reverse, and checks each caller got its own
// answer: routing is by correlation id, not by arrival order.
func TestPipelinedAnswersOutOfOrder(t *testing.T) {
	const n = 64
	var (
		mu   sync.Mutex
		held []func()
	)
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		topic := *req.(*wire.ListGroupsRequest).Topic
		mu.Lock()
		defer mu.Unlock()
		held = append(held, func() { fc.ok(corr, wire.ListGroupsResponse{Groups: []string{topic}}) })
		if len(held) == n {
			for i := len(held) - 1; i >= 0; i-- {
				held[i]()
			}
		}
	})
	c := dialFake(t, f)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			topic := string(rune('A' + i))
			groups, err := c.ListGroups(t.Context(), topic)
			if err == nil && (len(groups) != 1 || groups[0] != topic) {
				err = errors.New("got " + groups[0] + " for " + topic)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCloseFailsWaitingCalls(t *testing.T) {
	arrived := make(chan struct{})
	f := startFake(t, func(*fakeConn, uint32, wire.Request) { close(arrived) })
	c := dialFake(t, f)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Status(t.Context())
		errc <- err
	}()
	<-arrived
	c.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting call: got %v, want ErrClosed", err)
	}
	if _, err := c.Status(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: got %v, want ErrClosed", err)
	}
}

// TestCancelLeavesConnectionUsable cancels a call the broker never
// answers; the late answer must not confuse the next call.
func TestCancelLeavesConnectionUsable(t *testing.T) {
	var first sync.Once
	arrived := make(chan struct{})
	release := make(chan func())
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		answer := func() { fc.ok(corr, wire.StatusResponse{NodeID: "n"}) }
		held := false
		first.Do(func() {
			held = true
			close(arrived)
			go func() { release <- answer }()
		})
		if !held {
			answer()
		}
	})
	c := dialFake(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Status(ctx)
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: got %v", err)
	}
	(<-release)() // the late answer arrives for a call nobody waits for
	st, err := c.Status(t.Context())
	if err != nil || st.NodeID != "n" {
		t.Fatalf("next call: %+v, %v", st, err)
	}
}

func TestRetriesRetriableReasons(t *testing.T) {
	tests := []struct {
		name     string
		reasons  []string // answers before success
		attempts int
		want     error
		calls    int
	}{
		{"retriable then ok", []string{"migrating", "not_owner"}, 5, nil, 3},
		{"retries run out", []string{"no_quorum", "no_quorum", "no_quorum"}, 3, ErrNoQuorum, 3},
		{"not retriable", []string{"no_such_topic"}, 5, ErrNoSuchTopic, 1},
		{"retry disabled", []string{"retry"}, 1, ErrRetry, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				calls int
			)
			f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
				mu.Lock()
				i := calls
				calls++
				mu.Unlock()
				if i < len(tc.reasons) {
					fc.refuse(corr, tc.reasons[i])
					return
				}
				fc.ok(corr, nil)
			})
			c := dialFake(t, f, WithRetry(tc.attempts, 1))
			err := c.Commit(t.Context(), "t", CommitOptions{Group: "g", Cursor: "cursor"})
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != nil && IsRetriable(err) != wire.IsRetriable(tc.want.(*Error).Reason) {
				t.Fatalf("IsRetriable(%v) = %v", err, IsRetriable(err))
			}
			mu.Lock()
			defer mu.Unlock()
			if calls != tc.calls {
				t.Fatalf("broker saw %d attempts, want %d", calls, tc.calls)
			}
		})
	}
}

func TestRequestTimeout(t *testing.T) {
	f := startFake(t, ignore)
	c := dialFake(t, f, WithRequestTimeout(20*time.Millisecond), WithRetry(1, 0))
	if _, err := c.Status(t.Context()); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("got %v, want ErrRequestTimeout", err)
	}
}

// TestRedialsAfterConnectionLoss drops the connection under the client;
// the next call dials and authenticates again.
func TestRedialsAfterConnectionLoss(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
	})
	c := dialFake(t, f)
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.dropAll()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("call after the connection dropped: %v", err)
	}
	if got := f.authCount(); got != 2 {
		t.Fatalf("authenticated %d times, want 2", got)
	}
}

// TestConnectionLevelRefusal: an error on correlation id 0 ends the
// connection and fails the calls waiting on it.
func TestConnectionLevelRefusal(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		fc.refuse(0, wire.ReasonFrameTooLarge)
	})
	c := dialFake(t, f, WithRetry(1, 0))
	_, err := c.Status(t.Context())
	if !errors.Is(err, ErrDisconnected) || !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrDisconnected wrapping ErrFrameTooLarge", err)
	}
}

func TestRequestTooLargeIsNotSent(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		fc.ok(corr, wire.CountResponse{Count: 1})
	})
	c := dialFake(t, f, WithMaxFrame(1024))
	_, err := c.Produce(t.Context(), "t", Record{Value: make([]byte, 2048)})
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("got %v, want ErrRequestTooLarge", err)
	}
	if n, err := c.Produce(t.Context(), "t", Record{Value: []byte("small")}); err != nil || n != 1 {
		t.Fatalf("connection unusable after a refused request: %d, %v", n, err)
	}
}

func TestDialUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Dial(t.Context(), addr, WithCredentials("u", "p"))
	if !errors.Is(err, ErrDisconnected) || !IsRetriable(err) {
		t.Fatalf("dial of a closed port: %v, want ErrDisconnected", err)
	}
}

// A split or merge refused not_owner went to a node that does not write
// the range: it is answered at once, not retried on the same node.
func TestSplitAndMergeDoNotRetryNotOwner(t *testing.T) {
	var (
		mu    sync.Mutex
		calls int
	)
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		fc.refuse(corr, wire.ReasonNotOwner)
	})
	c := dialFake(t, f, WithRetry(5, 1))
	if _, err := c.SplitRange(t.Context(), "t", 1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("split: %v, want ErrNotOwner", err)
	}
	if _, err := c.MergeRanges(t.Context(), "t", 1, 2); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("merge: %v, want ErrNotOwner", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("broker saw %d attempts, want 2 (one each)", calls)
	}
}
