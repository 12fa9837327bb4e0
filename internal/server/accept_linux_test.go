//go:build linux

package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

const fdChildEnv = "MALACHI_TEST_FD_CHILD"

// TestAcceptSurvivesDescriptorExhaustion runs a node in a child process
// with a low RLIMIT_NOFILE, fills its descriptor table, and connects:
// accept fails with EMFILE while the table is full. Once the child frees
// its descriptors the waiting connection is accepted and served, by the
// same process — the accept loop did not end.
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	if os.Getenv(fdChildEnv) != "" {
		fdChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptSurvivesDescriptorExhaustion$", "-test.v")
	cmd.Env = append(os.Environ(), fdChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})

	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// expect waits for the child to print a line starting with prefix
	// and returns the rest of it.
	expect := func(prefix string) string {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("child ended before %q; stderr:\n%s", prefix, stderr.String())
				}
				if rest, ok := strings.CutPrefix(line, prefix); ok {
					return strings.TrimSpace(rest)
				}
			case <-deadline:
				t.Fatalf("no %q from the child; stderr:\n%s", prefix, stderr.String())
			}
		}
	}

	addr := expect("addr ")
	expect("exhausted")
	// The kernel completes the handshake and queues the connection; the
	// node's accept of it fails until descriptors are free again.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &client{t: t, nc: nc, br: bufio.NewReader(nc)}
	user, pass := "admin", "admin123"
	c.request(1, &wire.AuthRequest{User: &user, Password: &pass})
	if n := expect("accept-errors "); n == "0" {
		t.Fatal("the child saw no accept error")
	}
	expect("freed")
	c.answer(1)
	c.request(2, &wire.StatusRequest{})
	c.answer(2)
}

// fdChild is the child's side: a node whose descriptors run out and come
// back, reporting each step on stdout.
func fdChild(t *testing.T) {
	s := serveOn(t, Config{}, loopbackListener(t))
	fmt.Printf("addr %s\n", s.Addr())

	lim := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var held []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, fd)
	}
	fmt.Println("exhausted")

	// The accept loop counts its errors but signals nothing, so the child
	// polls the counter, on a ticker, until the first one or a deadline.
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.Stats().AcceptErrors == 0 {
		select {
		case <-deadline:
			t.Fatal("the accept loop never failed with its descriptors gone")
		case <-tick.C:
		}
	}
	fmt.Printf("accept-errors %d\n", s.Stats().AcceptErrors)
	for _, fd := range held {
		syscall.Close(fd)
	}
	fmt.Println("freed")
	io.Copy(io.Discard, os.Stdin) // serve until the parent is done
}
