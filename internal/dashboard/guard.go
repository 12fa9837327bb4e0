package dashboard

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// hostAllowed reports whether the request's Host names this dashboard:
// loopback names, and the names the operator gave (Config.Hosts). A page
// reached under any other name may be a DNS rebinding (an attacker's
// name that now resolves to this node), whose scripts the browser would
// treat as same-origin with the dashboard.
func (d *Dashboard) hostAllowed(r *http.Request) bool {
	_, ok := d.hosts[hostOnly(r.Host)]
	return ok
}

// hostOnly is a Host header's name without port, brackets, trailing dot
// or case.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
	return strings.ToLower(h)
}

func allowedHosts(extra []string) map[string]struct{} {
	m := map[string]struct{}{"localhost": {}, "127.0.0.1": {}, "::1": {}}
	for _, h := range extra {
		if h = hostOnly(strings.TrimSpace(h)); h != "" {
			m[h] = struct{}{}
		}
	}
	return m
}

// originMatches reports whether a POST's Origin, when the browser sent
// one, is this dashboard as the request addressed it (or, from a trusted
// proxy that rewrites Host, as X-Forwarded-Host says the browser did):
// another site's form or script carries its own origin.
func (d *Dashboard) originMatches(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false // "null": a sandboxed or opaque origin
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	fwd := r.Header.Get("X-Forwarded-Host")
	return fwd != "" && d.trusted(peerIP(r)) && strings.EqualFold(u.Host, strings.TrimSpace(strings.Split(fwd, ",")[0]))
}

// clientAddr is the browser's address: the peer's IP, or, when the peer
// is one of the trusted proxies (Config.TrustedProxies), the nearest
// address in X-Forwarded-For that is not a trusted proxy. A header from
// any other peer is ignored: a browser could write anything there.
func (d *Dashboard) clientAddr(r *http.Request) netip.Addr {
	ip := peerIP(r)
	if !d.trusted(ip) {
		return ip
	}
	hops := r.Header.Values("X-Forwarded-For")
	var list []string
	for _, h := range hops {
		list = append(list, strings.Split(h, ",")...)
	}
	for i := len(list) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(list[i]))
		if err != nil {
			return ip // a hop the proxy did not write: stop at the proxy
		}
		a = a.Unmap()
		if !d.trusted(a) {
			return a
		}
		ip = a
	}
	return ip
}

func (d *Dashboard) trusted(a netip.Addr) bool {
	for _, p := range d.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func peerIP(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a.Unmap()
}

// peer is the browser's address as the audit log and the node see it.
func (d *Dashboard) peer(r *http.Request) string {
	a := d.clientAddr(r)
	if !a.IsValid() {
		return r.RemoteAddr
	}
	return a.String()
}

// limitKey groups addresses for the login limits: an IPv6 address by its
// /64, which one host usually holds whole.
func limitKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Is4() {
		return addr
	}
	p, _ := a.Prefix(64)
	return p.String()
}
