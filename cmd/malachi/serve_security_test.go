package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeSecurityFlags: serve's login and audit flags reach the node.
// With --lockout-failures 2, two wrong passwords lock the user out (even
// the right password is then refused with account_locked), and the audit
// log records the failures and the lockout without the password.
func TestServeSecurityFlags(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	addr, _ := startServeWith(t, c, "--lockout-failures", "2", "--lockout-duration", "1h", "--audit-log", auditPath)
	c.env = append(c.env, "MALACHI_SERVER="+addr)
	for i := 0; i < 2; i++ {
		c.fails(1, "status", "--user", "producer", "--password", "wrong-guess")
	}
	if stderr := c.fails(1, "status", "--user", "producer", "--password", "producer123"); !strings.Contains(stderr, "account_locked") {
		t.Fatalf("right password while locked: %q", stderr)
	}
	c.ok("status") // another user is not affected
	waitUntil(t, func() bool {
		b, _ := os.ReadFile(auditPath)
		return strings.Contains(string(b), "lock")
	})
	b, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "wrong-guess") || strings.Contains(string(b), "producer123") {
		t.Fatalf("the audit log holds a password: %s", b)
	}
}

// waitUntil polls cond until it holds or waitFor passes: for effects of a
// child process that the test cannot be told about directly.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
