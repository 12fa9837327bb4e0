package main

import (
	"strings"
	"testing"
)

// TestPermissionHintIsFollowable: the hint of a refused produce must be
// one an admin can follow. 'user add --perms' cannot be: the user exists,
// so it answers user_exists, and no other command changes an existing
// user's permissions. A grant alone is enough, on this default node too,
// so neither the hint nor 'acl grant' may say grants matter only on a node
// with --acl-strict.
func TestPermissionHintIsFollowable(t *testing.T) {
	t.Parallel()
	admin, _ := withNode(t)
	admin.ok("topic", "create", "t")
	consumer := admin.withLogin("consumer", "consumer123")

	r := consumer.run(strings.NewReader("x\n"), "produce", "t")
	if r.code != 1 {
		t.Fatalf("produce by consumer: exit %d, stderr %q", r.code, r.stderr)
	}
	hint := r.stderr
	if !strings.Contains(hint, "malachi acl grant consumer produce t") {
		t.Errorf("the hint does not name the grant that lets consumer produce: %q", hint)
	}
	if strings.Contains(hint, "user add --perms") {
		// Follow it: give the existing user the permission.
		fix := admin.run(strings.NewReader(""), "user", "add", "consumer", "--perms", "produce,consume", "--new-password", "consumer123")
		if fix.code != 0 {
			t.Errorf("the hint %q sends the admin to 'user add --perms', which fails for an existing user: %q", hint, fix.stderr)
		}
	}

	grant := admin.run(strings.NewReader(""), "acl", "grant", "consumer", "produce", "t")
	if grant.code != 0 {
		t.Fatalf("acl grant: %q", grant.stderr)
	}
	after := consumer.run(strings.NewReader("y\n"), "produce", "t")
	if after.code != 0 {
		t.Fatalf("produce after a grant: exit %d %q", after.code, after.stderr)
	}
	// The grant alone let a user without the produce permission produce,
	// on a node without --acl-strict.
	if strings.Contains(hint, "on a node started with --acl-strict, a grant") {
		t.Errorf("the hint says a grant matters only on a strict node, but on this default node the grant alone let consumer produce: %q", hint)
	}
	if strings.Contains(grant.stderr, "otherwise produce and consume permissions already cover every topic") {
		t.Errorf("acl grant says grants do nothing off strict mode, yet it just let consumer produce: %q", grant.stderr)
	}
}

// TestStrictHintPermissionNotNeeded: on a node with --acl-strict the
// user's own permissions are not consulted (auth.Allowed looks only at the
// grants), so a refused consume must not say the user needs the consume
// permission: the grant the hint names is enough.
func TestStrictHintPermissionNotNeeded(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	c.env = append(c.env, "MALACHI_ACL_STRICT=true")
	node := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	admin := newCLI(t, node.addr)
	admin.ok("topic", "create", "orders")
	admin.okIn("a\n", "produce", "orders")
	producer := admin.withLogin("producer", "producer123") // perms: produce only

	hint := producer.fails(1, "consume", "orders")
	admin.ok("acl", "grant", "producer", "consume", "orders")
	if got := producer.ok("consume", "orders"); got != "a\n" {
		t.Fatalf("consume after a grant: %q", got)
	}
	if strings.Contains(hint, "needs the consume permission") {
		t.Errorf("on a strict node the grant alone let producer (no consume permission) consume, but the hint said it needs the permission: %q", hint)
	}
}
