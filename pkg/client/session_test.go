package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// servesSessionAuth is an api_versions answer that lists session_auth
// (and no batch keys: the client stays on wire v1 otherwise).
var servesSessionAuth = fakeOptions{versions: &wire.APIVersionsResponse{
	Keys: []wire.KeyVersion{{Key: wire.KeySessionAuth, Min: 1, Max: 1}},
}}

// recordPauses makes the client record the pauses of paced redials
// instead of sleeping them; events gets "pause" in order with the
// fake's own events.
func recordPauses(mu *sync.Mutex, pauses *[]time.Duration, events *[]string) Option {
	return func(c *config) {
		c.pause = func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			*pauses = append(*pauses, d)
			*events = append(*events, "pause")
			return ctx.Err()
		}
	}
}

// TestStormRefusalWaitsTheHint: a session_auth refused with
// rate_limit_exceeded and a retry-after hint makes the redial wait at
// least the hint, and at most half as much again, before it dials again;
// the answer's token replaces the one kept.
func TestStormRefusalWaitsTheHint(t *testing.T) {
	const hint = 1500 * time.Millisecond
	var (
		mu     sync.Mutex
		pauses []time.Duration
		events []string
		tokens []string
	)
	f := startFakeWith(t, servesSessionAuth, func(fc *fakeConn, corr uint32, req wire.Request) {
		switch r := req.(type) {
		case *wire.SessionAuthRequest:
			mu.Lock()
			tokens = append(tokens, deref(r.Token))
			first := len(tokens) == 1
			events = append(events, "session_auth")
			mu.Unlock()
			if r.User == nil || *r.User != "u" || r.Password == nil || *r.Password != "p" {
				fc.refuse(corr, wire.ReasonInvalidCredentials)
				return
			}
			if first {
				fc.reply(wire.AppendHintErrorFrame(nil, corr, wire.ReasonRateLimitExceeded, uint32(hint.Milliseconds())))
				fc.nc.Close()
				return
			}
			fc.ok(corr, wire.SessionAuthResponse{Token: "t2", ExpiresMs: uint64(time.Now().Add(time.Hour).UnixMilli()), Resumed: true})
		default:
			fc.ok(corr, wire.StatusResponse{NodeID: "n"})
		}
	})
	c := dialFake(t, f, recordPauses(&mu, &pauses, &events))
	callAcrossDrop(t, c, f)
	if !c.cur.resumed {
		t.Fatal("the redial did not resume")
	}

	mu.Lock()
	defer mu.Unlock()
	wantHintPause(t, events, pauses, hint)
	// The fake's v1 auth answered "t": both session_auth frames carry it.
	if !slices.Equal(tokens, []string{"t", "t"}) {
		t.Fatalf("tokens sent %q, want the login's twice", tokens)
	}
	c.cfg.sess.mu.Lock()
	defer c.cfg.sess.mu.Unlock()
	if c.cfg.sess.token != "t2" {
		t.Fatal("the session_auth answer's token was not kept")
	}
}

// TestTokenOnlyResumeFallsBack: a certificate or JWT client resumes with
// the token alone; refused (its session expired, or a node with
// resumption turned off), it dials again at once with its own login.
func TestTokenOnlyResumeFallsBack(t *testing.T) {
	for _, reason := range []string{wire.ReasonSessionExpired, wire.ReasonNotEnabled} {
		t.Run(reason, func(t *testing.T) {
			f := startFakeWith(t, servesSessionAuth, func(fc *fakeConn, corr uint32, req wire.Request) {
				switch r := req.(type) {
				case *wire.SessionAuthRequest:
					if r.User != nil || r.Password != nil || deref(r.Token) != "t" {
						fc.refuse(corr, wire.ReasonMalformedRequest)
						return
					}
					fc.reply(wire.AppendHintErrorFrame(nil, corr, reason, 0))
					fc.nc.Close()
				default:
					fc.ok(corr, wire.StatusResponse{NodeID: "n"})
				}
			})
			c := dialFake(t, f, WithToken("jwt"))
			callAcrossDrop(t, c, f)
			wantFirstKeys(t, f, wire.KeyTokenAuth, wire.KeySessionAuth, wire.KeyTokenAuth)
		})
	}
}

// wantHintPause fails unless the client sent session_auth, paused once
// for the node's hint (at most half as much again) and sent it again.
// events and pauses are those recordPauses recorded, read under its lock.
func wantHintPause(t *testing.T, events []string, pauses []time.Duration, hint time.Duration) {
	t.Helper()
	if want := []string{"session_auth", "pause", "session_auth"}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	if len(pauses) != 1 || pauses[0] < hint || pauses[0] > hint+hint/2 {
		t.Fatalf("paused %v, want one pause in [%v, %v]", pauses, hint, hint+hint/2)
	}
}

// callAcrossDrop calls c before and after f drops every connection: the
// second call must succeed on a new one.
func callAcrossDrop(t *testing.T, c *Client, f *fakeBroker) {
	t.Helper()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.dropAll()
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("call after the connection dropped: %v", err)
	}
}

// wantFirstKeys fails unless the first frames of f's connections had
// the request keys want, in order.
func wantFirstKeys(t *testing.T, f *fakeBroker, want ...uint16) {
	t.Helper()
	if keys := firstKeys(f); !slices.Equal(keys, want) {
		t.Fatalf("first frames %v, want %v", keys, want)
	}
}

func firstKeys(f *fakeBroker) []uint16 {
	var keys []uint16
	for _, ff := range f.firstFrames() {
		keys = append(keys, ff.key)
	}
	return keys
}

// TestFirstDialWaitsTheHint: with WithDialRetry, the first Dial of a
// password client logs in with session_auth (user and password, no token
// yet), so the node's refusal for load carries its retry-after hint; the
// dial waits at least the hint, at most half as much again, dials again
// and keeps the answer's token.
func TestFirstDialWaitsTheHint(t *testing.T) {
	const hint = 800 * time.Millisecond
	var (
		mu     sync.Mutex
		pauses []time.Duration
		events []string
	)
	f := startFakeWith(t, servesSessionAuth, func(fc *fakeConn, corr uint32, req wire.Request) {
		switch r := req.(type) {
		case *wire.SessionAuthRequest:
			mu.Lock()
			events = append(events, "session_auth")
			first := len(events) == 1
			mu.Unlock()
			if r.Token != nil || deref(r.User) != "u" || deref(r.Password) != "p" {
				fc.refuse(corr, wire.ReasonInvalidCredentials)
				return
			}
			if first {
				fc.reply(wire.AppendHintErrorFrame(nil, corr, wire.ReasonRateLimitExceeded, uint32(hint.Milliseconds())))
				fc.nc.Close()
				return
			}
			fc.ok(corr, wire.SessionAuthResponse{Token: "s1", ExpiresMs: uint64(time.Now().Add(time.Hour).UnixMilli())})
		default:
			fc.ok(corr, wire.StatusResponse{NodeID: "n"})
		}
	})
	c := dialFake(t, f, WithDialRetry(), recordPauses(&mu, &pauses, &events))
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	wantHintPause(t, events, pauses, hint)
	if f.authCount() != 0 {
		t.Fatalf("%d auth (key 0) logins, want none", f.authCount())
	}
	c.cfg.sess.mu.Lock()
	defer c.cfg.sess.mu.Unlock()
	if c.cfg.sess.token != "s1" {
		t.Fatal("the session_auth answer's token was not kept")
	}
}

// TestFirstDialRefusalReportsTheHint: a first Dial with WithDialRetry
// whose context ends while it waits returns the cancellation and the
// node's refusal, with its hint.
func TestFirstDialRefusalReportsTheHint(t *testing.T) {
	const hint = 250 * time.Millisecond
	f := startFakeWith(t, servesSessionAuth, func(fc *fakeConn, corr uint32, req wire.Request) {
		fc.reply(wire.AppendHintErrorFrame(nil, corr, wire.ReasonRateLimitExceeded, uint32(hint.Milliseconds())))
		fc.nc.Close()
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop := func(c *config) {
		c.pause = func(context.Context, time.Duration) error {
			cancel()
			return context.Cause(ctx)
		}
	}
	_, err := Dial(ctx, f.ln.Addr().String(), WithCredentials("u", "p"), WithDialRetry(), stop)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrRateLimitExceeded) || RetryAfter(err) != hint {
		t.Fatalf("dial: %v (retry after %v), want the cancellation and rate_limit_exceeded with a %v hint", err, RetryAfter(err), hint)
	}
}

// TestFirstDialWithoutSessionAuth: a node that does not know session_auth
// refuses it as a first frame (auth_required, and hangs up); the first
// Dial then logs in with auth (key 0) at once, without a pause, and
// later dials to that node go straight to auth.
func TestFirstDialWithoutSessionAuth(t *testing.T) {
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		if _, ok := req.(*wire.SessionAuthRequest); ok {
			fc.refuse(corr, wire.ReasonAuthRequired)
			fc.nc.Close()
			return
		}
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
	})
	var (
		mu     sync.Mutex
		pauses []time.Duration
		events []string
	)
	c := dialFake(t, f, WithDialRetry(), recordPauses(&mu, &pauses, &events))
	callAcrossDrop(t, c, f)
	wantFirstKeys(t, f, wire.KeySessionAuth, wire.KeyAuth, wire.KeyAuth)
	mu.Lock()
	defer mu.Unlock()
	if len(pauses) != 0 {
		t.Fatalf("paused %v, want no pause", pauses)
	}
}

// TestPlainDialKeepsItsLogin: without WithDialRetry, the first Dial sends
// the configured login's own frame until the node has listed
// session_auth.
func TestPlainDialKeepsItsLogin(t *testing.T) {
	f := startFakeWith(t, servesSessionAuth, func(fc *fakeConn, corr uint32, req wire.Request) {
		fc.ok(corr, wire.StatusResponse{NodeID: "n"})
	})
	dialFake(t, f)
	wantFirstKeys(t, f, wire.KeyAuth)
}

// refuseAll is a node past its connection limit: every connection is
// refused on correlation id 0 and closed.
func refuseAll(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Write(wire.AppendErrorFrame(nil, 0, wire.ReasonConnectionLimitExceeded))
			nc.Close()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// TestDialRefusedForLoad: Dial returns an admission refusal at once;
// with WithDialRetry it dials again, paced by full-jitter back-off, until
// its context ends.
func TestDialRefusedForLoad(t *testing.T) {
	addr := refuseAll(t)
	if _, err := Dial(t.Context(), addr, WithCredentials("u", "p")); !errors.Is(err, ErrConnectionLimitExceeded) {
		t.Fatalf("dial: %v, want connection_limit_exceeded", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var pauses []time.Duration
	count := func(c *config) {
		c.pause = func(_ context.Context, d time.Duration) error {
			pauses = append(pauses, d)
			if len(pauses) == 4 {
				cancel()
				return context.Cause(ctx)
			}
			return nil
		}
	}
	_, err := Dial(ctx, addr, WithCredentials("u", "p"), WithDialRetry(), count)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrConnectionLimitExceeded) {
		t.Fatalf("dial with retry: %v, want the cancellation and the last refusal", err)
	}
	for i, d := range pauses {
		if limit := stormBase << i; d < 0 || d > limit {
			t.Fatalf("pause %d = %v, want within [0, %v]", i+1, d, limit)
		}
	}
}

func TestRetryAfterOfAHintError(t *testing.T) {
	frame := wire.AppendHintErrorFrame(nil, 1, wire.ReasonRateLimitExceeded, 250)
	r := reply{code: wire.CodeErrorHint, payload: frame[wire.LenPrefixSize+6:]}
	_, err := r.result()
	if !errors.Is(err, ErrRateLimitExceeded) || !IsRetriable(err) || RetryAfter(err) != 250*time.Millisecond {
		t.Fatalf("hint answer: %v (retry after %v)", err, RetryAfter(err))
	}
	if RetryAfter(ErrRateLimitExceeded) != 0 || RetryAfter(errors.New("x")) != 0 {
		t.Fatal("no hint should be 0")
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
