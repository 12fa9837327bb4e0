package client_test

import (
	"testing"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// restartKeepingAddr restarts n and skips the test if the node came back
// on another port: the clients dialled before would not find it.
func restartKeepingAddr(t *testing.T, n *clienttest.Node) {
	t.Helper()
	before := n.Addr()
	n.Restart(t)
	if n.Addr() != before {
		t.Skipf("restart moved the node from %s to %s; redial not exercised", before, n.Addr())
	}
}

// TestReconnectResumesSession: after a node restart (same data
// directory) the client logs in again with its session token, and the
// node checks no password.
func TestReconnectResumesSession(t *testing.T) {
	n := clienttest.Start(t)
	app := n.Client(t, "app", "app123")
	if _, err := app.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	if client.Resumed(app) {
		t.Fatal("the first connection claims to be resumed")
	}

	restartKeepingAddr(t, n)
	if _, err := app.Status(t.Context()); err != nil {
		t.Fatalf("call after the restart: %v", err)
	}
	if !client.Resumed(app) {
		t.Fatal("the redial did not resume its login")
	}
	if st := n.AuthStats(); st.HashesPeak != 0 {
		t.Fatalf("resuming hashed a password: %+v", st)
	}

	// The answer's token replaced the first: the next restart resumes too.
	restartKeepingAddr(t, n)
	if _, err := app.Status(t.Context()); err != nil || !client.Resumed(app) {
		t.Fatalf("second restart: resumed %v, %v", client.Resumed(app), err)
	}
	if st := n.AuthStats(); st.HashesPeak != 0 {
		t.Fatalf("resuming hashed a password: %+v", st)
	}
}

// TestRevokedSessionFallsBackToPassword: a password change while the
// client is away revokes its token; the same session_auth frame carries
// the password, which logs it in.
func TestRevokedSessionFallsBackToPassword(t *testing.T) {
	n, admin := start(t)
	app := n.Client(t, "app", "app123")
	if _, err := app.Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The same password, set again: salted afresh, so earlier tokens are
	// revoked, and the client's credentials still hold.
	if err := admin.ChangePassword(t.Context(), "app", "app123"); err != nil {
		t.Fatal(err)
	}

	restartKeepingAddr(t, n)
	if _, err := app.Status(t.Context()); err != nil {
		t.Fatalf("call after the restart: %v", err)
	}
	if client.Resumed(app) {
		t.Fatal("a revoked token resumed")
	}
	if st := n.AuthStats(); st.HashesPeak == 0 {
		t.Fatalf("no password was checked: %+v", st)
	}
	// The password login answered a fresh token, which resumes.
	restartKeepingAddr(t, n)
	if _, err := app.Status(t.Context()); err != nil || !client.Resumed(app) {
		t.Fatalf("after the fallback: resumed %v, %v", client.Resumed(app), err)
	}
}
