// Package testenv finds the external programs some tests drive (a real
// Prometheus server, a headless Chromium) and installs them from the
// system's Debian packages when the test runs as root on a machine that
// lacks them, so a clean clone's test command needs no manual setup.
// Where they can be neither found nor installed, the test is skipped with
// a message saying what is missing and how to add it.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	mu      sync.Mutex
	tried   = map[string]error{}
	lockDir = os.TempDir()
)

// Program returns the path of the first of names found on PATH, installing
// the Debian package pkg first when none is. It skips t when the program
// is still missing.
func Program(t testing.TB, pkg string, names ...string) string {
	t.Helper()
	if p := lookPath(names); p != "" {
		return p
	}
	if err := install(pkg); err != nil {
		t.Skipf("%s is not installed and could not be installed (%v): install the Debian package %q to run this test", names[0], err, pkg)
	}
	if p := lookPath(names); p != "" {
		return p
	}
	t.Skipf("the Debian package %q was installed but none of %v is on PATH", pkg, names)
	return ""
}

func lookPath(names []string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// install runs apt-get once per package per process, under a file lock so
// that test binaries of several packages running at once do not fight
// over dpkg's own lock.
func install(pkg string) error {
	mu.Lock()
	defer mu.Unlock()
	if err, ok := tried[pkg]; ok {
		return err
	}
	err := installLocked(pkg)
	tried[pkg] = err
	return err
}

func installLocked(pkg string) error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	aptGet, err := exec.LookPath("apt-get")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(lockDir, "malachi-testenv-apt.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if aptInstall(ctx, aptGet, pkg) == nil {
		return nil
	}
	// The package lists may be missing or stale on a fresh machine.
	if out, err := apt(ctx, aptGet, "update"); err != nil {
		return &installError{pkg: pkg, err: err, out: tail(out)}
	}
	return aptInstall(ctx, aptGet, pkg)
}

func aptInstall(ctx context.Context, aptGet, pkg string) error {
	if out, err := apt(ctx, aptGet, "install", "-y", "--no-install-recommends", pkg); err != nil {
		return &installError{pkg: pkg, err: err, out: tail(out)}
	}
	return nil
}

func apt(ctx context.Context, aptGet string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, aptGet, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return cmd.CombinedOutput()
}

type installError struct {
	pkg string
	err error
	out string
}

func (e *installError) Error() string {
	return "apt-get install " + e.pkg + ": " + e.err.Error() + ": " + e.out
}

type constError string

func (e constError) Error() string { return string(e) }

const errNotRoot = constError("not running as root")

func tail(b []byte) string {
	const n = 400
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
