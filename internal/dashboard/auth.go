package dashboard

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

const (
	sessionCookie = "malachi_session"
	loginCookie   = "malachi_login"
	// maxForm bounds a form's body.
	maxForm = 16 << 10
)

// cookieName is the session cookie's name: with the __Host- prefix over
// HTTPS, which browsers accept only Secure, for this host alone, on /.
func (d *Dashboard) cookieName(r *http.Request) string { return d.hostCookie(r, sessionCookie) }

// loginCookieName is the login form's cookie, prefixed the same way so a
// sibling domain cannot plant one.
func (d *Dashboard) loginCookieName(r *http.Request) string { return d.hostCookie(r, loginCookie) }

func (d *Dashboard) hostCookie(r *http.Request, name string) string {
	if d.secure(r) {
		return "__Host-" + name
	}
	return name
}

func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: int(maxAge / time.Second),
		HttpOnly: true, Secure: d.secure(r), SameSite: http.SameSiteStrictMode,
	})
}

// handler is a page of a logged-in session.
type handler func(w http.ResponseWriter, r *http.Request, ss *session)

// authed runs h for a live session, which counts as its use. Without
// one, a page goes to the login form and anything else is refused 401.
// Every POST must carry the session's CSRF token, and its Origin, if
// sent, must be this dashboard.
func (d *Dashboard) authed(h handler) http.HandlerFunc { return d.withSession(true, h) }

// watching runs h for a live session without counting as its use (the
// live chart's stream).
func (d *Dashboard) watching(h handler) http.HandlerFunc { return d.withSession(false, h) }

func (d *Dashboard) withSession(use bool, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var ss *session
		if c, err := r.Cookie(d.cookieName(r)); err == nil {
			ss = d.sessions.lookup(c.Value, use)
		}
		if ss == nil {
			if r.Method == http.MethodGet && r.URL.Path != "/stream" {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "not logged in", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			if !d.originMatches(r) {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad form", http.StatusBadRequest)
				return
			}
			if !ss.checkCSRF(r.PostForm.Get("csrf")) {
				http.Error(w, "invalid or missing CSRF token", http.StatusForbidden)
				return
			}
		}
		h(w, r, ss)
	}
}

type loginData struct {
	Token, User, Error string
}

// loginPage shows the form. A fresh random value goes both into a cookie
// and into the form: a POST whose two differ came from another site's
// form (login CSRF), which cannot read or set the cookie.
func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	d.showLogin(w, r, http.StatusOK, "", "")
}

func (d *Dashboard) showLogin(w http.ResponseWriter, r *http.Request, code int, user, msg string) {
	tok := randomID()
	d.setCookie(w, r, d.loginCookieName(r), tok, 30*time.Minute)
	d.render(w, code, "login", page{Title: "Log in", Body: loginData{Token: tok, User: user, Error: msg}})
}

// login checks a password. Three limits come first: the browser's
// address (LoginBurst), the user name's failures from any address
// (UserFailures), and the node's own per-(user, address) lock, which
// sees the browser's address through Config.Login. A refusal by the
// dashboard's limits is audited once per address and window.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	addr := d.peer(r)
	now := d.cfg.Now()
	if !d.originMatches(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	if ok, wait := d.logins.allow(limitKey(addr), now); !ok {
		d.throttledAudit("", addr, "rate_limited")
		d.refuseLogin(w, r, "", wait, "Rate limited: too many login attempts from your address")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	c, err := r.Cookie(d.loginCookieName(r))
	if form := r.PostForm.Get("login_token"); err != nil || len(c.Value) != loginTokenLen || len(form) != loginTokenLen ||
		subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
		d.showLogin(w, r, http.StatusForbidden, "", "The login form expired; please try again.")
		return
	}
	user, password := r.PostForm.Get("user"), r.PostForm.Get("password")
	if user == "" || password == "" {
		d.showLogin(w, r, http.StatusUnauthorized, clip(user), "Enter a user and a password.")
		return
	}
	userKey := "user:" + clip(user) // node names are shorter than the clip
	if wait := d.failures.wait(userKey, now); wait > 0 {
		d.throttledAudit(user, addr, "user_rate_limited")
		d.refuseLogin(w, r, user, wait, "Rate limited: too many failed logins for this user")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.cfg.DialTimeout)
	defer cancel()
	token, admin, err := d.checkPassword(ctx, user, password, addr)
	if loginFailed(err) {
		d.failures.charge(userKey, now)
	}
	if throttled(err) {
		// The node refused without checking: as cheap to repeat as the
		// dashboard's own refusals, so audited as sparingly.
		d.throttledAudit(user, addr, err.Error())
	} else {
		d.audit(Event{Type: "dashboard_login", User: clip(user), Peer: addr, Err: err})
	}
	if err != nil {
		code, msg := loginRefusal(err)
		if code >= 500 {
			d.cfg.Logger.Warn("dashboard: login could not reach the node", "err", err)
		}
		d.showLogin(w, r, code, clip(user), msg)
		return
	}
	ss, err := d.sessions.add(user, token, admin)
	if err != nil {
		w.Header().Set("Retry-After", "60")
		d.showLogin(w, r, http.StatusServiceUnavailable, clip(user), "Too many sessions are open on this dashboard; try again later.")
		return
	}
	d.setCookie(w, r, d.loginCookieName(r), "", -1)
	d.setCookie(w, r, d.cookieName(r), ss.id, d.cfg.MaxAge)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// loginTokenLen is the length of randomID's values.
var loginTokenLen = len(randomID())

func (d *Dashboard) refuseLogin(w http.ResponseWriter, r *http.Request, user string, wait time.Duration, why string) {
	secs := int(wait/time.Second) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	d.showLogin(w, r, http.StatusTooManyRequests, clip(user), why+"; try again in "+strconv.Itoa(secs)+" s.")
}

// checkPassword asks the node: in its process with the browser's address
// when the dashboard has Config.Login, else over the client port, a dial
// that takes a place in the connection bound like any other.
func (d *Dashboard) checkPassword(ctx context.Context, user, password, addr string) (string, bool, error) {
	if d.cfg.Login != nil {
		return d.cfg.Login.Login(ctx, user, password, addr)
	}
	if !d.sessions.reserve() {
		return "", false, errBusy
	}
	defer d.sessions.unreserve()
	return d.node.login(ctx, user, password)
}

// throttled reports whether the node refused a login for its limits
// rather than for the password.
func throttled(err error) bool {
	return errors.Is(err, client.ErrAccountLocked) || errors.Is(err, client.ErrRateLimitExceeded)
}

// loginFailed reports whether err says the password was wrong (or the
// user is already locked), which the per-user limit counts.
func loginFailed(err error) bool {
	return errors.Is(err, client.ErrInvalidCredentials) || errors.Is(err, client.ErrAccountLocked)
}

// loginRefusal says why a login failed without telling which of the user
// and password was wrong.
func loginRefusal(err error) (int, string) {
	switch {
	case errors.Is(err, client.ErrInvalidCredentials):
		return http.StatusUnauthorized, "Unknown user or wrong password."
	case errors.Is(err, client.ErrAccountLocked):
		return http.StatusTooManyRequests, "This account is locked for a while after too many failed logins from your address."
	case errors.Is(err, client.ErrRateLimitExceeded):
		return http.StatusTooManyRequests, "Rate limited: the node refuses logins from your address for a while; try again later."
	case errors.Is(err, ErrNoResume):
		return http.StatusServiceUnavailable, "This node does not resume login sessions (--session-ttl is negative), which the dashboard needs."
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable, "Every connection to the node is in use; try again shortly."
	}
	return http.StatusBadGateway, "The node could not be reached to check the login."
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, ss *session) {
	d.sessions.remove(ss)
	d.audit(Event{Type: "dashboard_logout", User: clip(ss.user), Peer: d.peer(r)})
	d.setCookie(w, r, d.cookieName(r), "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
