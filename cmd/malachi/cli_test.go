package main

// The CLI tests build the real binary once per test run and run it
// against a real node: an in-process clienttest node, or `malachi serve
// --dev` as a child process for the README tour.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// waitFor bounds every wait on a child process: long enough for a loaded
// CI machine, short enough that a hang fails the test instead of the run.
const waitFor = 30 * time.Second

var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds cmd/malachi once per test run, with the race
// detector when the tests have it, so races in the CLI surface too.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "malachi-cli-test-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "malachi")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/malachi-log/malachi/cmd/malachi")
	out, err := exec.Command(goTool(), args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// cli runs the binary against one node with a clean environment: no
// MALACHI_* variables but MALACHI_SERVER, and a config directory of its
// own so that saved contexts never leak between tests or from the user.
type cli struct {
	t   *testing.T
	bin string
	env []string
	dir string // working directory; "" for the test's
}

func newCLI(t *testing.T, addr string) *cli {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MALACHI_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	if addr != "" {
		env = append(env, "MALACHI_SERVER="+addr)
	}
	if raceEnabled {
		// A race-enabled binary sleeps a second at exit by default, to let
		// late reports arrive; hundreds of short runs cannot afford it.
		env = append(env, "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	}
	return &cli{t: t, bin: bin, env: env}
}

// withNode starts an in-process node and a cli pointed at it.
func withNode(t *testing.T, opts ...clienttest.Option) (*cli, *clienttest.Node) {
	t.Helper()
	n := clienttest.Start(t, opts...)
	return newCLI(t, n.Addr()), n
}

// configDir is the user config directory the binary sees.
func (c *cli) configDir() string {
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, "XDG_CONFIG_HOME="); ok {
			return v
		}
	}
	c.t.Fatal("no XDG_CONFIG_HOME in the test environment")
	return ""
}

// without returns a copy of c whose environment lacks the variable.
func (c *cli) without(name string) *cli {
	cp := *c
	cp.env = nil
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, name+"=") {
			cp.env = append(cp.env, kv)
		}
	}
	return &cp
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the binary to completion with stdin.
func (c *cli) run(stdin io.Reader, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.Dir = c.dir
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("malachi %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok runs the binary with no input, requires exit 0 and returns stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	return c.okIn("", args...)
}

// okIn is ok with stdin.
func (c *cli) okIn(stdin string, args ...string) string {
	c.t.Helper()
	r := c.run(strings.NewReader(stdin), args...)
	if r.code != 0 {
		c.t.Fatalf("malachi %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs the binary, requires exit code want and returns stderr.
func (c *cli) fails(want int, args ...string) string {
	c.t.Helper()
	r := c.run(strings.NewReader(""), args...)
	if r.code != want {
		c.t.Fatalf("malachi %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r.stderr
}

// child is a running binary whose stdout is read line by line.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr *lockedBuffer
}

// start starts the binary and streams its stdout lines.
func (c *cli) start(args ...string) *child {
	return c.startCmd(exec.Command(c.bin, args...))
}

func (c *cli) startCmd(cmd *exec.Cmd) *child {
	c.t.Helper()
	cmd.Env = c.env
	ch := &child{t: c.t, cmd: cmd, lines: make(chan string, 1024), stderr: newLockedBuffer()}
	cmd.Stderr = ch.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		defer close(ch.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
	}()
	c.t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return ch
}

// expect reads stdout lines until it has seen each of want, in order,
// and returns every line read meanwhile.
func (ch *child) expect(want ...string) []string {
	ch.t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var got []string
	for len(want) > 0 {
		select {
		case l, ok := <-ch.lines:
			if !ok {
				ch.t.Fatalf("stdout ended before %q; read %q; stderr: %s", want[0], got, ch.stderr.String())
			}
			got = append(got, l)
			if l == want[0] {
				want = want[1:]
			}
		case <-deadline.C:
			ch.t.Fatalf("no %q within %s; read %q; stderr: %s", want[0], waitFor, got, ch.stderr.String())
		}
	}
	return got
}

// interrupt sends SIGINT, waits for the exit and returns the exit code and
// the stdout lines not yet read.
func (ch *child) interrupt() (int, []string) {
	ch.t.Helper()
	return ch.signal(syscall.SIGINT)
}

// signal is interrupt with another signal.
func (ch *child) signal(sig os.Signal) (int, []string) {
	ch.t.Helper()
	if err := ch.cmd.Process.Signal(sig); err != nil {
		ch.t.Fatal(err)
	}
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var rest []string
	for open := true; open; {
		select {
		case l, ok := <-ch.lines: // closed when the process closes stdout
			rest = append(rest, l)
			open = ok
		case <-deadline.C:
			ch.t.Fatalf("no exit within %s of SIGINT; stderr: %s", waitFor, ch.stderr.String())
		}
	}
	rest = rest[:len(rest)-1] // the zero value read from the closed channel
	err := ch.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), rest
	} else if err != nil {
		ch.t.Fatal(err)
	}
	return 0, rest
}

// lockedBuffer is a bytes.Buffer that a child's stderr copier may write
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// grew receives (without blocking; capacity 1) after each write, so a
	// test can wait for output instead of polling for it.
	grew chan struct{}
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{grew: make(chan struct{}, 1)} }

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	b.mu.Unlock()
	select {
	case b.grew <- struct{}{}:
	default:
	}
	return n, err
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cursorIn returns the cursor a consume printed on stderr.
func cursorIn(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if c, ok := strings.CutPrefix(l, "cursor: "); ok {
			return c
		}
	}
	t.Fatalf("no cursor line in stderr: %q", stderr)
	return ""
}

// adminClient dials n as the dev admin, for checks that bypass the CLI.
func adminClient(t *testing.T, n *clienttest.Node) *client.Client {
	return n.Client(t, "admin", "admin123")
}

// produceDirect writes values as records with key through the client.
func produceDirect(t *testing.T, c *client.Client, topic, key string, values ...string) {
	t.Helper()
	recs := make([]client.Record, len(values))
	for i, v := range values {
		recs[i] = client.Record{Key: []byte(key), Value: []byte(v)}
	}
	if _, err := c.Produce(t.Context(), topic, recs...); err != nil {
		t.Fatal(err)
	}
}

// lines splits output into lines, without the final empty one.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
