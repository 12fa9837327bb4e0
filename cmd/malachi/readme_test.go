package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// tourLines returns the command lines of the README's five-minute tour:
// the second sh block of that section, comments stripped.
func tourLines(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## A five-minute tour")
	if !ok {
		t.Fatal("README has no five-minute tour")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, 2)
	if len(blocks) < 2 {
		t.Fatal("the tour lacks its second sh block")
	}
	comment := regexp.MustCompile(`\s+#.*$`)
	var out []string
	for _, l := range lines(blocks[1][1]) {
		if l = strings.TrimSpace(comment.ReplaceAllString(l, "")); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// startServe runs `malachi serve --dev` as a child, as the tour does, and
// returns its client address once it printed "ready".
func startServe(t *testing.T, c *cli) string {
	t.Helper()
	addr, _ := startServeWith(t, c)
	return addr
}

// startServeWith is startServe with extra serve flags; it also returns
// the process, for signals.
func startServeWith(t *testing.T, c *cli, extra ...string) (string, *os.Process) {
	t.Helper()
	args := append([]string{"serve", "--dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(c.bin, args...)
	cmd.Env = c.env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	})
	sc := bufio.NewScanner(stderr)
	addr := ""
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "  client protocol  "); ok {
			addr = a
		}
		if sc.Text() == "ready" {
			break
		}
	}
	if addr == "" {
		t.Fatalf("serve printed no client address: %v", sc.Err())
	}
	go func() { // keep draining the log so the node never blocks on it
		for sc.Scan() {
		}
	}()
	return addr, cmd.Process
}

// TestReadmeTour runs the README's tour, line by line as written, against
// a fresh `malachi serve --dev`.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	tour := tourLines(t)
	if len(tour) < 8 {
		t.Fatalf("tour has only %d lines: %q", len(tour), tour)
	}
	c := newCLI(t, "")
	dir := t.TempDir()
	if err := os.Symlink(c.bin, filepath.Join(dir, "malachi")); err != nil {
		t.Fatal(err)
	}
	c.env = append(c.env, "MALACHI_SERVER="+startServe(t, c))

	var follower *child
	outputs := map[string]string{}
	for _, line := range tour {
		if bg, ok := strings.CutSuffix(line, "&"); ok {
			cmd := exec.Command("sh", "-c", "exec "+strings.TrimSpace(bg))
			cmd.Dir = dir
			follower = c.startCmd(cmd)
			continue
		}
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		cmd.Env = c.env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, stderrOf(err))
		}
		outputs[line] = string(out)
	}

	// The tour's consume shows the keys it just produced with --kv.
	want := []string{"user-1\tcreated", "user-2\tcreated", "user-1\tpaid"}
	if got := lines(outputs["./malachi consume orders --from start --print-keys"]); !sameMultiset(got, want) {
		t.Errorf("the tour's consume printed %q, want %q", got, want)
	}
	if follower == nil {
		t.Fatal("the tour has no background follower")
	}
	follower.expect(`{"id":"user-3","event":"created"}`)
	// `kill %1`, as the tour says: a background job gets no Ctrl-C.
	code, _ := follower.signal(syscall.SIGTERM)
	if code != 0 {
		t.Fatalf("follower exit %d after SIGTERM; stderr %q", code, follower.stderr.String())
	}
	cursorIn(t, follower.stderr.String())
}

// TestReadmeTourHints: the tour's comments must describe what works.
func TestReadmeTourHints(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines(string(readme)) {
		cmd, comment, _ := strings.Cut(l, "#")
		if strings.HasSuffix(strings.TrimSpace(cmd), "&") && strings.Contains(comment, "Ctrl-C") {
			t.Errorf("a background job gets no Ctrl-C, yet the tour says so: %q", l)
		}
	}
}

// TestReadmeGoSnippetCompiles vets the tour's Go code as pasted, in a
// module of its own that uses this repository's client.
func TestReadmeGoSnippetCompiles(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "## A five-minute tour")
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("the tour has no Go snippet")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module tour\n\ngo 1.26\n\nrequire github.com/malachi-log/malachi v0.0.0\n\n" +
		"replace github.com/malachi-log/malachi => " + repo + "\n"
	for name, body := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(m[1])} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// -mod=mod lets go complete go.mod from the repository's own
	// requirements; the module cache already holds them.
	cmd := exec.Command(goTool(), "vet", "-mod=mod", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go snippet does not vet: %v\n%s", err, out)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func sameMultiset(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
