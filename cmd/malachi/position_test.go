package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestConsumeFromTime: --from a time or a duration starts at the first
// record at or after it, by record timestamps, through a split. The
// records are an hour apart, half an hour off the present, so that no
// check depends on how long the commands take.
func TestConsumeFromTime(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	c.ok("topic", "create", "t")
	now := time.Now()
	at := func(v string, offset time.Duration) client.Record {
		return client.Record{Key: []byte("k"), Value: []byte(v), Timestamp: now.Add(offset)}
	}
	h := time.Hour
	if _, err := admin.Produce(t.Context(), "t", at("-3.5h", -7*h/2), at("-2.5h", -5*h/2)); err != nil {
		t.Fatal(err)
	}
	c.ok("topic", "split", "t")
	if _, err := admin.Produce(t.Context(), "t", at("-1.5h", -3*h/2), at("-0.5h", -h/2), at("+0.5h", h/2)); err != nil {
		t.Fatal(err)
	}
	from := now.Add(-3 * h).UTC().Format(time.RFC3339)
	for _, tc := range []struct{ from, want string }{
		{from, "-2.5h\n-1.5h\n-0.5h\n+0.5h\n"},
		{"-1h", "-0.5h\n+0.5h\n"},
		{"-1s", "+0.5h\n"},
		{"start", "-3.5h\n-2.5h\n-1.5h\n-0.5h\n+0.5h\n"},
	} {
		if out := c.ok("consume", "t", "--from", tc.from); out != tc.want {
			t.Errorf("--from %s: %q, want %q", tc.from, out, tc.want)
		}
	}
	c.ok("group", "seek", "t", "g", "--to", "-1s")
	if out := c.ok("consume", "t", "--group", "g"); out != "+0.5h\n" {
		t.Errorf("group seek --to -1s: %q", out)
	}
	c.fails(2, "consume", "t", "--from", "yesterday")
}

// TestGroupSeekAndDelete moves a group back and forgets it.
func TestGroupSeekAndDelete(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "t")
	produceDirect(t, adminClient(t, n), "t", "k", "a", "b")
	c.ok("consume", "t", "--group", "g", "--commit")
	if out := c.ok("consume", "t", "--group", "g"); out != "" {
		t.Fatalf("a committed group read %q again", out)
	}
	c.ok("group", "seek", "t", "g", "--to", "start")
	if out := c.ok("consume", "t", "--group", "g"); out != "a\nb\n" {
		t.Errorf("after seek --to start: %q", out)
	}
	c.ok("group", "delete", "t", "g")
	if errOut := c.fails(1, "group", "delete", "t", "g"); !strings.Contains(errOut, "group g has no committed position") {
		t.Errorf("deleting a deleted group: %q", errOut)
	}
	c.fails(2, "group", "seek", "t", "g")
}

// TestAdminResetPassword recovers an administrator on a stopped node, and
// refuses while the node runs.
func TestAdminResetPassword(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	dir := t.TempDir()
	node := startServeChild(t, c, dir, "127.0.0.1:0")
	if errOut := c.fails(1, "admin", "reset-password", "--data-dir", dir, "admin", "--new-password", "x"); !strings.Contains(errOut, "stop it first") {
		t.Errorf("reset on a running node: %q", errOut)
	}
	node.cmd.Process.Signal(syscall.SIGINT)
	node.cmd.Wait()
	c.okIn("rescued\n", "admin", "reset-password", "--data-dir", dir, "admin", "--new-password-stdin")
	node = startServeChild(t, c, dir, "127.0.0.1:0")
	cl := newCLI(t, node.addr)
	cl.ok("--password", "rescued", "user", "list")
	cl.fails(1, "--password", "admin123", "user", "list")
}

// TestGroupDescribeShowsMembers: describe lists live members, their
// ranges and the generation; seeking a group with members is refused
// with a hint.
func TestGroupDescribeShowsMembers(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	admin := adminClient(t, n)
	c.ok("topic", "create", "t", "--ranges", "2")
	if _, err := admin.Fetch(t.Context(), "t", client.FetchOptions{Group: "g", Member: "m1", Max: 1}); err != nil {
		t.Fatal(err)
	}
	var d groupJSON
	if err := json.Unmarshal([]byte(c.ok("group", "describe", "t", "g", "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Generation == nil || *d.Generation == 0 || len(d.Members) != 1 || d.Members[0].Name != "m1" || len(d.Members[0].Ranges) != 2 {
		t.Errorf("describe -o json: %+v", d)
	}
	if out := c.ok("group", "describe", "t", "g"); !strings.Contains(out, "MEMBER") || !strings.Contains(out, "m1") {
		t.Errorf("describe:\n%s", out)
	}
	if errOut := c.fails(1, "group", "seek", "t", "g", "--to", "start"); !strings.Contains(errOut, "live members") {
		t.Errorf("seek with members: %q", errOut)
	}
}
