package client_test

import (
	"errors"
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// TestSessionTokenLogsIn: a client given only another login's session
// token logs in as that user, with that user's permissions, and is
// answered a token of its own.
func TestSessionTokenLogsIn(t *testing.T) {
	n := clienttest.Start(t)
	ctx := t.Context()
	for _, u := range []struct {
		user, password string
		admin          bool
	}{{"admin", "admin123", true}, {"app", "app123", false}} {
		pw := n.Client(t, u.user, u.password)
		tok, exp := pw.SessionToken()
		if tok == "" {
			t.Fatalf("%s: no session token after a password login", u.user)
		}
		c, err := client.Dial(ctx, n.Addr(), client.WithSessionToken(tok))
		if err != nil {
			t.Fatalf("%s: dial with the token: %v", u.user, err)
		}
		if !client.Resumed(c) {
			t.Errorf("%s: the token's login was not a resume", u.user)
		}
		_, err = c.ClusterStatus(ctx)
		if u.admin != (err == nil) || !u.admin && !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("%s (admin %v): cluster_status: %v", u.user, u.admin, err)
		}
		fresh, freshExp := c.SessionToken()
		if fresh == "" || !exp.IsZero() && freshExp.Before(exp) {
			t.Errorf("%s: token after resuming %q expiring %v (the first expired %v)", u.user, fresh, freshExp, exp)
		}
		c.Close()
	}
}

// TestSessionTokenRefused: a revoked or forged token fails the dial with
// the node's reason; the client has nothing else to log in with.
func TestSessionTokenRefused(t *testing.T) {
	n := clienttest.Start(t)
	ctx := t.Context()
	admin := n.Client(t, "admin", "admin123")
	app := n.Client(t, "app", "app123")
	tok, _ := app.SessionToken()
	if err := admin.ChangePassword(ctx, "app", "app123"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, n.Addr(), client.WithSessionToken(tok)); !errors.Is(err, client.ErrSessionRevoked) {
		t.Fatalf("revoked token: %v, want session_revoked", err)
	}
	if _, err := client.Dial(ctx, n.Addr(), client.WithSessionToken("not-a-token")); !errors.Is(err, client.ErrInvalidSession) {
		t.Fatalf("forged token: %v, want invalid_session", err)
	}
	if _, err := client.Dial(ctx, n.Addr(), client.WithSessionToken("")); err == nil {
		t.Fatal("an empty token dialled")
	}
	if _, err := client.Dial(ctx, n.Addr(), client.WithSessionToken(tok), client.WithWireVersion(1)); err == nil {
		t.Fatal("a token with wire v1 dialled")
	}
}
