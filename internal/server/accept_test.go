package server

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// failingListener fails its first n accepts the way accept(2) fails when
// the process is out of descriptors, then accepts normally.
type failingListener struct {
	net.Listener
	n      atomic.Int32
	always bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.always || l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func loopbackListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestAcceptErrorsDoNotStopServe: accept fails with EMFILE several times;
// the server counts each failure, backs off, keeps listening, and serves
// the client that connects afterwards.
func TestAcceptErrorsDoNotStopServe(t *testing.T) {
	const failures = 6
	ln := &failingListener{Listener: loopbackListener(t)}
	ln.n.Store(failures)
	s := serveOn(t, Config{}, ln)

	c := dialClient(t, s)
	c.auth()
	c.request(2, &wire.StatusRequest{})
	c.answer(2)
	if got := s.Stats().AcceptErrors; got != failures {
		t.Fatalf("AcceptErrors = %d, want %d", got, failures)
	}
	// A second client, after the errors: the loop is still accepting.
	d := dialClient(t, s)
	d.auth()
}

// TestShutdownEndsAcceptBackoff: a listener that only fails keeps Serve
// backing off; Shutdown ends it at once rather than after a back-off.
func TestShutdownEndsAcceptBackoff(t *testing.T) {
	ln := &failingListener{Listener: loopbackListener(t), always: true}
	s := New(Config{}, nil)
	if err := s.prepare(); err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	waitFor(t, "accept errors", func() {}, func() bool { return s.Stats().AcceptErrors >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Shutdown(ctx)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still running after Shutdown")
	}
}

func TestRateLog(t *testing.T) {
	var r rateLog
	t0 := time.Unix(1000, 0)
	if n, ok := r.allow(t0, time.Second); !ok || n != 0 {
		t.Fatalf("first: %d %v", n, ok)
	}
	for i := range 5 {
		if _, ok := r.allow(t0.Add(time.Duration(i)*100*time.Millisecond), time.Second); ok {
			t.Fatalf("message %d within the interval was let through", i)
		}
	}
	if n, ok := r.allow(t0.Add(time.Second), time.Second); !ok || n != 5 {
		t.Fatalf("after the interval: %d suppressed, %v", n, ok)
	}
}
