package dashboard

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// recordingLogin is Config.Login in tests: it remembers the addresses it
// was given and answers err, or else logs in to the test node over its
// client port for a real token.
type recordingLogin struct {
	h     *harness
	mu    sync.Mutex
	addrs []string
	err   error
}

func (l *recordingLogin) Login(ctx context.Context, user, password, addr string) (string, bool, error) {
	l.mu.Lock()
	l.addrs = append(l.addrs, addr)
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return "", false, err
	}
	return l.h.dash.node.login(ctx, user, password)
}

func (l *recordingLogin) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.addrs...)
}

// startWithLogin starts a harness whose logins go through a
// recordingLogin, with the test server's peer (127.0.0.1) a trusted
// proxy so that X-Forwarded-For stands for the browser's address.
func startWithLogin(t *testing.T, cfg Config) (*harness, *recordingLogin) {
	t.Helper()
	l := &recordingLogin{}
	cfg.Login = l
	cfg.TrustedProxies = append(cfg.TrustedProxies, netip.MustParsePrefix("127.0.0.1/32"))
	h := start(t, cfg)
	l.h = h
	return h, l
}

// loginFrom posts the login form with X-Forwarded-For: from.
func (h *harness) loginFrom(t *testing.T, b *http.Client, from, user, password string) (*http.Response, string) {
	t.Helper()
	_, page := h.get(t, b, "/login")
	form := url.Values{"login_token": {find(t, loginTokenRE, page)}, "user": {user}, "password": {password}}
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if from != "" {
		req.Header.Set("X-Forwarded-For", from)
	}
	return h.do(t, b, req)
}

func (h *harness) do(t *testing.T, b *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestLoginCarriesTheBrowsersAddress: the node's login check is given
// the browser's address, read from X-Forwarded-For only when the peer is
// a trusted proxy, so the node's per-address lock and budget are the
// browser's, not the dashboard's.
func TestLoginCarriesTheBrowsersAddress(t *testing.T) {
	h, l := startWithLogin(t, Config{LoginBurst: 100})
	b := h.browser(t)
	if resp, body := h.loginFrom(t, b, "203.0.113.9", "admin", "admin123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s\n%s", resp.Status, body)
	}
	h.loginFrom(t, h.browser(t), "", "admin", "wrong")
	h.loginFrom(t, h.browser(t), "198.51.100.1, 127.0.0.1", "admin", "wrong") // a second trusted hop
	want := []string{"203.0.113.9", "127.0.0.1", "198.51.100.1"}
	if got := l.seen(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("addresses the login check saw: %v, want %v", got, want)
	}
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a page after the login: %s", resp.Status)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev := h.events[0]; ev.Peer != "203.0.113.9" {
		t.Fatalf("the audited login's peer: %q, want the browser's", ev.Peer)
	}
}

// TestForwardedForIgnoredFromUntrustedPeers: without a trusted proxy the
// header is the browser's to write, so it is not believed.
func TestForwardedForIgnoredFromUntrustedPeers(t *testing.T) {
	l := &recordingLogin{err: client.ErrInvalidCredentials}
	h := start(t, Config{Login: l, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	l.h = h
	h.loginFrom(t, h.browser(t), "203.0.113.9", "admin", "wrong")
	if got := l.seen(); len(got) != 1 || got[0] != "127.0.0.1" {
		t.Fatalf("address seen: %v, want the peer 127.0.0.1", got)
	}
}

// TestUserFailuresLimitedAcrossAddresses: failed logins of one user from
// many addresses hit the per-user limit; another user is not affected.
func TestUserFailuresLimitedAcrossAddresses(t *testing.T) {
	h, l := startWithLogin(t, Config{LoginBurst: 100, UserFailures: 3, LoginEvery: time.Minute})
	for i := range 3 {
		resp, _ := h.loginFrom(t, h.browser(t), "203.0.113."+strconv.Itoa(i+1), "admin", "wrong")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %s, want 401", i+1, resp.Status)
		}
	}
	resp, body := h.loginFrom(t, h.browser(t), "203.0.113.50", "admin", "admin123")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "Rate limited") || strings.Contains(body, "locked") {
		t.Fatalf("fourth attempt for admin from a new address: %s\n%s", resp.Status, body)
	}
	if n := len(l.seen()); n != 3 {
		t.Fatalf("the node was asked %d times, want 3 (the limited attempt never reaches it)", n)
	}
	if resp, _ := h.loginFrom(t, h.browser(t), "203.0.113.50", "producer", "producer123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("another user meanwhile: %s, want a login", resp.Status)
	}
	h.clock.add(time.Minute)
	if resp, _ := h.loginFrom(t, h.browser(t), "203.0.113.50", "admin", "admin123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("admin a minute later: %s, want a login", resp.Status)
	}
}

// TestIPv6AddressesLimitedByPrefix: addresses of one /64 share a bucket.
func TestIPv6AddressesLimitedByPrefix(t *testing.T) {
	h, _ := startWithLogin(t, Config{LoginBurst: 2, LoginEvery: time.Minute, UserFailures: 100})
	for _, a := range []string{"2001:db8::1", "2001:db8::2"} {
		if resp, _ := h.loginFrom(t, h.browser(t), a, "admin", "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("from %s: %s, want 401", a, resp.Status)
		}
	}
	if resp, _ := h.loginFrom(t, h.browser(t), "2001:db8::ffff:3", "admin", "wrong"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a third address of the /64: %s, want 429", resp.Status)
	}
	if resp, _ := h.loginFrom(t, h.browser(t), "2001:db8:0:1::1", "admin", "wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("another /64: %s, want 401", resp.Status)
	}
}

// TestLockedAndRateLimitedTold: the page says which refusal it was.
func TestLockedAndRateLimitedTold(t *testing.T) {
	for _, c := range []struct {
		err        error
		want, fail string
	}{
		{client.ErrAccountLocked, "locked", "Rate limited"},
		{client.ErrRateLimitExceeded, "Rate limited", "locked"},
	} {
		l := &recordingLogin{err: c.err}
		h := start(t, Config{Login: l})
		l.h = h
		resp, body := h.tryLogin(t, h.browser(t), "admin", "admin123")
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, c.want) || strings.Contains(body, c.fail) {
			t.Errorf("node refused with %v: %s, page says\n%s", c.err, resp.Status, body)
		}
	}
}

// TestUnknownHostRefused: a request naming another host (DNS rebinding)
// is refused 421; loopback names and configured ones are served.
func TestUnknownHostRefused(t *testing.T) {
	h := start(t, Config{Hosts: []string{"console.example.net"}})
	b := h.browser(t)
	for host, want := range map[string]int{
		"evil.example.com":          http.StatusMisdirectedRequest,
		"evil.example.com:80":       http.StatusMisdirectedRequest,
		"localhost:8080":            http.StatusOK,
		"127.0.0.1":                 http.StatusOK,
		"[::1]:4041":                http.StatusOK,
		"Console.Example.NET.:4041": http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/login", nil)
		req.Host = host
		if resp, _ := h.do(t, b, req); resp.StatusCode != want {
			t.Errorf("Host %q: %s, want %d", host, resp.Status, want)
		}
	}
}

// TestCrossOriginPostRefused: a POST whose Origin is another site's is
// refused, the login and the actions alike; the dashboard's own passes.
func TestCrossOriginPostRefused(t *testing.T) {
	h := start(t, Config{})
	b := h.browser(t)
	csrf := h.login(t, b, "admin", "admin123")
	post := func(path, origin string, form url.Values) int {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, _ := h.do(t, b, req)
		return resp.StatusCode
	}
	form := url.Values{"csrf": {csrf}, "action": {"create"}, "topic": {"t"}}
	if code := post("/action", "http://evil.example.com", form); code != http.StatusForbidden {
		t.Fatalf("action from another origin: %d, want 403", code)
	}
	if code := post("/action", "null", form); code != http.StatusForbidden {
		t.Fatalf("action from a null origin: %d, want 403", code)
	}
	if code := post("/login", "http://evil.example.com", url.Values{}); code != http.StatusForbidden {
		t.Fatalf("login from another origin: %d, want 403", code)
	}
	if code := post("/action", h.srv.URL, form); code != http.StatusOK {
		t.Fatalf("action from the dashboard's origin: %d, want 200 (the confirmation)", code)
	}
}

// TestThrottledLoginsAuditedOncePerWindow: a flood of refused logins
// writes one audit line per address and window, with a count.
func TestThrottledLoginsAuditedOncePerWindow(t *testing.T) {
	h := start(t, Config{LoginBurst: 1, LoginEvery: time.Hour})
	b := h.browser(t)
	h.tryLogin(t, b, "admin", "wrong")
	for range 50 {
		if resp, _ := h.tryLogin(t, b, "admin", "wrong"); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s, want 429", resp.Status)
		}
	}
	count := func() (n int, last Event) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, ev := range h.events {
			if ev.Type == "dashboard_login" {
				n, last = n+1, ev
			}
		}
		return n, last
	}
	if n, _ := count(); n != 2 {
		t.Fatalf("%d audited logins after one attempt and 50 refusals, want 2", n)
	}
	h.clock.add(refusalWindow)
	h.tryLogin(t, b, "admin", "wrong")
	n, last := count()
	if n != 3 || last.Detail["similar_refusals_not_audited"] != "49" {
		t.Fatalf("after the window: %d audited, last %+v; want 3 with 49 left out", n, last)
	}
}

func TestAuditedUserNameClipped(t *testing.T) {
	h := start(t, Config{})
	long := strings.Repeat("é", 300)
	h.tryLogin(t, h.browser(t), long, "wrong")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != 1 || len(h.events[0].User) > maxAuditUser || !strings.HasPrefix(long, h.events[0].User) {
		t.Fatalf("audited user of a %d-byte name: %+v", len(long), h.events)
	}
}

// TestOpenStreamDoesNotKeepSessionAlive: the live chart's stream
// reconnecting does not count as using the session.
func TestOpenStreamDoesNotKeepSessionAlive(t *testing.T) {
	h := start(t, Config{IdleTimeout: 30 * time.Minute, StreamInterval: 50 * time.Millisecond})
	b := h.browser(t)
	h.login(t, b, "admin", "admin123")
	h.clock.add(20 * time.Minute)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/stream", nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	h.clock.add(11 * time.Minute) // 31 minutes after the last page
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("31 minutes after the last page, with a stream opened at 20: %s, want a redirect to /login", resp.Status)
	}
}

// TestSessionsBoundedPerUser: a user's logins past the bound end that
// user's least recently used session; a full table refuses another user
// rather than end someone else's session.
func TestSessionsBoundedPerUser(t *testing.T) {
	h := start(t, Config{MaxSessions: 3, UserSessions: 2, LoginBurst: 100})
	p1, p2 := h.browser(t), h.browser(t)
	h.login(t, p1, "producer", "producer123")
	h.clock.add(time.Second)
	h.login(t, p2, "producer", "producer123")
	h.clock.add(time.Second)
	a1 := h.browser(t)
	h.login(t, a1, "admin", "admin123")
	h.clock.add(time.Second)
	// The table is full: a new user is refused, nobody is logged out.
	resp, body := h.tryLogin(t, h.browser(t), "consumer", "consumer123")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a new user into a full table: %s\n%s", resp.Status, body)
	}
	for i, b := range []*http.Client{p1, p2, a1} {
		if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusOK {
			t.Fatalf("session %d after the refused login: %s", i, resp.Status)
		}
		h.clock.add(time.Second)
	}
	// producer's third login ends producer's least recently used (p1).
	h.login(t, h.browser(t), "producer", "producer123")
	if resp, _ := h.get(t, p1, "/topics"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("producer's oldest session: %s, want ended", resp.Status)
	}
	for i, b := range []*http.Client{p2, a1} {
		if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusOK {
			t.Fatalf("session %d: %s, want kept", i, resp.Status)
		}
	}
}

func TestStreamsBoundedPerUser(t *testing.T) {
	h := start(t, Config{UserStreams: 1, StreamInterval: 50 * time.Millisecond})
	a, b := h.browser(t), h.browser(t)
	h.login(t, a, "admin", "admin123")
	h.login(t, b, "admin", "admin123")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/stream", nil)
	resp, err := a.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	// Only the status is read: a stream let through would never end.
	req2, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/stream", nil)
	resp2, err := b.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the user's second stream (another session): %s, want 429", resp2.Status)
	}
}

// TestLoginDialCountsInTheBound: a login over the client port takes a
// place in the connection bound, so it is refused while every place is
// in use.
func TestLoginDialCountsInTheBound(t *testing.T) {
	h := start(t, Config{MaxConns: 1})
	a := h.browser(t)
	h.login(t, a, "admin", "admin123")
	u, _ := url.Parse(h.srv.URL)
	var ss *session
	for _, c := range a.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			ss = h.dash.sessions.get(c.Value)
		}
	}
	_, release, err := h.dash.client(t.Context(), ss, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	resp, body := h.tryLogin(t, h.browser(t), "admin", "admin123")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a login while the only connection is in use: %s, want 503\n%s", resp.Status, body)
	}
	release()
	if resp, _ := h.tryLogin(t, h.browser(t), "admin", "admin123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a login once it is free: %s", resp.Status)
	}
}

// TestLoginTokenMustBeWhole: an empty form token matching an empty
// cookie is no token.
func TestLoginTokenMustBeWhole(t *testing.T) {
	h := start(t, Config{})
	form := url.Values{"login_token": {""}, "user": {"admin"}, "password": {"admin123"}}
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Cookie", loginCookie+"=")
	if resp, _ := h.do(t, h.browser(t), req); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login with an empty token and cookie: %s, want 403", resp.Status)
	}
}

func TestLoginCookieHostPrefixUnderHTTPS(t *testing.T) {
	h := start(t, Config{Secure: true})
	resp, _ := h.get(t, h.browser(t), "/login")
	var found bool
	for _, c := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "__Host-"+loginCookie+"=") && strings.Contains(c, "Secure") {
			found = true
		}
	}
	if !found {
		t.Fatalf("login cookie under HTTPS: %q, want __Host-%s, Secure", resp.Header.Values("Set-Cookie"), loginCookie)
	}
}

func TestStaticNotListed(t *testing.T) {
	h := start(t, Config{})
	for _, p := range []string{"/static/"} {
		if resp, body := h.get(t, h.browser(t), p); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "app.js") {
			t.Errorf("GET %s: %s\n%s", p, resp.Status, body)
		}
	}
	if resp, _ := h.get(t, h.browser(t), "/static/app.js"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /static/app.js: %s", resp.Status)
	}
}

// TestTopicTablesBounded: a topic of 1,500 ranges shows 1,000 rows of
// each table and says so.
func TestTopicTablesBounded(t *testing.T) {
	h := start(t, Config{})
	desc := client.TopicDescription{Name: "big", KeyspaceBits: 16}
	for i := range 1500 {
		desc.Ranges = append(desc.Ranges, client.RangeInfo{
			ID: uint64(i + 1), Start: uint64(i), End: uint64(i + 1), Active: true,
			Segments: []client.SegmentInfo{{ID: uint64(i + 1), Active: true}},
		})
	}
	data := topicView(&desc, &desc, nil)
	var buf bytes.Buffer
	if err := h.dash.pages["topic"].ExecuteTemplate(&buf, "layout", page{Title: "t", Admin: true, Body: data}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, `<tr class="range `); n != maxTableRows {
		t.Errorf("%d range rows, want %d", n, maxTableRows)
	}
	for _, want := range []string{"Showing 1000 of 1500 ranges", "Showing 1000 of 1500 segments"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if len(data.Segments) != maxTableRows {
		t.Errorf("%d segment rows, want %d", len(data.Segments), maxTableRows)
	}
}

// refreshingLogin also renews tokens, over the test node's client port,
// remembering the addresses it was given.
type refreshingLogin struct {
	recordingLogin
	refreshed []string
	refuse    error
}

func (l *refreshingLogin) Refresh(ctx context.Context, token, addr string) (string, error) {
	l.mu.Lock()
	l.refreshed = append(l.refreshed, addr)
	refuse := l.refuse
	l.mu.Unlock()
	if refuse != nil {
		return "", refuse
	}
	cl, err := client.Dial(ctx, l.h.node.Addr(), client.WithSessionToken(token))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	tok, _ := cl.SessionToken()
	return tok, nil
}

// TestTokenRenewedWithTheBrowsersAddress: a page that needs a connection
// to the node renews the session's token with the address of the
// browser asking, and a renewal the node refuses ends the session.
func TestTokenRenewedWithTheBrowsersAddress(t *testing.T) {
	l := &refreshingLogin{}
	h := start(t, Config{Login: l, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	l.h = h
	b := h.browser(t)
	if resp, _ := h.loginFrom(t, b, "203.0.113.9", "admin", "admin123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", resp.Status)
	}
	page := func(from string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/topics", nil)
		req.Header.Set("X-Forwarded-For", from)
		resp, _ := h.do(t, b, req)
		return resp
	}
	if resp := page("203.0.113.10"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a page: %s", resp.Status)
	}
	l.mu.Lock()
	got := strings.Join(l.refreshed, " ")
	l.refuse = client.ErrSessionRevoked
	l.mu.Unlock()
	if got != "203.0.113.10" {
		t.Fatalf("renewals with %q, want one with the browser's address", got)
	}
	h.clock.add(recycleAfter) // the connection is old: the next page dials again
	if resp := page("203.0.113.10"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("a page after the node refused the renewal: %s, want the login form", resp.Status)
	}
	if n := h.dash.sessions.len(); n != 0 {
		t.Fatalf("%d sessions after the refusal, want 0", n)
	}
}

// TestNodeThrottledLoginsAuditedOncePerWindow: logins the node refuses
// for its limits (locked, rate limited) are audited like the dashboard's
// own throttled refusals: once per address and window.
func TestNodeThrottledLoginsAuditedOncePerWindow(t *testing.T) {
	l := &recordingLogin{err: client.ErrAccountLocked}
	h := start(t, Config{Login: l, LoginBurst: 100, UserFailures: 100})
	l.h = h
	for range 20 {
		h.tryLogin(t, h.browser(t), "admin", "wrong")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != 1 || h.events[0].Err == nil || !strings.Contains(h.events[0].Err.Error(), "account_locked") {
		t.Fatalf("audit after 20 logins the node refused as locked: %+v, want one line", h.events)
	}
}
