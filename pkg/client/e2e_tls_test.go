package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// TestE2ETLS runs the client against a real node that accepts TLS only
// and mtls_auth: password logins and mTLS logins work over TLS, through
// requests, long polls and a subscription (which dials its own
// connection), while a plaintext client is refused with tls_required.
func TestE2ETLS(t *testing.T) {
	caFile, serverCert, serverKey, adminCert, adminKey := client.NewTestPKI(t, "admin")
	n := clienttest.Start(t, clienttest.WithTLS(serverCert, serverKey, caFile), clienttest.WithTLSOnly(), clienttest.WithMTLSAuth())
	ctx := t.Context()

	plain, err := client.NewTLSConfig(caFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	app := n.Client(t, "app", "app123", client.WithTLS(plain))
	if err := app.CreateTopic(ctx, "secure"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Produce(ctx, "secure", client.Record{Key: []byte("k"), Value: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	page, err := app.Fetch(ctx, "secure", client.FetchOptions{Max: 10})
	if err != nil || len(page.Records) != 1 || string(page.Records[0].Value) != "v1" {
		t.Fatalf("fetch over TLS: %+v, %v", page, err)
	}

	withCert, err := client.NewTLSConfig(caFile, adminCert, adminKey, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.Dial(ctx, n.Addr(), client.WithTLS(withCert), client.WithMTLSAuth())
	if err != nil {
		t.Fatalf("mtls_auth as admin: %v", err)
	}
	defer admin.Close()
	if _, err := admin.ListUsers(ctx); err != nil {
		t.Fatalf("an admin request after mtls_auth: %v", err)
	}
	sub, err := admin.Subscribe(ctx, "secure", client.SubscribeOptions{Group: "g"})
	if err != nil {
		t.Fatalf("subscribe over TLS: %v", err)
	}
	defer sub.Close()
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := sub.Next(nctx)
	if err != nil || len(got.Records) != 1 || string(got.Records[0].Value) != "v1" {
		t.Fatalf("pushed page: %+v, %v", got, err)
	}

	_, err = client.Dial(ctx, n.Addr(), client.WithCredentials("app", "app123"))
	if !errors.Is(err, client.ErrTLSRequired) || client.IsRetriable(err) {
		t.Fatalf("plaintext dial of a TLS-only node: %v, want tls_required, not retriable", err)
	}
}

// TestNodeRefusesEmptyPassword: the node itself, not only the CLI, refuses
// an empty (or over-long) new password and creates nothing.
func TestNodeRefusesEmptyPassword(t *testing.T) {
	n := clienttest.Start(t)
	c, err := client.Dial(t.Context(), n.Addr(), client.WithCredentials("admin", "admin123"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateUser(t.Context(), "nopass", client.UserOptions{Password: "", Perms: []string{"consume"}}); !errors.Is(err, client.ErrInvalidPassword) {
		t.Fatalf("create with an empty password: %v", err)
	}
	if err := c.ChangePassword(t.Context(), "admin", strings.Repeat("x", 1025)); !errors.Is(err, client.ErrInvalidPassword) {
		t.Fatalf("change to a 1025-byte password: %v", err)
	}
	users, err := c.ListUsers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if u.Name == "nopass" {
			t.Fatal("a user with an empty password was created")
		}
	}
}
