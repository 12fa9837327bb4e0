//go:build linux

package testenv

import (
	"bufio"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FUSEMirror is a bindfs mount of a temporary directory, run in the
// foreground with debug output: one log line per FUSE request, which is
// how a test sees what the kernel asked the server (an FSYNC, or none).
type FUSEMirror struct {
	// Dir is the mount point.
	Dir string

	mu  sync.Mutex
	log strings.Builder
}

// MountFUSEMirror mounts a FUSE mirror (bindfs, installed by Program when
// missing) and unmounts it at cleanup; it skips the test where FUSE cannot
// be mounted.
func MountFUSEMirror(t testing.TB) *FUSEMirror {
	t.Helper()
	bindfs := Program(t, "bindfs", "bindfs")
	src, mnt := t.TempDir(), t.TempDir()
	cmd := exec.Command(bindfs, "-f", "-d", src, mnt)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("bindfs: %v", err)
	}
	m := &FUSEMirror{Dir: mnt}
	done := make(chan struct{})
	go func() { // owned by bindfs: ends when it closes stderr
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			m.mu.Lock()
			m.log.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = exec.Command("fusermount", "-u", mnt).Run()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = cmd.Wait()
	})
	var a, b unix.Stat_t
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for unix.Stat(src, &a) != nil || unix.Stat(mnt, &b) != nil || a.Dev == b.Dev {
		select {
		case <-tick.C:
		case <-deadline:
			t.Skip("bindfs did not mount (no FUSE here?)")
		}
	}
	return m
}

// Log is the server's debug output so far.
func (m *FUSEMirror) Log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

// WaitFor waits until the server has logged s (it logs each request
// before answering it), failing the test after 30 s.
func (m *FUSEMirror) WaitFor(t testing.TB, s string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(m.Log(), s) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("bindfs never logged %q", s)
		}
	}
}
