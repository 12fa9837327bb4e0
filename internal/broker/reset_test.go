package broker_test

// The offline admin recovery, end to end: a real node on a directory, the
// reset while it is stopped, and logins against the node reopened there.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

func dial(t *testing.T, addr, user, password string) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithCredentials(user, password), client.WithRequestTimeout(10*time.Second))
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestResetPasswordOffline(t *testing.T) {
	dir := t.TempDir()
	n := clienttest.Start(t, clienttest.WithDataDir(dir))
	admin := n.Client(t, "admin", "admin123", client.WithRequestTimeout(10*time.Second))
	if err := admin.DeleteUser(t.Context(), "admin"); !errors.Is(err, client.ErrLastAdmin) {
		t.Fatalf("deleting the last admin: err = %v, want ErrLastAdmin", err)
	}
	if _, err := broker.ResetPassword(dir, "admin", "fresh-pass"); !errors.Is(err, broker.ErrDataDirLocked) {
		t.Fatalf("reset while the node runs: err = %v, want ErrDataDirLocked", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	if created, err := broker.ResetPassword(dir, "admin", "fresh-pass"); err != nil || created {
		t.Fatalf("reset admin: created %v, err %v; want an existing user reset", created, err)
	}
	if created, err := broker.ResetPassword(dir, "root", "root-pass"); err != nil || !created {
		t.Fatalf("reset root: created %v, err %v; want a new admin", created, err)
	}
	if _, err := broker.ResetPassword(dir, "root", ""); !errors.Is(err, broker.ErrInvalidPassword) {
		t.Fatalf("empty password: err = %v", err)
	}
	if _, err := broker.ResetPassword(t.TempDir(), "root", "x"); !errors.Is(err, broker.ErrNoDataDir) {
		t.Fatalf("reset of an empty directory: err = %v, want ErrNoDataDir", err)
	}

	n2, err := clienttest.New(clienttest.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n2.Close() })
	if _, err := dial(t, n2.Addr(), "admin", "admin123"); !errors.Is(err, client.ErrInvalidCredentials) {
		t.Fatalf("old password after reset: err = %v, want ErrInvalidCredentials", err)
	}
	if _, err := dial(t, n2.Addr(), "admin", "fresh-pass"); err != nil {
		t.Fatalf("new password: %v", err)
	}
	root, err := dial(t, n2.Addr(), "root", "root-pass")
	if err != nil {
		t.Fatalf("created admin: %v", err)
	}
	users, err := root.ListUsers(t.Context())
	if err != nil {
		t.Fatalf("created user cannot administer: %v", err)
	}
	for _, u := range users {
		if u.Name == "root" && len(u.Perms) == 1 && u.Perms[0] == "admin" {
			// With two admins, one of them may now be deleted.
			if err := root.DeleteUser(t.Context(), "admin"); err != nil {
				t.Fatalf("deleting one of two admins: %v", err)
			}
			return
		}
	}
	t.Fatalf("root is not an admin: %+v", users)
}
