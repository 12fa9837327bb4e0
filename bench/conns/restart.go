package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// runRestart connects Go clients (pkg/client, each with its own
// connection): -password-n logging in by password, all at once and paced
// by the node's refusals (WithDialRetry), and -n logging in with a JWT
// (see jwt.go). It then says "ready" and, once told "go UNIX_NS" (the
// node was started again at that moment, on the same data folder), has
// every client make one call that must succeed, and reports how long
// after the restart each group's last client was served. The clients
// redial on their own, with session_auth, resuming their login sessions.
func runRestart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("restart", flag.ContinueOnError)
	addr := fs.String("addr", "", "the node's client address")
	n := fs.Int("n", 10000, "Go clients whose first login is by JWT")
	jwtKey := fs.String("jwt-key", "", "the key `conns jwks` wrote (needed when -n > 0)")
	passwordN := fs.Int("password-n", 500, "Go clients whose first login is by password")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long the clients may take to be served after the restart")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *addr == "" || *n < 0 || *passwordN < 0 || *n+*passwordN == 0 {
		return errors.New("restart needs -addr and clients (-n, -password-n)")
	}
	if err := raiseFDLimit(*n + *passwordN); err != nil {
		return err
	}
	var groups []group
	defer func() {
		for _, g := range groups {
			for _, c := range g.clients {
				if c != nil {
					c.Close()
				}
			}
		}
	}()
	if *passwordN > 0 {
		g, err := dialGroup(ctx, "password", *addr, *passwordN, client.WithCredentials(benchUser, benchPassword))
		groups = append(groups, g)
		if err != nil {
			return err
		}
	}
	if *n > 0 {
		tok, err := signJWT(*jwtKey)
		if err != nil {
			return err
		}
		g, err := dialGroup(ctx, "token", *addr, *n, client.WithToken(tok))
		groups = append(groups, g)
		if err != nil {
			return err
		}
	}
	fmt.Println("ready")
	restarted, err := awaitGo(ctx)
	if err != nil {
		return err
	}
	return serveAgain(ctx, groups, restarted, *timeout)
}

// group is clients that logged in the same way.
type group struct {
	name    string
	clients []*client.Client
}

// serveAgain has every client make one call that succeeds and reports
// when, after restarted, each group's clients were served.
func serveAgain(ctx context.Context, groups []group, restarted time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var all []*client.Client
	for _, g := range groups {
		all = append(all, g.clients...)
	}
	served := make([]time.Duration, len(all))
	var failed atomic.Int64
	cpu0 := cpuTime()
	err := forEach(ctx, len(all), len(all), func(i int) error {
		for {
			_, err := all[i].Status(ctx)
			if err == nil {
				break
			}
			failed.Add(1)
			if ctx.Err() != nil {
				return fmt.Errorf("client %d: %w", i, err)
			}
		}
		served[i] = time.Since(restarted)
		return nil
	})
	if err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	result("restart_failed_calls", failed.Load())
	result("restart_clients_cpu_s", secs(cpuTime()-cpu0))
	for _, g := range groups {
		d := slices.Clone(served[:len(g.clients)])
		served = served[len(g.clients):]
		slices.Sort(d)
		result("restart_"+g.name+"_clients", len(d))
		result("restart_"+g.name+"_p50_s", secs(quantile(d, 0.5)))
		result("restart_"+g.name+"_last_s", secs(d[len(d)-1]))
	}
	return nil
}

// dialGroup dials n clients at once, each waiting out the node's load
// refusals as WithDialRetry paces it.
func dialGroup(ctx context.Context, name, addr string, n int, login client.Option) (group, error) {
	g := group{name: name, clients: make([]*client.Client, n)}
	start := time.Now()
	var done atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				logf("%s: %d of %d clients logged in", name, done.Load(), n)
			case <-stop:
				return
			}
		}
	}()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	err := forEach(dctx, n, n, func(i int) error {
		c, err := client.Dial(dctx, addr, login, client.WithDialRetry())
		if err != nil {
			return fmt.Errorf("%s client %d: %w", name, i, err)
		}
		g.clients[i] = c
		done.Add(1)
		return nil
	})
	if err != nil {
		return g, err
	}
	took := time.Since(start)
	logf("%s: %d clients logged in in %v", name, n, took.Round(time.Millisecond))
	result("login_"+name+"_clients", n)
	result("login_"+name+"_s", secs(took))
	return g, nil
}

// awaitGo reads "go UNIX_NS" from stdin.
func awaitGo(ctx context.Context) (time.Time, error) {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		ns, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(s, "go ")), 10, 64)
		if !strings.HasPrefix(s, "go ") || err != nil {
			return time.Time{}, fmt.Errorf("want \"go UNIX_NS\" on stdin, got %q", s)
		}
		return time.Unix(0, ns), nil
	case <-ctx.Done():
		return time.Time{}, context.Cause(ctx)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
