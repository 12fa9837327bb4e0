package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestServeSecurityFlags: serve's login and audit flags reach the node.
// With --lockout-failures 2, two wrong passwords lock the user out (even
// the right password is then refused with account_locked), and the audit
// log records the failures and the lockout without the password.
func TestServeSecurityFlags(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	addr, proc := startServeWith(t, c, "--lockout-failures", "2", "--lockout-duration", "1h", "--audit-log", auditPath)
	c.env = append(c.env, "MALACHI_SERVER="+addr)
	for i := 0; i < 2; i++ {
		c.fails(1, "status", "--user", "producer", "--password", "wrong-guess")
	}
	if stderr := c.fails(1, "status", "--user", "producer", "--password", "producer123"); !strings.Contains(stderr, "account_locked") {
		t.Fatalf("right password while locked: %q", stderr)
	}
	c.ok("status") // another user is not affected
	// A stopping node flushes its audit log: read it once the node is gone.
	if err := proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "lock") {
		t.Fatalf("the audit log has no lockout: %s", b)
	}
	if strings.Contains(string(b), "wrong-guess") || strings.Contains(string(b), "producer123") {
		t.Fatalf("the audit log holds a password: %s", b)
	}
}
