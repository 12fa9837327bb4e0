package main

// Tests of the command line a Kafka or NATS user reaches for on day one:
// login flags that always mean the login, honest ACL notes, strict
// --format, hints that point the right way, and consistent edge cases.

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestUserAddLoginFlagsMeanTheLogin: the global --password is the
// caller's login, never the new user's password.
func TestUserAddLoginFlagsMeanTheLogin(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)

	// Without a new password and without a terminal there is nothing to
	// create the user with: a usage error, not the login password.
	errOut := c.fails(2, "--password", "admin123", "user", "add", "x3", "--perms", "consume")
	if !strings.Contains(errOut, "--new-password") {
		t.Errorf("stderr does not name --new-password: %q", errOut)
	}
	c.ok("--password", "admin123", "user", "add", "x3", "--perms", "consume", "--new-password", "x3-pw")
	n.Client(t, "x3", "x3-pw") // fails the test if the login is refused

	// A wrong login stays wrong, whatever the new user's password is.
	errOut = c.fails(1, "--password", "WRONG", "user", "add", "x2", "--perms", "consume", "--new-password", "x2-pw")
	if !strings.Contains(errOut, "invalid_credentials") {
		t.Errorf("wrong login: %q", errOut)
	}

	// From standard input, the first line without its newline.
	c.okIn("x4-pw\n", "user", "add", "x4", "--perms", "produce", "--new-password-stdin")
	n.Client(t, "x4", "x4-pw")
	c.okIn("x4-new\n", "user", "passwd", "x4", "--new-password-stdin")
	n.Client(t, "x4", "x4-new")
	c.ok("user", "passwd", "x4", "--new-password", "x4-newer")
	n.Client(t, "x4", "x4-newer")

	// No --perms: a usage error that says what to pass.
	errOut = c.fails(2, "user", "add", "x5", "--new-password", "x5-pw")
	if !strings.Contains(errOut, "--perms") {
		t.Errorf("user add without --perms: %q", errOut)
	}
	if help := c.ok("user", "add", "--help"); strings.Contains(help, "unless narrowed by ACLs") {
		t.Errorf("user add --help still claims ACLs narrow permissions by default:\n%s", help)
	}
}

// TestACLModeIsExplained: a grant in the default mode changes nothing a
// user can observe, so the command says so and the help explains the mode.
func TestACLModeIsExplained(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("user", "add", "bob", "--perms", "consume", "--new-password", "bob-pw")
	r := c.run(strings.NewReader(""), "acl", "grant", "bob", "consume", "orders")
	if r.code != 0 || !strings.Contains(r.stderr, "--acl-strict") {
		t.Errorf("acl grant: exit %d, stderr %q: want a note about --acl-strict", r.code, r.stderr)
	}
	for _, args := range [][]string{{"acl", "--help"}, {"serve", "--help"}} {
		if help := c.ok(args...); !strings.Contains(help, "strict") || !strings.Contains(help, "every topic") {
			t.Errorf("%s does not explain the ACL mode:\n%s", strings.Join(args, " "), help)
		}
	}
}

// TestConsumeFormatIsStrict: a bare word that is no format is a usage
// error, and a bad template says so without Go type names.
func TestConsumeFormatIsStrict(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "t")
	produceDirect(t, adminClient(t, n), "t", "k", "v")
	errOut := c.fails(2, "consume", "t", "--format", "jsno")
	if !strings.Contains(errOut, "json") {
		t.Errorf("--format jsno: %q", errOut)
	}
	errOut = c.fails(2, "consume", "t", "--format", "{{.Value.Nope}}")
	for _, leak := range []string{"main.", "templateRecord", "client."} {
		if strings.Contains(errOut, leak) {
			t.Errorf("template error leaks %q: %q", leak, errOut)
		}
	}
	if help := c.ok("consume", "--help"); !strings.Contains(help, ".Headers") || !strings.Contains(help, ".Cursor") {
		t.Errorf("consume --help does not list the template fields:\n%s", help)
	}
	if out := c.ok("consume", "t", "--format", `{{.Key}}={{.Value}}`); out != "k=v\n" {
		t.Errorf("template output %q", out)
	}
}

// TestHintsPointTheRightWay: each refusal suggests something that helps.
func TestHintsPointTheRightWay(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	addr, httpAddr := startServeHTTP(t, c)
	c.env = append(c.env, "MALACHI_SERVER="+addr)

	errOut := c.fails(1, "--user", "producer", "--password", "producer123", "user", "list")
	if strings.Contains(errOut, "acl grant") || !strings.Contains(errOut, "admin") {
		t.Errorf("admin-only refusal: %q", errOut)
	}
	errOut = c.fails(1, "topic", "delete", "missing", "--yes")
	if strings.Contains(errOut, "topic create") {
		t.Errorf("deleting a missing topic: %q", errOut)
	}
	errOut = c.fails(1, "consume", "orders.*")
	if strings.Contains(errOut, "topic create") || !strings.Contains(errOut, "not a topic name") {
		t.Errorf("consume of a pattern: %q", errOut)
	}
	errOut = c.fails(1, "--server", httpAddr, "topic", "list")
	if strings.Contains(errOut, "may have taken effect") || !strings.Contains(errOut, "HTTP") {
		t.Errorf("talking to the HTTP port: %q", errOut)
	}
}

// TestEdgeCasesAreConsistent covers the small traps of issue 17.
func TestEdgeCasesAreConsistent(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)

	c.fails(2, "topic", "create", "zero", "--ranges", "0")
	c.ok("topic", "create", "one")
	var split struct {
		Range    uint64   `json:"range"`
		Children []uint64 `json:"children"`
	}
	if err := json.Unmarshal([]byte(c.ok("topic", "split", "one", "-o", "json")), &split); err != nil {
		t.Fatal(err)
	}
	d, err := adminClient(t, n).DescribeTopic(t.Context(), "one")
	if err != nil {
		t.Fatal(err)
	}
	var sealed uint64
	for _, r := range d.Ranges {
		if !r.Active {
			sealed = r.ID
		}
	}
	if split.Range == 0 || split.Range != sealed || len(split.Children) != 2 {
		t.Errorf("split -o json: %+v, the sealed range is %d", split, sealed)
	}

	if errOut := c.fails(1, "acl", "list", "nobody"); !strings.Contains(errOut, "user_not_found") {
		t.Errorf("acl list nobody: %q", errOut)
	}
	c.fails(1, "acl", "grant", "nobody", "consume", "orders")
}

// TestBenchUsesTheSavedContext: bench connects like every other command.
func TestBenchUsesTheSavedContext(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("context", "save", "local", "--server", n.Addr(), "--user", "admin", "--password", "admin123")
	local := c.without("MALACHI_SERVER")
	out := local.ok("bench", "produce", "--topic", "b", "--records", "20", "--json")
	var res struct{ Records int64 }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Records != 20 {
		t.Fatalf("bench through the context: %v %q", err, out)
	}
	// The global login flags apply too: a wrong password is refused.
	local.fails(1, "--password", "WRONG", "bench", "produce", "--topic", "b", "--records", "1", "--json")
}

// TestServeEnvUnits: sizes and durations in the environment take units,
// and a value that cannot be read stops serve with the variable's name.
func TestServeEnvUnits(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	bad := *c
	bad.env = append(append([]string(nil), c.env...), "MALACHI_SEGMENT_MAX_BYTES=lots")
	// Bounded: before the variable was checked, serve started and ran on.
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "serve", "--dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	cmd.Env = bad.env
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "MALACHI_SEGMENT_MAX_BYTES") {
		t.Fatalf("serve with MALACHI_SEGMENT_MAX_BYTES=lots: %v\n%s", err, out)
	}

	small := *c
	small.env = append(append([]string(nil), c.env...), "MALACHI_MAX_FRAME_SIZE=64KiB", "MALACHI_SHUTDOWN_GRACE_MS=2s")
	addr, _ := startServeWith(t, &small)
	p := newCLI(t, addr)
	p.ok("topic", "create", "t")
	big := strings.Repeat("x", 100<<10) + "\n"
	if r := p.run(strings.NewReader(big), "produce", "t"); r.code == 0 {
		t.Errorf("a 100 KiB record passed a 64KiB frame limit: %s", r.stderr)
	}
}

// TestVersionAndCompletion: version output and shell completion of names.
func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	c, n := withNode(t)
	c.ok("topic", "create", "orders")
	produceDirect(t, adminClient(t, n), "orders", "k", "v")
	c.ok("consume", "orders", "--group", "billing", "--commit")
	c.ok("context", "save", "local", "--server", n.Addr())

	out := c.ok("version")
	if !strings.Contains(out, "Client  malachi ") || !strings.Contains(out, "Node    0") {
		t.Errorf("version: %q", out)
	}
	if out := c.ok("--version"); !strings.Contains(out, "malachi") {
		t.Errorf("--version: %q", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "consume", "or"}, "orders"},
		{[]string{"__complete", "topic", "describe", ""}, "orders"},
		{[]string{"__complete", "group", "describe", "orders", ""}, "billing"},
		{[]string{"__complete", "context", "use", ""}, "local"},
	} {
		if out := c.ok(tc.args...); !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q lacks %q", strings.Join(tc.args, " "), out, tc.want)
		}
	}
}

// TestPrintKeysAndHeaders: kcat-style keys and headers in text output.
func TestPrintKeysAndHeaders(t *testing.T) {
	t.Parallel()
	c, _ := withNode(t)
	c.ok("topic", "create", "t")
	c.okIn("user-1\tcreated\n", "produce", "t", "--kv", "--header", "src=cli")
	if out := c.ok("consume", "t", "--print-keys"); out != "user-1\tcreated\n" {
		t.Errorf("--print-keys: %q", out)
	}
	if out := c.ok("consume", "t", "--print-keys", "--print-headers"); out != "user-1\tsrc=cli\tcreated\n" {
		t.Errorf("--print-keys --print-headers: %q", out)
	}
}
