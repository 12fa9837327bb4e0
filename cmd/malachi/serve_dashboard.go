package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/dashboard"
	"github.com/malachi-log/malachi/internal/httpapi"
	"github.com/malachi-log/malachi/pkg/client"
)

// dashboardFlags are serve's settings of the web console on --http.
type dashboardFlags struct {
	enabled     bool
	explicit    bool // --dashboard or MALACHI_DASHBOARD was given: see given
	secure      bool
	idle        time.Duration
	maxAge      time.Duration
	maxSessions int
	hosts       []string
	proxies     []string
}

func (d *dashboardFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&d.enabled, "dashboard", os.Getenv("MALACHI_DASHBOARD") == "true", "serve the web console on the --http address; on by default when --http is a loopback address or --dashboard-secure is set (env MALACHI_DASHBOARD=true or false)")
	fl.BoolVar(&d.secure, "dashboard-secure", os.Getenv("MALACHI_DASHBOARD_SECURE") == "true", "the console is reached over HTTPS through a TLS-terminating proxy: Secure cookies and HSTS (env MALACHI_DASHBOARD_SECURE=true)")
	fl.DurationVar(&d.idle, "dashboard-idle-timeout", envDuration("MALACHI_DASHBOARD_IDLE_TIMEOUT_MS", dashboard.DefaultIdleTimeout), "end a console session unused this long (env MALACHI_DASHBOARD_IDLE_TIMEOUT_MS)")
	fl.DurationVar(&d.maxAge, "dashboard-max-age", envDuration("MALACHI_DASHBOARD_MAX_AGE_MS", dashboard.DefaultMaxAge), "end any console session this long after its login (env MALACHI_DASHBOARD_MAX_AGE_MS)")
	fl.IntVar(&d.maxSessions, "dashboard-max-sessions", int(envInt("MALACHI_DASHBOARD_MAX_SESSIONS", dashboard.DefaultMaxSessions)), "console sessions kept; a login into a full table ends the same user's least recently used session, or is refused (env MALACHI_DASHBOARD_MAX_SESSIONS)")
	fl.StringArrayVar(&d.hosts, "dashboard-host", envList("MALACHI_DASHBOARD_HOSTS"), "a name the console is reached under besides the --http host and localhost (repeatable; env MALACHI_DASHBOARD_HOSTS, comma-separated); requests naming others are refused 421")
	fl.StringArrayVar(&d.proxies, "dashboard-trusted-proxy", envList("MALACHI_DASHBOARD_TRUSTED_PROXIES"), "CIDR of a reverse proxy whose X-Forwarded-For names the browser's address (repeatable; env MALACHI_DASHBOARD_TRUSTED_PROXIES, comma-separated)")
}

// given records whether the operator chose on or off.
func (d *dashboardFlags) given(fl *pflag.FlagSet) {
	d.explicit = fl.Changed("dashboard") || os.Getenv("MALACHI_DASHBOARD") != ""
}

// resolve decides whether the console is served on the --http listener
// at httpAddr: when asked for (--dashboard, MALACHI_DASHBOARD), else only
// on a loopback address or behind HTTPS (--dashboard-secure), since over
// plain HTTP on a network its passwords and cookies cross in the clear.
func (d *dashboardFlags) resolve(httpAddr net.Addr, logger *slog.Logger) bool {
	tcp, _ := httpAddr.(*net.TCPAddr)
	loopback := tcp != nil && tcp.IP.IsLoopback()
	if !d.explicit {
		return loopback || d.secure
	}
	if d.enabled && !loopback && !d.secure {
		logger.Warn("the dashboard is served over plain HTTP on a non-loopback address: passwords and session cookies cross the network in the clear; put a TLS proxy in front and pass --dashboard-secure", "http", httpAddr.String())
	}
	return d.enabled
}

// brokerLogin checks dashboard logins in the node's process, with the
// browser's address as the login limits' and audit log's key.
type brokerLogin struct {
	b   *broker.Broker
	tls bool // the dashboard dials the node over TLS: tokens are bound to it
}

func (l brokerLogin) Login(ctx context.Context, user, password, addr string) (string, bool, error) {
	cr := broker.Credentials{Method: broker.MethodPassword, User: user, Password: password, Addr: addr}
	if l.tls {
		// Marks the token as issued over TLS: it resumes only over TLS,
		// as the dashboard's own connections to a TLS-only port are.
		cr.TLS = &tls.ConnectionState{}
	}
	id, err := l.b.Login(ctx, cr)
	if err != nil {
		return "", false, loginError(err)
	}
	if id.TokenExpiresMs == 0 {
		return "", false, dashboard.ErrNoResume
	}
	return id.Token, broker.IsAdmin(*id), nil
}

// Refresh renews a dashboard session's token with the browser's address,
// as a login by session token from that address would.
func (l brokerLogin) Refresh(_ context.Context, token, addr string) (string, error) {
	cr := broker.Credentials{Token: token, Addr: addr}
	if l.tls {
		cr.TLS = &tls.ConnectionState{}
	}
	id, err := l.b.Resume(cr)
	if err != nil {
		return "", loginError(err)
	}
	return id.Token, nil
}

// loginError turns the broker's refusals into the client's, which the
// dashboard knows.
func loginError(err error) error {
	switch {
	case errors.Is(err, broker.ErrCredentials):
		return client.ErrInvalidCredentials
	case errors.Is(err, broker.ErrAccountLocked):
		return client.ErrAccountLocked
	case errors.Is(err, broker.ErrRateLimited):
		return client.ErrRateLimitExceeded
	case errors.Is(err, broker.ErrSessionExpired):
		return client.ErrSessionExpired
	case errors.Is(err, broker.ErrSessionRevoked):
		return client.ErrSessionRevoked
	case errors.Is(err, broker.ErrSessionInvalid):
		return client.ErrInvalidSession
	case errors.Is(err, broker.ErrTLSRequired):
		return client.ErrTLSRequired
	case errors.Is(err, broker.ErrNotEnabled):
		return dashboard.ErrNoResume
	}
	return err
}

// httpHosts are the names the console answers under: the --http host
// when it is a name or a specific address, and --dashboard-host.
func httpHosts(httpFlag string, extra []string) []string {
	hosts := append([]string(nil), extra...)
	if h, _, err := net.SplitHostPort(httpFlag); err == nil && h != "" {
		if ip, err := netip.ParseAddr(h); err != nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func parseProxies(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, aerr := netip.ParseAddr(c)
			if aerr != nil {
				return nil, fmt.Errorf("--dashboard-trusted-proxy %q: want a CIDR such as 10.0.0.0/8", c)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// mountDashboard serves the console on web as a client of the node's own
// client port (clientAddr). Passwords are checked by the broker in this
// process with the browser's address; the pages' calls go to the client
// port with the session token. Over a TLS-only port it dials with TLS,
// trusting the node's certificate file. Its logins and actions go to the
// node's audit log with the browser's address.
func mountDashboard(f *serveFlags, web *httpapi.Server, clientAddr net.Addr, b *broker.Broker, logger *slog.Logger) (*dashboard.Dashboard, error) {
	d := f.dashboard
	proxies, err := parseProxies(d.proxies)
	if err != nil {
		return nil, err
	}
	cfg := dashboard.Config{
		NodeAddr: dialable(clientAddr), Secure: d.secure, IdleTimeout: d.idle, MaxAge: d.maxAge,
		MaxSessions: d.maxSessions, Logger: logger,
		Login: brokerLogin{b: b, tls: f.tlsOnly}, Hosts: httpHosts(f.http, d.hosts), TrustedProxies: proxies,
		Audit: func(ev dashboard.Event) {
			reason := ""
			if ev.Err != nil {
				reason = ev.Err.Error()
			}
			b.Audit(broker.Identity{User: ev.User, Addr: ev.Peer, Method: "dashboard"}, ev.Type, ev.Target, ev.Detail, reason)
		},
	}
	if f.tlsOnly {
		pem, err := os.ReadFile(f.tlsCert)
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("dashboard: no PEM certificate in %s", f.tlsCert)
		}
		cfg.NodeTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	dash, err := dashboard.New(cfg)
	if err != nil {
		return nil, err
	}
	web.Mount("/", dash)
	return dash, nil
}

// dialable turns a listener's address into one to dial: an unspecified
// host (0.0.0.0, ::) becomes the loopback address.
func dialable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	ip := net.IPv4(127, 0, 0, 1)
	if tcp.IP.To4() == nil {
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(tcp.Port))
}

var _ dashboard.Refresher = brokerLogin{}
