package main

import (
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

func TestTopicCommands(t *testing.T) {
	t.Parallel()
	c, n := withNode(t, clienttest.WithSegmentMaxBytes(1024))
	if out := c.ok("topic", "create", "orders", "--ranges", "4"); out != "created topic orders\n" {
		t.Fatalf("create: %q", out)
	}
	c.ok("topic", "create", "small", "--keyspace-bits", "4")
	produceDirect(t, adminClient(t, n), "orders", "user-1", "created", "paid")

	var list []topicListJSON
	if err := json.Unmarshal([]byte(c.ok("topic", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "orders" || list[0].ActiveRanges != 4 || list[0].Records != 2 ||
		list[1].Name != "small" || list[1].KeyspaceBits != 4 {
		t.Fatalf("topic list: %+v", list)
	}
	if out := c.ok("topic", "list"); !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "orders") {
		t.Fatalf("topic list text:\n%s", out)
	}

	d := describe(t, c, "orders")
	if d.Name != "orders" || d.KeyspaceBits != 16 || len(d.Ranges) != 4 || d.Records != 2 || d.Bytes == 0 {
		t.Fatalf("describe: %+v", d)
	}
	var busy rangeJSON
	for _, r := range d.Ranges {
		if r.Records > 0 {
			busy = r
		}
	}
	if busy.Records != 2 || len(busy.Segments) == 0 || len(busy.Segments[0].Replicas) == 0 || busy.Segments[0].Records == 0 {
		t.Fatalf("busiest range: %+v", busy)
	}
	text := c.ok("topic", "describe", "orders")
	for _, want := range []string{"Topic     orders", "KEY SLICE", "0x0000-0x3fff", "REPLICAS"} {
		if !strings.Contains(text, want) {
			t.Errorf("describe text lacks %q:\n%s", want, text)
		}
	}
}

func describe(t *testing.T, c *cli, topic string) topicJSON {
	t.Helper()
	var d topicJSON
	if err := json.Unmarshal([]byte(c.ok("topic", "describe", topic, "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTopicSplitMergeDelete(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "s", "--ranges", "2")
	produceDirect(t, adminClient(t, n), "s", "k", "a", "b")

	var split struct {
		Children []uint64 `json:"children"`
	}
	if err := json.Unmarshal([]byte(c.ok("topic", "split", "s", "-o", "json")), &split); err != nil || len(split.Children) != 2 {
		t.Fatalf("split: %v %+v", err, split)
	}
	d := describe(t, c, "s")
	active := 0
	for _, r := range d.Ranges {
		if r.Active {
			active++
		}
		if slices.Contains(split.Children, r.ID) && len(r.Parents) != 1 {
			t.Errorf("child %d has parents %v", r.ID, r.Parents)
		}
	}
	if active != 3 || len(d.Ranges) != 4 {
		t.Fatalf("after split: %d active of %d", active, len(d.Ranges))
	}
	out := c.ok("topic", "merge", "s", itoa(split.Children[0]), itoa(split.Children[1]))
	if !strings.HasPrefix(out, "merged ranges") {
		t.Fatalf("merge: %q", out)
	}
	// Records stay readable, in key order, through split and merge.
	if out := c.ok("consume", "s"); out != "a\nb\n" {
		t.Fatalf("consume after split and merge: %q", out)
	}
	stderr := c.fails(1, "topic", "merge", "s", "98", "99")
	if !strings.Contains(stderr, "malachi topic describe s") {
		t.Fatalf("merge of missing ranges: %q", stderr)
	}
	c.ok("topic", "delete", "s")
	c.fails(1, "topic", "describe", "s")
}

func TestStatus(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "st")
	produceDirect(t, adminClient(t, n), "st", "k", "x")
	var st statusJSON
	if err := json.Unmarshal([]byte(c.ok("status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.NodeID == "" || st.Version == "" || st.DataDir != n.DataDir() || st.Topics != 1 || st.Records != 1 || st.Server != n.Addr() {
		t.Fatalf("status: %+v", st)
	}
	if out := c.ok("status"); !strings.Contains(out, "Data dir  "+n.DataDir()) {
		t.Fatalf("status text:\n%s", out)
	}
}

func TestUsersAndACLs(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "orders.eu")
	c.ok("user", "add", "alice", "--new-password", "pw1", "--perms", "produce,consume")
	users := userList(t, c)
	if i := slices.IndexFunc(users, func(u userJSON) bool { return u.Name == "alice" }); i < 0 ||
		!sameMultiset(users[i].Perms, []string{"produce", "consume"}) {
		t.Fatalf("user list: %+v", users)
	}
	if out := c.ok("user", "list"); !strings.HasPrefix(out, "USER") || !strings.Contains(out, "alice") {
		t.Fatalf("user list text:\n%s", out)
	}

	// alice can produce but is no admin.
	c.okIn("hi\n", "produce", "orders.eu", "--user", "alice", "--password", "pw1")
	if e := c.fails(1, "user", "list", "--user", "alice", "--password", "pw1"); !strings.Contains(e, "permission_denied") {
		t.Fatalf("user list as alice: %q", e)
	}
	c.ok("user", "passwd", "alice", "--new-password", "pw2")
	c.fails(1, "topic", "describe", "orders.eu", "--user", "alice", "--password", "pw1")
	c.ok("topic", "describe", "orders.eu", "--user", "alice", "--password", "pw2")

	c.ok("acl", "grant", "alice", "consume", "orders.*")
	var acls []aclJSON
	if err := json.Unmarshal([]byte(c.ok("acl", "list", "alice", "-o", "json")), &acls); err != nil {
		t.Fatal(err)
	}
	if len(acls) != 1 || acls[0] != (aclJSON{Operation: "consume", Pattern: "orders.*"}) {
		t.Fatalf("acl list: %+v", acls)
	}
	c.ok("acl", "revoke", "alice", "consume", "orders.*")
	if out := c.ok("acl", "list", "alice", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("acl list after revoke: %q", out)
	}
	c.ok("user", "delete", "alice")
	if e := c.fails(1, "user", "delete", "alice"); !strings.Contains(e, "user_not_found") {
		t.Fatalf("delete twice: %q", e)
	}
}

func userList(t *testing.T, c *cli) []userJSON {
	t.Helper()
	var users []userJSON
	if err := json.Unmarshal([]byte(c.ok("user", "list", "-o", "json")), &users); err != nil {
		t.Fatal(err)
	}
	return users
}

func TestErrorsAndExitCodes(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "here")
	cases := []struct {
		args  []string
		code  int
		want  string
		stdin string
	}{
		{[]string{"consume", "nope"}, 1, "no_such_topic: create it with 'malachi topic create nope'", ""},
		{[]string{"produce", "nope"}, 1, "no_such_topic: create it with 'malachi topic create nope' (read 1 line, sent 1, skipped 0; 0 of 1 records produced)", "x\n"},
		{[]string{"topic", "create", "here"}, 1, "already_exists", ""},
		{[]string{"topic", "list", "--password", "wrong"}, 1, "invalid_credentials: check --user/--password (or MALACHI_USER/MALACHI_PASSWORD)", ""},
		{[]string{"consume", "here", "--cursor", "forged"}, 1, "invalid_cursor", ""},
		{[]string{"topic", "list", "--bogus"}, 2, "unknown flag: --bogus", ""},
		{[]string{"topic", "create"}, 2, "usage: malachi topic create NAME", ""},
		{[]string{"topic", "frobnicate"}, 2, `unknown command "frobnicate"`, ""},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`, ""},
		{[]string{"status", "-o", "yaml"}, 2, "--output is text or json", ""},
		{[]string{"consume", "here", "--commit"}, 2, "--commit needs --group", ""},
		{[]string{"consume", "here", "--from", "end", "--cursor", "x"}, 2, "--from conflicts", ""},
		{[]string{"produce", "here", "--kv", "--key", "k"}, 2, "only one of", ""},
		{[]string{"produce", "here", "--header", "novalue"}, 2, "--header takes key=value", ""},
		{[]string{"topic", "merge", "here", "1", "x"}, 2, "range ids are positive integers", ""},
	}
	for _, tc := range cases {
		r := c.run(strings.NewReader(tc.stdin), tc.args...)
		stderr := r.stderr
		if r.code != tc.code {
			t.Errorf("malachi %s: exit %d, want %d; stderr %q", strings.Join(tc.args, " "), r.code, tc.code, stderr)
		}
		if !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("malachi %s: stderr %q, want one line with %q", strings.Join(tc.args, " "), stderr, tc.want)
		}
	}
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := newCLI(t, addr)
	stderr := c.fails(1, "status")
	if want := "error: cannot reach " + addr + ": is 'malachi serve' running?"; !strings.HasPrefix(stderr, want) {
		t.Fatalf("stderr %q, want prefix %q", stderr, want)
	}
}

func TestContexts(t *testing.T) {
	t.Parallel()
	n := clienttest.Start(t)
	c := newCLI(t, "") // no MALACHI_SERVER: the context must say where
	c.ok("context", "save", "local", "--server", n.Addr(), "--description", "test node")
	c.ok("topic", "create", "ctx")
	c.ok("context", "save", "nowhere", "--server", "127.0.0.1:1")
	var list []contextJSON
	if err := json.Unmarshal([]byte(c.ok("context", "list", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "local" || !list[0].Current || list[0].Server != n.Addr() || list[0].User != "admin" {
		t.Fatalf("context list: %+v", list)
	}
	c.ok("context", "use", "nowhere")
	c.fails(1, "topic", "list")
	c.ok("topic", "list", "--context", "local")
	c.ok("context", "delete", "nowhere")
	c.fails(2, "context", "use", "nowhere")
	// With the current context deleted, the default address applies.
	if out := c.ok("context", "list"); !strings.Contains(out, "local") || strings.Contains(out, "* ") {
		t.Fatalf("context list text:\n%s", out)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	if out := c.ok("completion", "bash"); !strings.Contains(out, "__start_malachi") {
		t.Fatalf("bash completion script missing its entry point")
	}
}
