package metrics

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// Access checks a scrape's credentials: nil when they prove an account
// allowed to read the metrics (broker.Broker.MetricsAccess), else the
// refusal, whose text is the wire reason.
type Access interface {
	MetricsAccess(ctx context.Context, cr broker.Credentials) error
}

// maxVerified bounds the credentials trusted at once; past it the
// oldest is forgotten.
const maxVerified = 64

// gate asks every scrape for credentials: HTTP Basic (a password login)
// or a Bearer session token or JWT. A verified credential is trusted for
// ttl, keyed by a MAC under a key of this process, so a scraper asking
// every second does not pay a password hash each time and the table
// never holds a password. Refusals are counted by reason and those for
// bad credentials join malachi_failed_auth_total; the broker's login
// throttle and lockouts apply as to any login.
type gate struct {
	access Access
	ttl    time.Duration
	now    func() time.Time
	key    [32]byte

	mu       sync.Mutex
	verified map[[sha256.Size]byte]time.Time // MAC -> when verified
	refused  map[string]uint64               // by reason
}

func newGate(a Access, ttl time.Duration, now func() time.Time) *gate {
	g := &gate{access: a, ttl: ttl, now: now, verified: map[[sha256.Size]byte]time.Time{}, refused: map[string]uint64{}}
	rand.Read(g.key[:])
	return g
}

// reasonMissing is the refusal of a scrape that carries no credentials.
const reasonMissing = "auth_required"

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.check(r); err != nil {
			reason := err.Error()
			if !errors.Is(err, errMissing) {
				reason = wireReason(err)
			}
			g.count(reason)
			w.Header().Set("WWW-Authenticate", `Basic realm="malachi", charset="UTF-8"`)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if after := broker.RetryAfter(err); after > 0 {
				w.Header().Set("Retry-After", retryAfterSeconds(after))
			}
			code := http.StatusUnauthorized
			if reason == "permission_denied" {
				code = http.StatusForbidden
			}
			w.WriteHeader(code)
			w.Write([]byte(reason + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

var errMissing = errors.New(reasonMissing)

func (g *gate) check(r *http.Request) error {
	cr := broker.Credentials{Addr: clientIP(r), TLS: r.TLS}
	var secret string
	if user, pass, ok := r.BasicAuth(); ok {
		cr.Method, cr.User, cr.Password = broker.MethodPassword, user, pass
		secret = "basic\x00" + user + "\x00" + pass
	} else if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
		cr.Method, cr.Token = broker.MethodSession, tok
		if strings.Count(tok, ".") == 2 {
			cr.Method = broker.MethodToken // a compact JWT; session tokens have no dots
		}
		secret = "bearer\x00" + tok
	} else {
		return errMissing
	}
	mac := g.mac(secret)
	if g.trusted(mac) {
		return nil
	}
	if err := g.access.MetricsAccess(r.Context(), cr); err != nil {
		return err
	}
	g.trust(mac)
	return nil
}

func (g *gate) mac(secret string) [sha256.Size]byte {
	m := hmac.New(sha256.New, g.key[:])
	m.Write([]byte(secret))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

func (g *gate) trusted(mac [sha256.Size]byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.verified[mac]
	if ok && g.now().Sub(at) < g.ttl {
		return true
	}
	delete(g.verified, mac)
	return false
}

func (g *gate) trust(mac [sha256.Size]byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	for k, at := range g.verified {
		if now.Sub(at) >= g.ttl {
			delete(g.verified, k)
		}
	}
	if len(g.verified) >= maxVerified {
		var oldest [sha256.Size]byte
		first := true
		for k, at := range g.verified {
			if first || at.Before(g.verified[oldest]) {
				oldest, first = k, false
			}
		}
		delete(g.verified, oldest)
	}
	g.verified[mac] = now
}

// maxRefusalReasons bounds the refusal table (the wire's reasons are a
// fixed set; this guards against an error with another text).
const maxRefusalReasons = 32

func (g *gate) count(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.refused[reason]; ok || len(g.refused) < maxRefusalReasons {
		g.refused[reason]++
	}
}

// refusals copies the refusal counts.
func (g *gate) refusals() map[string]uint64 {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.refused))
	for k, v := range g.refused {
		out[k] = v
	}
	return out
}

// wireReason is the refusal's wire reason: the text of the broker error
// it wraps, the way the client server answers it.
func wireReason(err error) string {
	for _, e := range []error{
		broker.ErrCredentials, broker.ErrAccountLocked, broker.ErrRateLimited, broker.ErrPermission,
		broker.ErrSessionInvalid, broker.ErrSessionExpired, broker.ErrSessionRevoked, broker.ErrTLSRequired,
		broker.ErrOIDCDisabled, broker.ErrOIDCMisconfigured, broker.ErrNotEnabled,
		broker.ErrShuttingDown, broker.ErrMetadataUnavailable,
	} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "internal_error"
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
