package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestServeGeneratesAdminPasswordOnce starts a real node without --dev:
// it creates admin with a generated password, prints it once, and a
// restart on the same data prints nothing new; the printed password works.
func TestServeGeneratesAdminPasswordOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(env ...string) (cmd *exec.Cmd, addr, password string) {
		cmd = exec.Command(bin, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
		cmd.Env = append(cmd.Environ(), env...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait() })
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == "client":
				addr = f[2]
			case len(f) >= 3 && f[0] == "admin" && f[1] == "password":
				password = f[2]
			case sc.Text() == "ready":
				go func() {
					for sc.Scan() {
					}
				}()
				return cmd, addr, password
			}
		}
		t.Fatal("serve ended before it was ready")
		return nil, "", ""
	}
	first, addr, password := run()
	if len(password) < 20 {
		t.Fatalf("no generated admin password printed (got %q)", password)
	}
	c := dial(t, addr)
	c.auth("admin", password)
	c.nc.Close()
	first.Process.Signal(syscall.SIGTERM)
	first.Wait()
	// A restart keeps the password and prints none.
	_, addr2, again := run()
	if again != "" {
		t.Fatalf("restart printed a new password %q", again)
	}
	d := dial(t, addr2)
	d.auth("admin", password)
}
