// Package dashboard serves the node's web console on its HTTP port: the
// cluster's nodes and vnodes, topics with a picture of their keyspace and
// lineage, segments and replicas, consumer groups and their lag, live
// throughput, and the administrator's actions (create and delete topics,
// split and merge ranges).
//
// The dashboard is a client of its node. A login is checked by the node
// (Config.Login: in the node's own process, with the browser's address;
// else by logging in to the client port); the dashboard keeps the session
// token the node answered (never the password) in a server-side session,
// and every page is drawn from calls made under that token, so the node's permissions, ACLs and audit log apply to what the
// browser sees and does exactly as to any other client. docs/dashboard.md
// describes the pages and the security model.
package dashboard

import (
	"bytes"
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultIdleTimeout    = 30 * time.Minute
	DefaultMaxAge         = 8 * time.Hour
	DefaultMaxSessions    = 1024
	DefaultUserSessions   = 16
	DefaultUserStreams    = 8
	DefaultUserFailures   = 10
	DefaultMaxConns       = 64
	DefaultMaxStreams     = 32
	DefaultStreamInterval = time.Second
	DefaultLoginBurst     = 5
	DefaultLoginEvery     = 12 * time.Second
	DefaultDialTimeout    = 10 * time.Second

	// streamsPerSession bounds the event streams one login may hold open
	// (a few tabs).
	streamsPerSession = 4
	// maxLimiterAddrs bounds the login limiter's table of addresses.
	maxLimiterAddrs = 4096
)

// Config configures a Dashboard. Zero values take the defaults.
type Config struct {
	// NodeAddr is the node's client address ("127.0.0.1:4040").
	NodeAddr string
	// NodeTLS, when set, dials the node over TLS with it.
	NodeTLS *tls.Config
	// Secure marks the dashboard as reached over HTTPS (a TLS-terminating
	// proxy in front of the node's HTTP port): cookies get Secure and
	// answers carry HSTS. A request that arrives over TLS is treated so
	// whatever this says.
	Secure bool
	// IdleTimeout ends a session unused this long; MaxAge ends any
	// session this long after its login.
	IdleTimeout, MaxAge time.Duration
	// MaxSessions bounds the table of sessions; a login into a full table
	// ends the same user's least recently used session, or is refused
	// (503) when the user has none: one user cannot log out another.
	MaxSessions int
	// UserSessions bounds one user's sessions; a login past it ends that
	// user's least recently used session.
	UserSessions int
	// UserStreams bounds one user's open live-chart streams.
	UserStreams int
	// MaxConns bounds the node connections the sessions hold (one per
	// session at most) and the dials under way, logins' included.
	MaxConns int
	// MaxStreams bounds the open live-chart streams of all sessions.
	MaxStreams int
	// StreamInterval is how often a stream sends the node's totals.
	StreamInterval time.Duration
	// LoginBurst attempts per client address (an IPv6 address by its
	// /64) at once, then one per LoginEvery.
	LoginBurst int
	LoginEvery time.Duration
	// UserFailures failed logins of one user name, from any address, at
	// once, then one per LoginEvery: the node locks a user per (user,
	// address), so this bounds guessing spread over many addresses.
	UserFailures int
	// Login checks a password. When nil the dashboard logs in to the
	// node's client port, where the node sees the dashboard's address
	// instead of the browser's: serve always sets it.
	Login Authenticator
	// Hosts are the names and addresses (without port) the dashboard
	// answers under besides localhost, 127.0.0.1 and ::1; a request
	// naming any other Host is refused 421 (DNS rebinding).
	Hosts []string
	// TrustedProxies are the peers whose X-Forwarded-For names the
	// browser's address (for the login limits and the audit log).
	TrustedProxies []netip.Prefix
	// DialTimeout bounds a login or a call to the node.
	DialTimeout time.Duration
	// Now is the clock of session expiry and rate limits (time.Now).
	Now func() time.Time
	// Audit, when set, records logins and administrator actions with the
	// browser's address (the node's own audit log sees the dashboard's).
	Audit func(Event)
	// Logger gets errors the page cannot show (default: discarded).
	Logger *slog.Logger
}

// Authenticator checks a password in the node's own process, with the
// browser's address (addr, an IP) as the node's login limits and audit
// log key: the same check as a login on the client port from addr. It
// answers a session token the node resumes and whether the user is an
// administrator. Its refusals are pkg/client's errors
// (ErrInvalidCredentials, ErrAccountLocked, ErrRateLimitExceeded) or
// ErrNoResume.
type Authenticator interface {
	Login(ctx context.Context, user, password, addr string) (token string, admin bool, err error)
}

// Refresher is an Authenticator that also renews a session token in the
// node's process, with the browser's address, answering a fresh token.
// Its refusals are pkg/client's (ErrSessionExpired, ErrSessionRevoked,
// ErrInvalidSession, ErrTLSRequired, ErrRateLimitExceeded).
type Refresher interface {
	Authenticator
	Refresh(ctx context.Context, token, addr string) (string, error)
}

// ErrNoResume: the node does not resume login sessions.
var ErrNoResume = errors.New("dashboard: the node does not resume login sessions (--session-ttl is negative); the dashboard needs them")

// Event is what the dashboard audits.
type Event struct {
	Type   string // dashboard_login, dashboard_logout, or an action: topic_created, topic_deleted, range_split, ranges_merged
	User   string
	Peer   string // the browser's address
	Target string // a topic
	Detail map[string]string
	Err    error // nil: done; else why it was refused
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.MaxAge, DefaultMaxAge)
	def(&c.StreamInterval, DefaultStreamInterval)
	def(&c.LoginEvery, DefaultLoginEvery)
	def(&c.DialTimeout, DefaultDialTimeout)
	defInt(&c.MaxSessions, DefaultMaxSessions)
	defInt(&c.MaxConns, DefaultMaxConns)
	defInt(&c.MaxStreams, DefaultMaxStreams)
	defInt(&c.LoginBurst, DefaultLoginBurst)
	defInt(&c.UserSessions, DefaultUserSessions)
	defInt(&c.UserStreams, DefaultUserStreams)
	defInt(&c.UserFailures, DefaultUserFailures)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

//go:embed assets
var assets embed.FS

// Dashboard is the console's http.Handler.
type Dashboard struct {
	cfg      Config
	node     nodeDialer
	sessions *store
	logins   *loginLimiter // per client address
	failures *loginLimiter // failed logins per user name
	refusals *refusalReporter
	hosts    map[string]struct{}
	pages    map[string]*template.Template
	static   http.Handler
	mux      *http.ServeMux
	// Open event streams, in all and per user; guarded by sessions.mu.
	streams     int
	userStreams map[string]int

	// done is closed by Close: event streams end.
	done      chan struct{}
	closeOnce sync.Once
}

// New builds a Dashboard for the node at cfg.NodeAddr.
func New(cfg Config) (*Dashboard, error) {
	if cfg.NodeAddr == "" {
		return nil, errors.New("dashboard: the node's client address is required")
	}
	cfg = cfg.withDefaults()
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	d := &Dashboard{
		cfg:      cfg,
		node:     nodeDialer{addr: cfg.NodeAddr, tls: cfg.NodeTLS, timeout: cfg.DialTimeout},
		sessions: newStore(cfg.MaxSessions, cfg.UserSessions, cfg.MaxConns, cfg.IdleTimeout, cfg.MaxAge, cfg.Now),
		logins:   newLoginLimiter(cfg.LoginBurst, cfg.LoginEvery, maxLimiterAddrs),
		failures: newLoginLimiter(cfg.UserFailures, cfg.LoginEvery, maxLimiterAddrs),
		refusals: newRefusalReporter(maxLimiterAddrs),
		hosts:    allowedHosts(cfg.Hosts),
		pages:    pages,
		static:   noListing(http.StripPrefix("/static/", http.FileServerFS(static))),
		mux:      http.NewServeMux(),
		done:     make(chan struct{}),

		userStreams: map[string]int{},
	}
	d.routes()
	return d, nil
}

func (d *Dashboard) routes() {
	m := d.mux
	m.Handle("GET /static/", d.static)
	m.HandleFunc("GET /login", d.loginPage)
	m.HandleFunc("POST /login", d.login)
	m.HandleFunc("POST /logout", d.authed(d.logout))
	m.HandleFunc("GET /{$}", d.authed(d.overview))
	m.HandleFunc("GET /topics", d.authed(d.topics))
	m.HandleFunc("GET /topics/{name}", d.authed(d.topic))
	m.HandleFunc("GET /groups", d.authed(d.groups))
	m.HandleFunc("GET /stream", d.watching(d.stream))
	m.HandleFunc("POST /action", d.authed(d.action))
}

// Close ends every session, closes their node connections and ends the
// event streams. Idempotent.
func (d *Dashboard) Close() {
	d.closeOnce.Do(func() {
		close(d.done)
		s := d.sessions
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ss := range s.byID {
			s.removeLocked(ss)
		}
	})
}

// csp allows the page's own files and nothing else: no inline script or
// style, no frames, forms posting only back here.
const csp = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

// noListing answers 404 for a directory: the embedded files are served,
// never listed.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP answers with the security headers on every answer, to
// requests that name this dashboard as their Host.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.hostAllowed(r) {
		http.Error(w, "unknown host name: start the node with --dashboard-host NAME to serve the dashboard under it", http.StatusMisdirectedRequest)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" on every POST, its own too, and the Origin check
	// could not tell the dashboard's forms from another site's.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if d.secure(r) {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) secure(r *http.Request) bool { return d.cfg.Secure || r.TLS != nil }

// render writes a page; a template that fails is logged and answered 500
// without a half-written page.
func (d *Dashboard) render(w http.ResponseWriter, code int, page string, data any) {
	var buf bytes.Buffer
	if err := d.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		d.cfg.Logger.Error("dashboard: rendering a page failed", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

func (d *Dashboard) audit(ev Event) {
	if d.cfg.Audit != nil {
		d.cfg.Audit(ev)
	}
}
