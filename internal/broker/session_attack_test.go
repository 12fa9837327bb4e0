package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/auth/authtest"
	"github.com/malachi-log/malachi/internal/clock"
)

// TestQueueRefusalIsNotAFailedLogin: a password login refused because the
// login queue is full (rate_limit_exceeded with a retry-after hint) has not
// guessed anything: the client is told to come back, and the docs and the
// code (busy) call it capacity, not guessing. It must not count towards the
// lockout of its (user, address) pair. Otherwise anyone who can fill the
// queue (a reconnect storm, or an attacker from a handful of addresses)
// locks legitimate users out of the account, from their own address, even
// though they only ever sent the right password.
func TestQueueRefusalIsNotAFailedLogin(t *testing.T) {
	b, _ := openAuth(t, AuthConfig{HashConcurrency: 1, LoginQueue: 1, LoginQueuePerAddr: 1, MaxFailures: 3})
	ctx := context.Background()
	q := b.authn.logins

	// Someone else holds the only hashing slot and the only queue place.
	if err := q.acquire(ctx, "203.0.113.1", never); err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() { waiter <- q.acquire(ctx, "203.0.113.2", never) }()
	waitQueued(t, q, 1)

	// The legitimate client, right password, follows the hint each time.
	good := Credentials{Method: MethodPassword, User: "app", Password: "app123", Addr: "10.0.0.5"}
	for i := range 3 {
		_, err := b.Login(ctx, good)
		if !errors.Is(err, ErrRateLimited) || RetryAfter(err) <= 0 {
			t.Fatalf("login %d with the queue full: %v (hint %v)", i, err, RetryAfter(err))
		}
	}

	// The storm passes.
	q.release(time.Millisecond) // to the waiter
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	q.release(time.Millisecond)

	if _, err := b.Login(ctx, good); err != nil {
		t.Fatalf("right password after the queue emptied: %v (queue refusals were counted as failed logins)", err)
	}
}

// TestQueueFullFromFewAddressesStarvesOthers: the login queue is meant to
// keep one address from starving the others, but its total bound is only
// LoginQueue/LoginQueuePerAddr addresses deep (1024/64 = 16 by default; an
// IPv6 /48 holds 65,536 /64s). Once that many addresses fill it, a login
// from an address with nothing queued is refused outright, without ever
// getting its turn.
func TestQueueFullFromFewAddressesStarvesOthers(t *testing.T) {
	q := newLoginQueue(1, 1024, 64)
	ctx := context.Background()
	if err := q.acquire(ctx, "hog", never); err != nil {
		t.Fatal(err)
	}
	stop := make(chan time.Time)
	timeout := func() <-chan time.Time { return stop }
	n := 0
	for a := range 16 {
		addr := "2001:db8:0:" + string(rune('a'+a)) + "::/64"
		for range 64 {
			go q.acquire(ctx, addr, timeout)
			n++
			waitQueued(t, q, n)
		}
	}
	defer close(stop)
	const newcomer = "198.51.100.7"
	refused := make(chan error, 1)
	go func() { refused <- q.acquire(ctx, newcomer, timeout) }()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-refused:
			t.Fatalf("a login from an address with nothing queued was refused at once (%v) while 16 addresses hold the whole queue: it never gets a turn", err)
		case <-deadline:
			t.Fatal("the newcomer neither waited in line nor was refused")
		case <-tick.C:
		}
		q.mu.Lock()
		inLine := len(q.lines[newcomer])
		q.mu.Unlock()
		if inLine == 1 {
			return // it waits for its turn, as fairness promises
		}
	}
}

// TestResumeAfterMethodDisabled: an operator who turns mtls_auth off (a
// CA leaked, say) and restarts expects certificate logins to stop. A
// session token from a certificate login made before the restart still
// resumes it, and can be renewed for up to SessionMaxAge: the login method
// a token continues is never checked against the configuration.
func TestResumeAfterMethodDisabled(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	mc := clock.NewManual(time.Now())
	cfg := Config{DataDir: dir, Clock: mc, Logger: slog.New(slog.DiscardHandler), Auth: AuthConfig{MTLS: MTLSConfig{Enabled: true}}}
	b, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	leaf := authtest.NewCA(t, "ca").Issue(t, authtest.Leaf{CN: "admin"}).Leaf
	st := &tls.ConnectionState{HandshakeComplete: true, PeerCertificates: []*x509.Certificate{leaf},
		VerifiedChains: [][]*x509.Certificate{{leaf}}}
	id, err := b.Login(ctx, Credentials{Method: MethodMTLS, TLS: st, ListenerVerifies: true, Addr: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()

	cfg.Auth.MTLS.Enabled = false
	b, err = Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Login(ctx, Credentials{Method: MethodMTLS, TLS: st, ListenerVerifies: true, Addr: "10.0.0.1"}); !errors.Is(err, ErrMTLSDisabled) {
		t.Fatalf("certificate login with mtls_auth off: %v", err)
	}
	plainTLS := &tls.ConnectionState{HandshakeComplete: true}
	got, err := b.Resume(Credentials{Token: id.Token, TLS: plainTLS, Addr: "10.0.0.1"})
	if err == nil {
		t.Fatalf("a certificate login session resumed as %q (admin %v) with mtls_auth turned off", got.User, IsAdmin(*got))
	}
}
