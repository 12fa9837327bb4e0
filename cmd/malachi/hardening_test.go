package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/malachi-log/malachi/internal/wire"
)

// hostile is a name a malicious or compromised server might send: ESC
// starting a colour sequence, BEL, CR, backspace, DEL, the C1 control CSI
// (U+009B), a right-to-left override and a byte that is not UTF-8. Any of
// them reaching a terminal raw can rewrite what the user sees.
const hostile = "ev\x1b[31mil\a\rX\b\x7f\u009b2J\u202e\xff"

// rawControl returns the first terminal control in s that output must
// never carry raw, or "" if there is none. Newlines are the output's own.
func rawControl(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return fmt.Sprintf("invalid UTF-8 byte %#x at %d", s[i], i)
		case r == '\n':
		case r < 0x20, r >= 0x7f && r <= 0x9f:
			return fmt.Sprintf("control %U at %d", r, i)
		case isBidiControl(r):
			return fmt.Sprintf("bidi control %U at %d", r, i)
		}
		i += n
	}
	return ""
}

// hostileNode answers every listing with the hostile name in each string
// field, and refuses a topic deletion with it as the reason.
func hostileNode(t *testing.T) *fakeNode {
	return startFakeNode(t, nil, func(req wire.Request) (wire.Response, string) {
		switch req.(type) {
		case *wire.ListUsersRequest:
			return wire.ListUsersResponse{Users: []wire.UserEntry{{User: hostile, Perms: []string{"admin", hostile}}}}, ""
		case *wire.ListACLsRequest:
			return wire.ListACLsResponse{ACLs: []wire.ACLEntry{{Operation: hostile, Resource: hostile}}}, ""
		case *wire.ListGroupsRequest:
			return wire.ListGroupsResponse{Groups: []string{hostile}}, ""
		case *wire.DescribeGroupRequest:
			return wire.DescribeGroupResponse{Group: hostile, Cursor: new(hostile), Lag: 1, Ranges: []wire.RangeLag{{Range: 1, Lag: 1}}}, ""
		case *wire.ListTopicsRequest:
			return wire.ListTopicsResponse{Topics: []wire.TopicSummary{{Name: hostile, Bits: 16, ActiveRanges: 1, Ranges: 1}}}, ""
		case *wire.DescribeTopicRequest:
			return wire.DescribeTopicResponse{ID: 1, Name: hostile, Bits: 16, Groups: []string{hostile},
				Ranges: []wire.RangeInfo{{ID: 1, Start: 0, End: 1 << 16, Active: true,
					Segments: []wire.SegmentInfo{{ID: 1, Active: true, Replicas: []string{hostile}}}}}}, ""
		case *wire.StatusRequest:
			return wire.StatusResponse{NodeID: hostile, Version: hostile, DataDir: hostile}, ""
		case *wire.DeleteTopicRequest:
			return nil, hostile
		}
		return nil, wire.ReasonUnknownAPIKey
	})
}

// TestServerStringsAreEscaped runs every command that prints names the
// server sends against a server that sends hostile ones: no raw control
// may reach stdout or stderr in text output, the text shows the escaped
// form, and JSON output carries the names intact, JSON-escaped.
func TestServerStringsAreEscaped(t *testing.T) {
	t.Parallel()
	f := hostileNode(t)
	c := newCLI(t, f.addr())
	commands := [][]string{
		{"user", "list"},
		{"acl", "list", "bob"},
		{"group", "list", "orders"},
		{"group", "describe", "orders", "g"},
		{"topic", "list"},
		{"topic", "describe", "orders"},
		{"status"},
	}
	for _, args := range commands {
		for _, output := range []string{"text", "json"} {
			r := c.run(strings.NewReader(""), append(args, "-o", output)...)
			name := strings.Join(args, " ") + " -o " + output
			if r.code != 0 {
				t.Errorf("%s: exit %d, stderr %q", name, r.code, r.stderr)
				continue
			}
			if bad := rawControl(r.stdout); bad != "" {
				t.Errorf("%s: stdout carries %s: %q", name, bad, r.stdout)
			}
			if bad := rawControl(r.stderr); bad != "" {
				t.Errorf("%s: stderr carries %s: %q", name, bad, r.stderr)
			}
			if output == "text" && !strings.Contains(r.stdout, `ev\x1b[31mil\x07\rX\x08\x7f\u009b2J\u202e\xff`) {
				t.Errorf("%s: the escaped name is not shown:\n%s", name, r.stdout)
			}
			if output == "json" {
				checkJSONNames(t, name, r.stdout)
			}
		}
	}
	r := c.run(strings.NewReader(""), "topic", "delete", "orders", "--yes")
	if r.code != 1 || rawControl(r.stderr) != "" || !strings.Contains(r.stderr, `ev\x1b[31mil`) {
		t.Errorf("refusal with a hostile reason: exit %d, stderr %q", r.code, r.stderr)
	}
}

// checkJSONNames requires the document to be valid JSON in which the
// hostile name survives (its byte that is not UTF-8 replaced, as JSON
// requires).
func checkJSONNames(t *testing.T, name, doc string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Errorf("%s: not JSON: %v\n%s", name, err, doc)
		return
	}
	want := strings.ToValidUTF8(hostile, "\uFFFD")
	found := false
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			found = found || v == want
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	if !found {
		t.Errorf("%s: the name does not survive in the JSON:\n%s", name, doc)
	}
}

// TestEmptyPasswordRefused: user add (alias create) and user passwd
// refuse an empty password before anything is sent.
func TestEmptyPasswordRefused(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		sent []string
	)
	f := startFakeNode(t, nil, func(req wire.Request) (wire.Response, string) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, wire.KeyName(req.APIKey()))
		return wire.EmptyResponse{}, ""
	})
	c := newCLI(t, f.addr())
	for _, args := range [][]string{
		{"user", "add", "bob", "--perms", "consume", "--new-password", ""},
		{"user", "create", "bob", "--perms", "consume", "--new-password", ""},
		{"user", "passwd", "bob", "--new-password", ""},
	} {
		stderr := c.fails(2, args...)
		if !strings.Contains(stderr, "password may not be empty") {
			t.Errorf("malachi %s: stderr %q", strings.Join(args, " "), stderr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 0 {
		t.Fatalf("requests sent for an empty password: %v", sent)
	}
}

// TestContextCredentialsStayWithTheirServer: a saved context's password
// goes only to the context's server. Pointing the CLI elsewhere with
// --server or MALACHI_SERVER withholds it unless credentials are given
// explicitly or --use-context-credentials says to send them.
func TestContextCredentialsStayWithTheirServer(t *testing.T) {
	t.Parallel()
	home := newCLI(t, "")
	other := startFakeNode(t, nil, statusOK)
	const secret = "ctx-s3cret"
	home.ok("context", "save", "prod", "--server", "127.0.0.1:1", "--user", "ops", "--password", secret)

	stderr := home.fails(2, "status", "--server", other.addr())
	for _, want := range []string{"context prod", "127.0.0.1:1", "--use-context-credentials"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal lacks %q: %q", want, stderr)
		}
	}
	envCLI := *home
	envCLI.env = append(append([]string(nil), home.env...), "MALACHI_SERVER="+other.addr())
	envCLI.fails(2, "status")
	for _, a := range other.authsSeen() {
		if a.password == secret {
			t.Fatalf("the context's password reached another server: %+v", a)
		}
	}
	if n := len(other.authsSeen()); n != 0 {
		t.Fatalf("%d authentications reached the other server, want none", n)
	}

	home.ok("status", "--server", other.addr(), "--use-context-credentials")
	home.ok("status", "--server", other.addr(), "--user", "me", "--password", "mine")
	envCLI.ok("status", "--password", "mine")
	got := other.authsSeen()
	want := []fakeAuth{{user: "ops", password: secret}, {user: "me", password: "mine"}, {user: "ops", password: "mine"}}
	if len(got) != len(want) {
		t.Fatalf("authentications %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].user != want[i].user || got[i].password != want[i].password {
			t.Errorf("authentication %d: %s/%s, want %s/%s", i, got[i].user, got[i].password, want[i].user, want[i].password)
		}
	}

	// Saving a context for another server does not copy the password.
	stderr = home.run(strings.NewReader(""), "context", "save", "copy", "--server", other.addr()).stderr
	if !strings.Contains(stderr, "password") {
		t.Errorf("context save for another server says nothing: %q", stderr)
	}
	b, err := os.ReadFile(filepath.Join(home.configDir(), "malachi", "contexts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cf contextFile
	if err := json.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	if cp := cf.Contexts["copy"]; cp == nil || cp.Password == secret {
		t.Fatalf("context copy: %+v", cp)
	}
}

// TestContextCredentialsSameServer: the context's own server gets its
// password, even when named again with --server.
func TestContextCredentialsSameServer(t *testing.T) {
	t.Parallel()
	f := startFakeNode(t, nil, statusOK)
	c := newCLI(t, "")
	c.ok("context", "save", "here", "--server", f.addr(), "--user", "ops", "--password", "pw")
	c.ok("status")
	c.ok("status", "--server", f.addr())
	for _, a := range f.authsSeen() {
		if a.user != "ops" || a.password != "pw" {
			t.Fatalf("authentication %+v, want ops/pw", a)
		}
	}
}

func TestSafeText(t *testing.T) {
	cases := map[string]string{
		"orders":             "orders",
		`DOMAIN\user`:        `DOMAIN\user`,
		"héllo wörld ✓":      "héllo wörld ✓",
		"a\tb\nc\rd":         `a\tb\nc\rd`,
		"\x1b]0;title\a":     `\x1b]0;title\x07`,
		"\x00\x7f":           `\x00\x7f`,
		"csi\u009b1m":        `csi\u009b1m`,
		"rtl\u202eevil":      `rtl\u202eevil`,
		"line\u2028sep":      `line\u2028sep`,
		"bad\xffutf8\xc3":    `bad\xffutf8\xc3`,
		"\u200b zero width ": "\u200b zero width ", // invisible but inert
	}
	for in, want := range cases {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
		if bad := rawControl(safeText(in)); bad != "" {
			t.Errorf("safeText(%q) still carries %s", in, bad)
		}
	}
}

// TestSafeJSON: the escaped document decodes to the same values.
func TestSafeJSON(t *testing.T) {
	in := map[string]string{"name": "a\x7fb\u0085c\u202ed\ne"}
	doc, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := safeJSON(doc)
	if bad := rawControl(string(out)); bad != "" {
		t.Fatalf("%s carries %s", out, bad)
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["name"] != in["name"] {
		t.Fatalf("decoded %q, %v; want %q", back["name"], err, in["name"])
	}
	if clean := []byte(`{"a":"plain ✓"}`); &safeJSON(clean)[0] != &clean[0] {
		t.Error("a clean document was copied")
	}
}
