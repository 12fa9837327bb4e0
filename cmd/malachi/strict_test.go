package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestStrictModeNonAdminViews: on a node with --acl-strict a user who is
// not an administrator asks for the status and the topic list and is told
// that it sees only its topics, not shown an empty data directory or told
// to create topics it may not create; refusals name the one permission
// the operation needs.
func TestStrictModeNonAdminViews(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	c.env = append(c.env, "MALACHI_ACL_STRICT=true")
	node := startServeChild(t, c, t.TempDir(), "127.0.0.1:0")
	admin := newCLI(t, node.addr)
	admin.ok("topic", "create", "orders")
	admin.okIn("a\nb\n", "produce", "orders")
	consumer := admin.withLogin("consumer", "consumer123")

	out := consumer.ok("status")
	for _, want := range []string{"Data dir  (shown to administrators only)", "Topics    0 (in the topics consumer may see)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(consumer.ok("status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if _, ok := st["data_dir"]; ok || st["visible_only"] != true || st["topics"] != 0.0 {
		t.Errorf("status -o json: %v", st)
	}
	r := consumer.run(strings.NewReader(""), "topic", "list")
	if r.code != 0 || strings.Contains(r.stderr, "topic create") || !strings.Contains(r.stderr, "acl grant consumer consume") {
		t.Errorf("topic list: exit %d, stderr %q", r.code, r.stderr)
	}
	errOut := consumer.fails(1, "consume", "orders")
	if !strings.Contains(errOut, "acl grant consumer consume orders") || strings.Contains(errOut, "produce|consume") {
		t.Errorf("consume refused: %q", errOut)
	}

	admin.ok("acl", "grant", "consumer", "consume", "orders")
	out = consumer.ok("status")
	if !strings.Contains(out, "Topics    1 (in the topics consumer may see)") || !strings.Contains(out, "Records   2 (") {
		t.Errorf("status after a grant:\n%s", out)
	}
	if got := consumer.ok("consume", "orders"); got != "a\nb\n" {
		t.Errorf("consume after a grant: %q", got)
	}
	// An administrator still sees the node's own figures.
	if out := admin.ok("status"); strings.Contains(out, "may see") || strings.Contains(out, "administrators only") {
		t.Errorf("admin status:\n%s", out)
	}
}

// withLogin returns a copy of c that logs in as user.
func (c *cli) withLogin(user, password string) *cli {
	cp := *c
	cp.env = append(append([]string(nil), c.env...), "MALACHI_USER="+user, "MALACHI_PASSWORD="+password)
	return &cp
}

// TestRefusalHintsNameTheRemedy: a refused produce, consume or topic
// create names the one permission it needs; an admin-only topic delete
// says so instead of suggesting a grant; an unknown group is named.
func TestRefusalHintsNameTheRemedy(t *testing.T) {
	t.Parallel()
	admin, _ := withNode(t)
	admin.ok("topic", "create", "t")
	consumer := admin.withLogin("consumer", "consumer123")
	producer := admin.withLogin("producer", "producer123")
	cases := []struct {
		c           *cli
		args        []string
		want, avoid string
	}{
		{consumer, []string{"produce", "t"}, "acl grant consumer produce t", "produce|consume"},
		{producer, []string{"consume", "t"}, "acl grant producer consume t", "produce|consume"},
		{consumer, []string{"topic", "create", "u"}, "may not create the topic u: an admin can grant it with 'malachi acl grant consumer produce u'", "produce|consume"},
		{consumer, []string{"topic", "delete", "t", "--yes"}, "only an administrator may do this", "acl grant"},
		{admin, []string{"group", "describe", "t", "nogroup"}, "group nogroup has no committed position on t", "the named object"},
	}
	for _, tc := range cases {
		r := tc.c.run(strings.NewReader("x\n"), tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, tc.avoid) {
			t.Errorf("%v: exit %d, stderr %q; want %q and not %q", tc.args, r.code, r.stderr, tc.want, tc.avoid)
		}
	}
}
