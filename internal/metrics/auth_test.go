package metrics_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metrics"
)

// countingAccess counts the checks that reach the broker.
type countingAccess struct {
	b     *broker.Broker
	calls atomic.Int64
}

func (c *countingAccess) MetricsAccess(ctx context.Context, cr broker.Credentials) error {
	c.calls.Add(1)
	return c.b.MetricsAccess(ctx, cr)
}

// get fetches path from the node with the header set (if any).
func get(t *testing.T, n *node, path, header, value string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, n.httpURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func basic(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

func TestMetricsRequireAnAdminLogin(t *testing.T) {
	var access *countingAccess
	n := startNodeWith(t, metrics.Options{}, func(b *broker.Broker) metrics.Access {
		access = &countingAccess{b: b}
		return access
	})

	resp, body := get(t, n, "/metrics", "", "")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" || strings.Contains(body, "malachi_up") {
		t.Fatalf("no credentials: %d %q %q, want 401 with a Basic challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), `Basic realm="malachi"`) {
		t.Errorf("challenge %q", resp.Header.Get("WWW-Authenticate"))
	}
	resp, _ = get(t, n, "/metrics", "Authorization", basic("admin", "wrong"))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong password: %d, want 401", resp.StatusCode)
	}
	resp, _ = get(t, n, "/metrics", "Authorization", basic("producer", "producer123"))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an account without the admin permission: %d, want 403", resp.StatusCode)
	}
	resp, _ = get(t, n, "/metrics", "Authorization", "Bearer not-a-token")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a bogus bearer token: %d, want 401", resp.StatusCode)
	}
	for _, open := range []string{"/health", "/ready"} {
		if resp, _ := get(t, n, open, "", ""); resp.StatusCode != http.StatusOK {
			t.Errorf("%s without credentials: %d, want 200", open, resp.StatusCode)
		}
	}

	// An admin's scrapes are served, and the credential is checked once
	// for the cache period, not hashed per scrape.
	before := access.calls.Load()
	for range 3 {
		resp, body := get(t, n, "/metrics", "Authorization", basic("admin", "admin123"))
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "malachi_up 1") {
			t.Fatalf("admin scrape: %d", resp.StatusCode)
		}
	}
	if got := access.calls.Load() - before; got != 1 {
		t.Errorf("three scrapes checked the password %d times, want 1", got)
	}
	// A session token from a login is accepted as a Bearer token.
	id, err := n.b.Login(t.Context(), broker.Credentials{Method: broker.MethodPassword, User: "admin", Password: "admin123", Addr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, n, "/metrics", "Authorization", "Bearer "+id.Token); resp.StatusCode != http.StatusOK {
		t.Errorf("a session token: %d, want 200", resp.StatusCode)
	}

	// The refusals for bad credentials are failed logins; the rest are
	// counted by reason only.
	if v, _ := gathered(t, n.m, "malachi_failed_auth_total", nil); v != 2 {
		t.Errorf("failed_auth_total = %v, want 2 (the wrong password and the bogus token)", v)
	}
	for reason, want := range map[string]float64{"auth_required": 1, "invalid_credentials": 1, "permission_denied": 1, "invalid_session": 1} {
		if v, _ := gathered(t, n.m, "malachi_metrics_scrapes_refused_total", map[string]string{"reason": reason}); v != want {
			t.Errorf("scrapes refused for %s = %v, want %v", reason, v, want)
		}
	}
}

func TestMetricsPasswordGuessesAreThrottled(t *testing.T) {
	n := startNodeWith(t, metrics.Options{}, func(b *broker.Broker) metrics.Access { return b })
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		resp, body := get(t, n, "/metrics", "Authorization", basic("admin", "guess"))
		if strings.TrimSpace(body) == "account_locked" || strings.TrimSpace(body) == "rate_limit_exceeded" {
			break
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %q", i, resp.StatusCode, body)
		}
		if time.Now().After(deadline) || i > 100 {
			t.Fatalf("%d wrong passwords were never throttled", i)
		}
	}
}
