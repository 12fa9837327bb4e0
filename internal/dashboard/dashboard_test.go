package dashboard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/httpapi"
	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// manualClock is the dashboard's clock in tests: it moves only when told.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type harness struct {
	node   *clienttest.Node
	dash   *Dashboard
	srv    *httptest.Server
	clock  *manualClock
	mu     sync.Mutex
	events []Event
}

func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{node: clienttest.Start(t), clock: &manualClock{t: time.Unix(1_800_000_000, 0)}}
	cfg.NodeAddr = h.node.Addr()
	cfg.Now = h.clock.now
	cfg.Audit = func(ev Event) {
		h.mu.Lock()
		h.events = append(h.events, ev)
		h.mu.Unlock()
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.dash = d
	h.srv = httptest.NewServer(d)
	t.Cleanup(func() {
		h.srv.Close()
		d.Close()
	})
	return h
}

// browser is an HTTP client with its own cookies that does not follow
// redirects, so tests see each answer.
func (h *harness) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *harness) get(t *testing.T, b *http.Client, path string) (*http.Response, string) {
	t.Helper()
	resp, err := b.Get(h.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (h *harness) post(t *testing.T, b *http.Client, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := b.PostForm(h.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

var (
	loginTokenRE = regexp.MustCompile(`name="login_token" value="([^"]+)"`)
	csrfRE       = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

func find(t *testing.T, re *regexp.Regexp, body string) string {
	t.Helper()
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in the page:\n%s", re, body)
	}
	return m[1]
}

// tryLogin fills in and posts the login form.
func (h *harness) tryLogin(t *testing.T, b *http.Client, user, password string) (*http.Response, string) {
	t.Helper()
	_, page := h.get(t, b, "/login")
	tok := find(t, loginTokenRE, page)
	return h.post(t, b, "/login", url.Values{"login_token": {tok}, "user": {user}, "password": {password}})
}

// login logs b in and returns the session's CSRF token.
func (h *harness) login(t *testing.T, b *http.Client, user, password string) string {
	t.Helper()
	resp, body := h.tryLogin(t, b, user, password)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login as %s: %s %s\n%s", user, resp.Status, resp.Header.Get("Location"), body)
	}
	resp, body = h.get(t, b, "/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("overview after login: %s\n%s", resp.Status, body)
	}
	return find(t, csrfRE, body)
}

func (h *harness) admin(t *testing.T) *client.Client {
	return h.node.Client(t, "admin", "admin123")
}

func TestLogin(t *testing.T) {
	h := start(t, Config{})
	b := h.browser(t)
	resp, body := h.tryLogin(t, b, "admin", "wrong")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Unknown user or wrong password") {
		t.Fatalf("wrong password: %s\n%s", resp.Status, body)
	}
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("a page without a session: %s to %q, want a redirect to /login", resp.Status, resp.Header.Get("Location"))
	}
	h.login(t, b, "admin", "admin123")
	resp, body = h.get(t, b, "/")
	if !strings.Contains(body, `id="node-id"`) || !strings.Contains(body, "admin") {
		t.Fatalf("overview: %s\n%s", resp.Status, body)
	}
	var cookie *http.Cookie
	u, _ := url.Parse(h.srv.URL)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil {
		t.Fatal("no session cookie after login")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var ok, failed int
	for _, ev := range h.events {
		if ev.Type == "dashboard_login" && ev.User == "admin" && ev.Peer == "127.0.0.1" {
			if ev.Err == nil {
				ok++
			} else {
				failed++
			}
		}
	}
	if ok != 1 || failed != 1 {
		t.Fatalf("audited logins: %d ok, %d failed; want one each: %+v", ok, failed, h.events)
	}
}

func TestLoginCookieAttributes(t *testing.T) {
	h := start(t, Config{})
	b := h.browser(t)
	_, page := h.get(t, b, "/login")
	tok := find(t, loginTokenRE, page)
	resp, _ := h.post(t, b, "/login", url.Values{"login_token": {tok}, "user": {"admin"}, "password": {"admin123"}})
	var set string
	for _, c := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(c, sessionCookie+"=") {
			set = c
		}
	}
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(set, want) {
			t.Errorf("session cookie %q lacks %s", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("session cookie %q is Secure over plain HTTP: the browser would never send it back", set)
	}
}

func TestLoginNeedsTheFormsToken(t *testing.T) {
	h := start(t, Config{})
	b := h.browser(t)
	h.get(t, b, "/login") // sets the cookie; the form's value is left out
	resp, _ := h.post(t, b, "/login", url.Values{"login_token": {"forged"}, "user": {"admin"}, "password": {"admin123"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login with a forged form token: %s, want 403", resp.Status)
	}
}

func TestSessionIdleExpiry(t *testing.T) {
	h := start(t, Config{IdleTimeout: 30 * time.Minute, MaxAge: 8 * time.Hour})
	b := h.browser(t)
	h.login(t, b, "admin", "admin123")
	h.clock.add(29 * time.Minute)
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after 29 idle minutes: %s, want 200", resp.Status)
	}
	h.clock.add(30 * time.Minute)
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("after 30 idle minutes: %s, want a redirect to /login", resp.Status)
	}
}

func TestSessionAbsoluteExpiry(t *testing.T) {
	h := start(t, Config{IdleTimeout: 30 * time.Minute, MaxAge: 8 * time.Hour})
	b := h.browser(t)
	h.login(t, b, "admin", "admin123")
	for range 7 * 3 { // used every 20 minutes for seven hours
		h.clock.add(20 * time.Minute)
		if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusOK {
			t.Fatalf("at %v: %s, want 200", h.clock.now(), resp.Status)
		}
	}
	h.clock.add(time.Hour)
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("eight hours after login: %s, want a redirect to /login", resp.Status)
	}
}

func TestCSRFRefused(t *testing.T) {
	h := start(t, Config{})
	b := h.browser(t)
	csrf := h.login(t, b, "admin", "admin123")
	form := url.Values{"action": {"create"}, "topic": {"forged"}, "confirm": {"yes"}}
	for _, tok := range []string{"", "x" + csrf[1:], csrf + "x"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		if tok != "" {
			f.Set("csrf", tok)
		}
		if resp, _ := h.post(t, b, "/action", f); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("action with CSRF token %q: %s, want 403", tok, resp.Status)
		}
	}
	if resp, _ := h.post(t, b, "/logout", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("logout without a CSRF token: %s, want 403", resp.Status)
	}
	_, err := h.admin(t).DescribeTopic(t.Context(), "forged")
	if !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("the topic of the forged request: %v, want no_such_topic", err)
	}
	// The real token works, so the refusals above were about the token.
	form.Set("csrf", csrf)
	if resp, body := h.post(t, b, "/action", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("action with the session's CSRF token: %s\n%s", resp.Status, body)
	}
}

func TestNonAdminCannotDelete(t *testing.T) {
	h := start(t, Config{})
	ctx := t.Context()
	if err := h.admin(t).CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	b := h.browser(t)
	csrf := h.login(t, b, "producer", "producer123")
	_, body := h.get(t, b, "/topics/orders")
	if strings.Contains(body, `id="delete"`) {
		t.Error("the topic page offers a non-admin the delete button")
	}
	resp, body := h.post(t, b, "/action", url.Values{"csrf": {csrf}, "action": {"delete"}, "topic": {"orders"}, "confirm": {"yes"}, "typed": {"orders"}})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "permission_denied") {
		t.Fatalf("delete by a non-admin: %s\n%s", resp.Status, body)
	}
	if _, err := h.admin(t).DescribeTopic(ctx, "orders"); err != nil {
		t.Fatalf("the topic after a refused delete: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	last := h.events[len(h.events)-1]
	if last.Type != "topic_deleted" || last.User != "producer" || last.Err == nil {
		t.Fatalf("audit of the refused delete: %+v", last)
	}
}

func TestAdminActionsConfirmFirst(t *testing.T) {
	h := start(t, Config{})
	ctx := t.Context()
	adm := h.admin(t)
	b := h.browser(t)
	csrf := h.login(t, b, "admin", "admin123")
	act := func(form url.Values) (*http.Response, string) {
		form.Set("csrf", csrf)
		return h.post(t, b, "/action", form)
	}
	resp, body := act(url.Values{"action": {"create"}, "topic": {"events"}, "ranges": {"1"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="confirm-what"`) {
		t.Fatalf("create without confirm: %s, want the confirmation page\n%s", resp.Status, body)
	}
	if _, err := adm.DescribeTopic(ctx, "events"); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("before confirming, the topic: %v, want no_such_topic", err)
	}
	if resp, body := act(url.Values{"action": {"create"}, "topic": {"events"}, "ranges": {"1"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed create: %s\n%s", resp.Status, body)
	}
	desc, err := adm.DescribeTopic(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	parent := desc.ActiveRanges()[0].ID
	if resp, body := act(url.Values{"action": {"split"}, "topic": {"events"}, "range": {itoa(parent)}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("split: %s\n%s", resp.Status, body)
	}
	desc, _ = adm.DescribeTopic(ctx, "events")
	kids := desc.ActiveRanges()
	if len(kids) != 2 {
		t.Fatalf("after the split: %d active ranges, want 2", len(kids))
	}
	_, page := h.get(t, b, "/topics/events")
	if n := strings.Count(page, `class="range range-active"`); n != 2 {
		t.Fatalf("the topic page shows %d active ranges, want 2", n)
	}
	if !strings.Contains(page, `class="bar sealed" data-range="`+itoa(parent)+`"`) {
		t.Fatalf("the keyspace picture lacks the sealed parent %d", parent)
	}
	if resp, body := act(url.Values{"action": {"merge"}, "topic": {"events"}, "a": {itoa(kids[0].ID)}, "b": {itoa(kids[1].ID)}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("merge: %s\n%s", resp.Status, body)
	}
	desc, _ = adm.DescribeTopic(ctx, "events")
	if n := len(desc.ActiveRanges()); n != 1 {
		t.Fatalf("after the merge: %d active ranges, want 1", n)
	}
	if resp, _ := act(url.Values{"action": {"delete"}, "topic": {"events"}, "confirm": {"yes"}, "typed": {"event"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("delete with the name mistyped: %s, want 422", resp.Status)
	}
	if _, err := adm.DescribeTopic(ctx, "events"); err != nil {
		t.Fatalf("after a mistyped delete: %v", err)
	}
	if resp, body := act(url.Values{"action": {"delete"}, "topic": {"events"}, "confirm": {"yes"}, "typed": {"events"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete: %s\n%s", resp.Status, body)
	}
	if _, err := adm.DescribeTopic(ctx, "events"); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("after the delete: %v, want no_such_topic", err)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestSecurityHeaders(t *testing.T) {
	for _, secure := range []bool{false, true} {
		h := start(t, Config{Secure: secure})
		b := h.browser(t)
		for _, path := range []string{"/login", "/static/app.js", "/static/style.css", "/topics", "/no-such-page"} {
			resp, _ := h.get(t, b, path)
			hd := resp.Header
			csp := hd.Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe") {
				t.Errorf("%s: CSP %q", path, csp)
			}
			for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"} {
				if got := hd.Get(k); got != want {
					t.Errorf("%s: %s = %q, want %q", path, k, got, want)
				}
			}
			if hsts := hd.Get("Strict-Transport-Security"); (hsts != "") != secure || strings.Contains(hsts, "includeSubDomains") {
				t.Errorf("%s (secure %v): HSTS %q; want max-age alone over HTTPS (other hosts of the domain are not ours to bind)", path, secure, hsts)
			}
		}
	}
}

func TestSessionsBounded(t *testing.T) {
	h := start(t, Config{MaxSessions: 3, MaxConns: 2, LoginBurst: 100})
	var browsers []*http.Client
	for range 5 {
		b := h.browser(t)
		h.login(t, b, "admin", "admin123")
		browsers = append(browsers, b)
		if n := h.dash.sessions.len(); n > 3 {
			t.Fatalf("%d sessions in a table of 3", n)
		}
		h.clock.add(time.Second) // so that "oldest" is well defined
	}
	for i, b := range browsers {
		resp, _ := h.get(t, b, "/topics")
		evicted := resp.StatusCode == http.StatusSeeOther
		if want := i < 2; evicted != want {
			t.Errorf("browser %d (of 5, table of 3): evicted %v, want %v", i, evicted, want)
		}
	}
	h.dash.sessions.mu.Lock()
	conns := h.dash.sessions.conns
	h.dash.sessions.mu.Unlock()
	if conns > 2 {
		t.Fatalf("%d node connections open, bound 2", conns)
	}
}

func TestLoginRateLimited(t *testing.T) {
	h := start(t, Config{LoginBurst: 2, LoginEvery: time.Minute})
	b := h.browser(t)
	for i := range 2 {
		if resp, _ := h.tryLogin(t, b, "admin", "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %s, want 401", i+1, resp.Status)
		}
	}
	resp, _ := h.tryLogin(t, b, "admin", "admin123")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third attempt at once: %s, Retry-After %q; want 429 with a Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	h.clock.add(time.Minute)
	if resp, _ := h.tryLogin(t, b, "admin", "admin123"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a minute later: %s, want a login", resp.Status)
	}
}

func TestStreamSendsTotalsAndIsBounded(t *testing.T) {
	h := start(t, Config{MaxStreams: 1, StreamInterval: 50 * time.Millisecond})
	b := h.browser(t)
	h.login(t, b, "admin", "admin123")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/stream", nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type %q", ct)
	}
	buf := make([]byte, 4096)
	var got string
	for !strings.Contains(got, `"records":`) {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("reading the stream: %v (so far %q)", err, got)
		}
		got += string(buf[:n])
	}
	if resp2, _ := h.get(t, b, "/stream"); resp2.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second stream with a bound of 1: %s, want 429", resp2.Status)
	}
	other := h.browser(t)
	if resp3, _ := h.get(t, other, "/stream"); resp3.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a stream without a session: %s, want 401", resp3.Status)
	}
}

// TestShutdownEndsStreams: an open event stream does not hold up the
// HTTP server's graceful shutdown, which ends it through Close.
func TestShutdownEndsStreams(t *testing.T) {
	h := start(t, Config{StreamInterval: 50 * time.Millisecond})
	web := httpapi.New("127.0.0.1:0", alwaysReady{}, false)
	web.Mount("/", h.dash)
	if err := web.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- web.Serve() }()
	h.srv.URL = "http://" + web.Addr().String() // the harness's helpers talk to web now
	b := h.browser(t)
	h.login(t, b, "admin", "admin123")
	resp, err := b.Get(h.srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 512)); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := web.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open stream: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// TestConnectionsBoundedWhileBusy: a node connection in use is never
// closed for another session; past the bound the page is refused 503.
func TestConnectionsBoundedWhileBusy(t *testing.T) {
	h := start(t, Config{MaxConns: 1})
	a, b := h.browser(t), h.browser(t)
	h.login(t, a, "admin", "admin123")
	h.login(t, b, "admin", "admin123")
	u, _ := url.Parse(h.srv.URL)
	var ssA *session
	for _, c := range a.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			ssA = h.dash.sessions.get(c.Value)
		}
	}
	if ssA == nil {
		t.Fatal("no session for browser a")
	}
	cl, release, err := h.dash.client(t.Context(), ssA, "127.0.0.1") // a request of a, in flight
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("b while a holds the only connection: %s, want 503 with Retry-After", resp.Status)
	}
	if _, err := cl.Status(t.Context()); err != nil {
		t.Fatalf("a's connection after b was refused: %v", err)
	}
	release()
	if resp, _ := h.get(t, b, "/topics"); resp.StatusCode != http.StatusOK {
		t.Fatalf("b once a is done: %s, want 200", resp.Status)
	}
}
