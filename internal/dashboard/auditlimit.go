package dashboard

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// refusalWindow is how long the audit log goes without a second line
// about an address's throttled logins: a refusal that cost nothing is
// counted, not written each time.
const refusalWindow = time.Minute

// maxAuditUser bounds the user name an audit line carries: the name of a
// failed login is whatever the form was sent.
const maxAuditUser = 64

// refusalReporter decides which throttled refusals are audited: the
// first of an address in each window, carrying how many were left out
// since the last one. Its table is bounded like the limiter's.
type refusalReporter struct {
	mu  sync.Mutex
	max int
	m   map[string]*refusals
}

type refusals struct {
	since      time.Time
	suppressed int
}

func newRefusalReporter(max int) *refusalReporter {
	return &refusalReporter{max: max, m: map[string]*refusals{}}
}

// report says whether to audit this refusal of key at now, and how many
// were not audited before it.
func (r *refusalReporter) report(key string, now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[key]
	if e != nil && now.Sub(e.since) < refusalWindow {
		e.suppressed++
		return false, 0
	}
	if e == nil {
		if len(r.m) >= r.max {
			r.shrinkLocked(now)
		}
		e = &refusals{}
		r.m[key] = e
	}
	n := e.suppressed
	e.since, e.suppressed = now, 0
	return true, n
}

// shrinkLocked forgets windows that are over, or else the oldest one
// (its count of left-out lines is lost, never memory grown).
func (r *refusalReporter) shrinkLocked(now time.Time) {
	var oldest string
	var at time.Time
	for k, e := range r.m {
		if now.Sub(e.since) >= refusalWindow {
			delete(r.m, k)
			continue
		}
		if oldest == "" || e.since.Before(at) {
			oldest, at = k, e.since
		}
	}
	if len(r.m) >= r.max {
		delete(r.m, oldest)
	}
}

// throttledAudit audits a refusal by the dashboard's own login limits,
// once per address and window.
func (d *Dashboard) throttledAudit(user, addr, reason string) {
	ok, n := d.refusals.report(limitKey(addr), d.cfg.Now())
	if !ok {
		return
	}
	ev := Event{Type: "dashboard_login", User: clip(user), Peer: addr, Err: errString(reason)}
	if n > 0 {
		ev.Detail = map[string]string{"similar_refusals_not_audited": strconv.Itoa(n)}
	}
	d.audit(ev)
}

type errString string

func (e errString) Error() string { return string(e) }

// clip cuts s to at most maxAuditUser bytes on a character boundary.
func clip(s string) string {
	if len(s) <= maxAuditUser {
		return s
	}
	s = s[:maxAuditUser]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
