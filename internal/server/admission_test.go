package server

import (
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// TestAddrKeyGroupsIPv6Sites: per-address limits count an IPv6 client by
// its /64, so one site cannot take unlimited addresses; IPv4 addresses
// (mapped ones included) count alone.
func TestAddrKeyGroupsIPv6Sites(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":               "192.0.2.7",
		"::ffff:192.0.2.7":        "::ffff:192.0.2.7",
		"2001:db8:1:2::1":         "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff:1:2:3": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":         "2001:db8:1:3::/64",
		"fe80::1%eth0":            "fe80::/64",
		"not-an-address":          "not-an-address",
	} {
		if got := addrKey(in); got != want {
			t.Errorf("addrKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConnectionsThatNeverLogInHoldOnlyAShare: connections that have not
// logged in are capped on their own, below MaxConns, so clients that never
// log in cannot keep out those that do; a connection that logs in leaves
// that count.
func TestConnectionsThatNeverLogInHoldOnlyAShare(t *testing.T) {
	s := startServer(t, Config{MaxConns: 10, MaxPreAuthConns: 2, MaxConnsPerIP: 10, AuthTimeout: time.Minute})
	idle1, idle2 := dialClient(t, s), dialClient(t, s)
	_ = idle2 // held open; it never logs in
	waitFor(t, "both idle connections to be admitted", func() {}, func() bool { return connCount(s) == 2 })
	third := dialClient(t, s)
	if reason := refusal(t, third); reason != wire.ReasonGlobalLimitExceeded {
		t.Fatalf("a third connection that has not logged in: %q", reason)
	}
	idle1.auth() // logs in: leaves the not-logged-in count
	fourth := dialClient(t, s)
	fourth.auth()
}

// refusal reads the error frame a refused connection gets.
func refusal(t *testing.T, c *client) string {
	t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	body, err := wire.ReadFrame(c.br, 0, nil)
	if err != nil {
		t.Fatalf("no refusal: %v", err)
	}
	_, code, payload, err := wire.ParseResponse(body)
	if err != nil || code == wire.CodeOK {
		t.Fatalf("not a refusal: code %d, %v", code, err)
	}
	reason, _ := wire.DecodeError(payload)
	return reason
}
