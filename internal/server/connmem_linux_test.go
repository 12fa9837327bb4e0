//go:build linux

package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// The connection-cost measurement: a node in a child process (so the
// clients' sockets and goroutines are not counted) and N idle
// authenticated connections to it from this process. It is a measurement,
// not a check, so it runs only when asked:
//
//	MALACHI_CONNMEM_N=10000 go test ./internal/server -run '^TestConnMemory$' -v -timeout 30m
//
// MALACHI_CONNMEM_LOGIN=resume logs in once with a password and resumes
// the login session on every other connection (session_auth, key 84);
// MALACHI_CONNMEM_WAITERS=1000 then long-polls on that many of the
// connections and reports how fast one produce wakes them.
const (
	connMemEnv     = "MALACHI_CONNMEM_N"
	connMemNodeEnv = "MALACHI_CONNMEM_NODE"
)

func TestConnMemory(t *testing.T) {
	if os.Getenv(connMemNodeEnv) != "" {
		connMemNode(t)
		return
	}
	n, _ := strconv.Atoi(os.Getenv(connMemEnv))
	if n <= 0 {
		t.Skip("a measurement; set " + connMemEnv + "=N to run it")
	}
	node := startConnMemNode(t, n)
	base := node.stats(t)
	conns := openIdle(t, node.addr, n, os.Getenv("MALACHI_CONNMEM_LOGIN"))
	idle := node.stats(t)
	t.Logf("%d idle authenticated connections: RSS %+d KiB (%.1f KiB each), heap %+d KiB (%.1f KiB each), stacks %+d KiB, goroutines %+d",
		n, idle.rss-base.rss, float64(idle.rss-base.rss)/float64(n),
		(idle.heap-base.heap)>>10, float64(idle.heap-base.heap)/1024/float64(n),
		(idle.stack-base.stack)>>10, idle.goroutines-base.goroutines)
	if w, _ := strconv.Atoi(os.Getenv("MALACHI_CONNMEM_WAITERS")); w > 0 {
		longPollWake(t, conns[:min(w, len(conns)-1)], conns[len(conns)-1])
	}
}

type memStats struct {
	rss, heap, stack int64 // RSS in KiB; heap and stacks in bytes
	goroutines       int
}

type connMemChild struct {
	addr string
	in   io.Writer
	out  *bufio.Scanner
}

func startConnMemNode(t *testing.T, n int) *connMemChild {
	cmd := exec.Command(os.Args[0], "-test.run=^TestConnMemory$")
	cmd.Env = append(os.Environ(), connMemNodeEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	c := &connMemChild{in: stdin, out: bufio.NewScanner(stdout)}
	c.addr = c.line(t, "ADDR ")
	return c
}

// line returns the rest of the child's next line that starts with prefix.
func (c *connMemChild) line(t *testing.T, prefix string) string {
	for c.out.Scan() {
		if s, ok := strings.CutPrefix(c.out.Text(), prefix); ok {
			return s
		}
	}
	t.Fatalf("the node ended before printing %q: %v", prefix, c.out.Err())
	return ""
}

func (c *connMemChild) stats(t *testing.T) memStats {
	fmt.Fprintln(c.in, "stats")
	var s memStats
	if _, err := fmt.Sscan(c.line(t, "STATS "), &s.rss, &s.heap, &s.stack, &s.goroutines); err != nil {
		t.Fatal(err)
	}
	return s
}

// connMemNode is the child: a node with room for n clients from one
// address, answering "stats" on stdin until stdin closes.
func connMemNode(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(connMemNodeEnv))
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	b, err := broker.Open(ctx, broker.Config{DataDir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.SeedUsers(ctx, true, ""); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Addr: "127.0.0.1:0", MaxConns: n + 64, MaxConnsPerIP: n + 64, MaxPreAuthConns: n + 64,
		IdleTimeout: time.Hour, AuthTimeout: time.Hour, Logger: quiet}, b)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Shutdown(ctx)
	fmt.Printf("ADDR %s\n", s.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("STATS %d %d %d %d\n", vmRSS(t), ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine())
	}
}

func vmRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib
		}
	}
	return 0
}

// openIdle opens n connections logged in as app, a few at a time.
func openIdle(t *testing.T, addr string, n int, mode string) []*rawClient {
	conns := make([]*rawClient, n)
	first := dialAt(t, addr)
	token := string(first.loginPayload(t))
	conns[0] = first
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 1; i < n; i++ {
		next <- i
	}
	close(next)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				c := dialAt(t, addr)
				for mode != "resume" && !c.tryLogin(t) { // the login queue was full: again
					c.nc.Close()
					c = dialAt(t, addr)
				}
				if mode == "resume" {
					c.resume(t, token)
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d logins (%s) in %v", n, cmp(mode, "password"), time.Since(start).Round(time.Millisecond))
	return conns
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func dialAt(t *testing.T, addr string) *rawClient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		runtime.Goexit()
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReaderSize(nc, 512)}
}

// loginPayload logs in as app and returns the login token.
func (c *rawClient) loginPayload(t *testing.T) []byte {
	user, pass := "app", "app123"
	var tok wire.TokenResponse
	if err := tok.Decode(c.ok(1, &wire.AuthRequest{User: &user, Password: &pass})); err != nil {
		t.Error(err)
		runtime.Goexit()
	}
	return []byte(tok.Token)
}

// tryLogin logs in as app; false if the node was too busy to check the
// password (rate_limit_exceeded).
func (c *rawClient) tryLogin(t *testing.T) bool {
	user, pass := "app", "app123"
	c.send(1, &wire.AuthRequest{User: &user, Password: &pass})
	_, _, reason, err := c.recv()
	if err != nil || (reason != "" && reason != wire.ReasonRateLimitExceeded) {
		t.Errorf("login: %q %v", reason, err)
		runtime.Goexit()
	}
	return reason == ""
}

// longPollWake parks a fetch on each waiter, produces one record on
// producer and reports how long each waiter took to get it.
func longPollWake(t *testing.T, waiters []*rawClient, producer *rawClient) {
	producer.ok(2, &wire.CreateTopicRequest{Topic: str("wake"), Bits: 8})
	topic := "wake"
	for _, w := range waiters {
		w.send(3, &wire.FetchRequest{Topic: &topic, Max: 10, WaitMs: 30000})
		// An answered request behind the fetch: the fetch was read
		// and handed to its goroutine.
		w.ok(4, &wire.ListTopicsRequest{})
	}
	at := make([]time.Time, len(waiters))
	var wg sync.WaitGroup
	for i, w := range waiters {
		wg.Go(func() {
			if _, _, reason, err := w.recv(); err != nil || reason != "" {
				t.Errorf("waiter %d: %q %v", i, reason, err)
			}
			at[i] = time.Now()
		})
	}
	start := time.Now()
	producer.ok(5, produceReq(topic, "wake up"))
	wg.Wait()
	got := make([]time.Duration, len(at))
	for i, a := range at {
		got[i] = a.Sub(start)
	}
	slices.Sort(got)
	q := func(p float64) time.Duration { return got[int(p*float64(len(got)-1))].Round(10 * time.Microsecond) }
	t.Logf("long-poll wake of %d waiters: p50 %v, p99 %v, max %v", len(got), q(0.5), q(0.99), got[len(got)-1])
}
