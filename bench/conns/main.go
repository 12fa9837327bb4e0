// Command conns is the client side of bench/conns.sh: it opens thousands
// of connections to a Malachi node or a NATS server that the script
// started, and measures what they cost the server (RSS from
// /proc/PID/status), how fast one message wakes every waiter, and how
// fast Go clients are served again after the script restarts the node.
//
//	conns idle -system malachi|nats -addr HOST:PORT -pid PID [-counts 1000,10000] [-wake] [-tls-ca FILE]
//	conns jwks -dir DIR
//	conns restart -addr HOST:PORT -n 10000 -jwt-key DIR/jwt.key [-password-n 1000]
//
// Results go to stdout as tab-separated lines, "result NAME VALUE", for
// the script to tabulate; progress goes to stderr. restart also prints
// "ready" once its clients are connected and waits for "go UNIX_NS" (the
// moment the node was started again) on stdin.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "idle":
		err = runIdle(ctx, os.Args[2:])
	case "restart":
		err = runRestart(ctx, os.Args[2:])
	case "jwks":
		err = runJWKS(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conns:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: conns idle|jwks|restart [flags] (see bench/conns.sh)")
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s conns: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// result prints one measurement for the script.
func result(name string, value any) {
	fmt.Printf("result\t%s\t%v\n", name, value)
}

// raiseFDLimit lifts the soft open-file limit to the hard one when n
// connections (plus room for the rest) would not fit under it.
func raiseFDLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	need := uint64(n) + 256
	if lim.Cur >= need {
		return nil
	}
	if lim.Max < need {
		return fmt.Errorf("%d connections need %d open files; the hard limit is %d (raise it with ulimit -Hn)", n, need, lim.Max)
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// rssKiB reads VmRSS of process pid.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// procCPU reads the CPU time (user and system) process pid has used,
// to the kernel's clock tick (10 ms where CLK_TCK is 100, as on Linux
// builds in practice).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which may hold spaces, start
	// with the state (field 3); utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected layout", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected layout", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// settledRSS waits d for the server to go quiet after a burst of
// connections, then reads its RSS.
func settledRSS(ctx context.Context, pid int, d time.Duration) (int64, error) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	return rssKiB(pid)
}

// tlsConfig trusts the CA in caFile for the host of addr; nil for plain
// TCP.
func tlsConfig(caFile, addr string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// parseCounts reads "1000,10000": ascending connection counts.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-counts %q: want ascending positive numbers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}
