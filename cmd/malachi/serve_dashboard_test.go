package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestServeDashboard: serve mounts the dashboard on its HTTP address by
// default; a login through its form reaches the node, and the node's
// audit log records it with the browser's address and method dashboard.
func TestServeDashboard(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	c.env = append(c.env, "MALACHI_AUDIT_LOG="+auditPath)
	node := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	base := "http://" + node.http
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	read := func(resp *http.Response, err error) (*http.Response, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	resp, page := read(b.Get(base + "/login"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("GET /login: %s, CSP %q", resp.Status, resp.Header.Get("Content-Security-Policy"))
	}
	m := regexp.MustCompile(`name="login_token" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no login form:\n%s", page)
	}
	resp, _ = read(b.PostForm(base+"/login", url.Values{"login_token": {m[1]}, "user": {"admin"}, "password": {"admin123"}}))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	if resp, body := read(b.Get(base + "/")); resp.StatusCode != http.StatusOK || !strings.Contains(body, "node-1") {
		t.Fatalf("overview: %s\n%s", resp.Status, body)
	}
	if resp, _ := read(b.Get(base + "/health")); resp.StatusCode != http.StatusOK {
		t.Fatalf("/health beside the dashboard: %s", resp.Status)
	}
	node.cmd.Process.Signal(syscall.SIGINT) // the audit log is flushed on a clean stop
	node.cmd.Wait()
	log, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, `"type":"dashboard_login"`) && strings.Contains(line, `"method":"dashboard"`) &&
			strings.Contains(line, `"peer":"127.0.0.1"`) && strings.Contains(line, `"result":"ok"`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no dashboard_login in the audit log:\n%s", log)
	}
	if strings.Contains(string(log), "admin123") {
		t.Fatal("the audit log holds the password")
	}
}

func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:4040":   "127.0.0.1:4040",
		"[::]:4040":      "[::1]:4040",
		"10.0.0.7:4040":  "10.0.0.7:4040",
		"127.0.0.1:4040": "127.0.0.1:4040",
	} {
		a, err := net.ResolveTCPAddr("tcp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialable(a); got != want {
			t.Errorf("dialable(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestServeDashboardLockoutIsPerBrowser: wrong passwords typed into the
// dashboard lock the user at the browser's address only: the same user
// still logs in on the client port from loopback and in the dashboard
// from another browser.
func TestServeDashboardLockoutIsPerBrowser(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	c.env = append(c.env, "MALACHI_DASHBOARD_TRUSTED_PROXIES=127.0.0.1/32")
	node := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	base := "http://" + node.http
	login := func(from, password string) (*http.Response, string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		b := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := b.Get(base + "/login")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`name="login_token" value="([^"]+)"`).FindStringSubmatch(string(page))
		if m == nil {
			t.Fatalf("no login form:\n%s", page)
		}
		form := url.Values{"login_token": {m[1]}, "user": {"admin"}, "password": {password}}
		req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", from)
		resp, err = b.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	for i := range 5 {
		if resp, body := login("203.0.113.7", "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %s\n%s", i+1, resp.Status, body)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, node.addr, client.WithCredentials("admin", "admin123"))
	if err != nil {
		t.Fatalf("admin on the client port from loopback after five wrong passwords in a browser: %v", err)
	}
	cl.Close()
	if resp, body := login("203.0.113.8", "admin123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("admin from another browser: %s\n%s", resp.Status, body)
	}
	// Loopback keeps its own count: a wrong password there is only wrong.
	_, err = client.Dial(ctx, node.addr, client.WithCredentials("admin", "wrong"))
	if !errors.Is(err, client.ErrInvalidCredentials) {
		t.Fatalf("a wrong password from loopback: %v, want invalid_credentials (no lock here)", err)
	}
}

func TestDashboardOnByDefaultOnlyWhereSafe(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4041}
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 4041}
	lan := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 4041}
	for _, c := range []struct {
		name       string
		f          dashboardFlags
		addr       net.Addr
		want, warn bool
	}{
		{"loopback by default", dashboardFlags{}, loop, true, false},
		{"all addresses by default", dashboardFlags{}, all, false, false},
		{"a LAN address by default", dashboardFlags{}, lan, false, false},
		{"behind HTTPS by default", dashboardFlags{secure: true}, all, true, false},
		{"asked for on all addresses", dashboardFlags{explicit: true, enabled: true}, all, true, true},
		{"asked for behind HTTPS", dashboardFlags{explicit: true, enabled: true, secure: true}, all, true, false},
		{"turned off on loopback", dashboardFlags{explicit: true}, loop, false, false},
	} {
		var logs bytes.Buffer
		got := c.f.resolve(c.addr, slog.New(slog.NewTextHandler(&logs, nil)))
		if got != c.want || (logs.Len() > 0) != c.warn {
			t.Errorf("%s: served %v, warning %q; want served %v, a warning %v", c.name, got, logs.String(), c.want, c.warn)
		}
	}
}

func TestDashboardHostsAndProxies(t *testing.T) {
	for flag, want := range map[string]string{
		"127.0.0.1:4041":      "console.example.net",
		"0.0.0.0:4041":        "console.example.net",
		"[::]:4041":           "console.example.net",
		"10.0.0.7:4041":       "console.example.net 10.0.0.7",
		"node1.internal:4041": "console.example.net node1.internal",
		":4041":               "console.example.net",
	} {
		got := strings.Join(httpHosts(flag, []string{"console.example.net"}), " ")
		if flag == "127.0.0.1:4041" {
			want += " 127.0.0.1"
		}
		if got != want {
			t.Errorf("httpHosts(%q) = %q, want %q", flag, got, want)
		}
	}
	ps, err := parseProxies([]string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/48"})
	if err != nil || len(ps) != 3 || ps[1].String() != "192.0.2.1/32" {
		t.Fatalf("parseProxies: %v %v", ps, err)
	}
	if _, err := parseProxies([]string{"not-a-cidr"}); err == nil {
		t.Fatal("parseProxies accepted a bad CIDR")
	}
}
