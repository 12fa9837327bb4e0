package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

type closer interface{ Close() error }

// side is one server's way of opening connections: the control
// connection first, then idle ones.
type side interface {
	openFirst(ctx context.Context) error
	openOne(ctx context.Context) (closer, error)
}

// runIdle measures the server's RSS per idle connection at each count,
// then, with -wake, how fast one message reaches a waiter on every one of
// them.
func runIdle(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	system := fs.String("system", "malachi", "malachi or nats")
	addr := fs.String("addr", "", "the server's client address")
	pid := fs.Int("pid", 0, "the server's process id, for its RSS")
	countsFlag := fs.String("counts", "1000,10000", "connection counts at which to measure, ascending")
	wake := fs.Bool("wake", false, "then time the wake of one waiter per connection")
	caFile := fs.String("tls-ca", "", "connect over TLS, trusting this CA (PEM)")
	settle := fs.Duration("settle", 3*time.Second, "quiet time before each RSS reading")
	workers := fs.Int("workers", 8, "connections opened at once")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	counts, err := parseCounts(*countsFlag)
	if err != nil {
		return err
	}
	if *addr == "" || *pid <= 0 {
		return errors.New("idle needs -addr and -pid")
	}
	if err := raiseFDLimit(counts[len(counts)-1] + 1); err != nil {
		return err
	}
	tcfg, err := tlsConfig(*caFile, *addr)
	if err != nil {
		return err
	}
	var s side
	switch *system {
	case "malachi":
		s = &malachiSide{addr: *addr, tcfg: tcfg}
	case "nats":
		s = &natsSide{addr: *addr, tcfg: tcfg}
	default:
		return fmt.Errorf("-system %q: want malachi or nats", *system)
	}
	if err := s.openFirst(ctx); err != nil {
		return fmt.Errorf("first connection: %w", err)
	}
	base, err := settledRSS(ctx, *pid, *settle)
	if err != nil {
		return err
	}
	result("base_rss_kib", base)
	var conns []closer
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, n := range counts {
		start := time.Now()
		more, err := openMany(ctx, s, n-len(conns), *workers)
		conns = append(conns, more...)
		if err != nil {
			return fmt.Errorf("opening %d connections: %w", n, err)
		}
		logf("%s: %d connections up in %v", *system, n, time.Since(start).Round(time.Millisecond))
		rss, err := settledRSS(ctx, *pid, *settle)
		if err != nil {
			return err
		}
		result(fmt.Sprintf("idle_%d_rss_kib", n), rss-base)
		result(fmt.Sprintf("idle_%d_kib_per_conn", n), fmt.Sprintf("%.1f", float64(rss-base)/float64(n)))
	}
	if !*wake {
		return nil
	}
	return runWake(ctx, s, conns, *pid, base, *settle)
}

func runWake(ctx context.Context, s side, conns []closer, pid int, base int64, settle time.Duration) error {
	var (
		w        wakeTimes
		err      error
		cpuStart time.Duration
	)
	switch s := s.(type) {
	case *malachiSide:
		waiters := make([]*mconn, len(conns))
		for i, c := range conns {
			waiters[i] = c.(*mconn)
		}
		start := time.Now()
		if err := s.park(ctx, waiters); err != nil {
			return fmt.Errorf("parking fetches: %w", err)
		}
		logf("malachi: %d fetches parked in %v", len(waiters), time.Since(start).Round(time.Millisecond))
		// The waits must not run out before the produce: a short settle.
		rss, err := settledRSS(ctx, pid, min(settle, 2*time.Second))
		if err != nil {
			return err
		}
		result("parked_kib_per_conn", fmt.Sprintf("%.1f", float64(rss-base)/float64(len(conns))))
		if cpuStart, err = procCPU(pid); err != nil {
			return err
		}
		if w, err = s.wake(ctx, waiters); err != nil {
			return err
		}
	case *natsSide:
		subs := make([]*nconn, len(conns))
		for i, c := range conns {
			subs[i] = c.(*nconn)
		}
		if cpuStart, err = procCPU(pid); err != nil {
			return err
		}
		if w, err = s.wake(ctx, subs); err != nil {
			return err
		}
	}
	cpuEnd, err := procCPU(pid)
	if err != nil {
		return err
	}
	result("wake_server_cpu_ms", ms(cpuEnd-cpuStart))
	w.report()
	return nil
}

// openMany opens n connections, workers at a time.
func openMany(ctx context.Context, s side, n, workers int) ([]closer, error) {
	out := make([]closer, n)
	err := forEach(ctx, n, workers, func(i int) error {
		c, err := s.openOne(ctx)
		out[i] = c
		return err
	})
	return slices.DeleteFunc(out, func(c closer) bool { return c == nil }), err
}

// forEach runs fn(0) ... fn(n-1) on workers goroutines and returns the
// first error; after one, no new call starts.
func forEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// collect waits for n results on errs and returns the first error.
func collect(ctx context.Context, errs <-chan error, n int) error {
	var first error
	for range n {
		select {
		case err := <-errs:
			if first == nil {
				first = err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return first
}

// wakeTimes are one wake: when the message was sent, when the server
// acknowledged it, and when each waiter had it.
type wakeTimes struct {
	sent, acked time.Time
	at          []time.Time
}

func (w wakeTimes) report() {
	fromAck := make([]time.Duration, len(w.at))
	fromSend := make([]time.Duration, len(w.at))
	early := 0
	for i, a := range w.at {
		fromSend[i] = a.Sub(w.sent)
		// A waiter may have its answer before the producer has its ack;
		// that wait counts as nothing.
		if fromAck[i] = a.Sub(w.acked); fromAck[i] < 0 {
			fromAck[i] = 0
			early++
		}
	}
	result("wake_n", len(w.at))
	result("wake_ack_ms", ms(w.acked.Sub(w.sent)))
	result("wake_before_ack", early)
	for _, q := range []struct {
		name string
		d    []time.Duration
	}{{"ack", fromAck}, {"send", fromSend}} {
		slices.Sort(q.d)
		result("wake_"+q.name+"_p50_ms", ms(quantile(q.d, 0.50)))
		result("wake_"+q.name+"_p99_ms", ms(quantile(q.d, 0.99)))
		result("wake_"+q.name+"_max_ms", ms(q.d[len(q.d)-1]))
	}
}

// quantile of sorted d, by the nearest rank.
func quantile(d []time.Duration, q float64) time.Duration {
	return d[int(q*float64(len(d)-1)+0.5)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
