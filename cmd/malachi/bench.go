package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/malachi-log/malachi/internal/bench"
	"github.com/malachi-log/malachi/pkg/client"
)

// benchFlags are the flags of `malachi bench`, shared by its subcommands.
// It connects like every client command: --server, --user, --password,
// the --tls* flags, the environment and the saved context.
type benchFlags struct {
	cfg    bench.Config
	linger time.Duration
	json   bool
	ttl    ttlPrep
	// cpuProfile is a file the run's CPU profile is written to: the
	// client's own cost per record at many ranges is part of what a
	// bench measures.
	cpuProfile string
}

func newBenchCmd(a *app) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a node's throughput and latency",
		Long: `Measure a node's throughput and latency with a synthetic workload.

  produce  write --records records of --size bytes (async batches, or --sync)
  consume  read them back (--via fetch: every consumer reads the whole topic;
           --via group: the consumers share it as members of one group)
  e2e      produce and consume at once; latency is from the send time carried
           in each record to its receipt
  meta     create, describe and commit one at a time: the metadata path

consume --prepare first writes --records records to a fresh --topic, with a
per-message TTL of --ttl each (none when not given) and, with
--expired-fraction F, a 1 ms TTL on that fraction of them, spread evenly, so
they have expired when the reads start: the consumers then read the rest, and
the node filters the expired ones out of every page it serves. Three runs,
plain, --ttl 1h, and --ttl 1h --expired-fraction 0.5, measure what the TTL
filter costs.

Closed loop (the default) sends as fast as acks allow; async produce then
counts and times acks per produce request, not per record: every record counts
with its request's latency, from the moment the request's first record was
handed to the client to the request's ack ("from batch", an upper bound of each
record's own). --rate R is open loop: records are due on a fixed schedule and
latency is measured from each record's due time, so stalls are not hidden
(coordinated-omission correction).
A progress bar is drawn on a terminal; --json prints one JSON document.
It connects like every other command (--server, --user, --password, the
saved context; see 'malachi --help'); the dev admin may create the topic.

The global --wire picks the protocol (v2, batch-native, by default; v1
record by record), so the same run with --wire v1 compares the two; the
report names the version the connections spoke. --compression zstd or s2
compresses the async producers' batches (v2 only).`,
		Example: `  malachi bench produce --records 1000000 --size 128
  malachi bench produce --sync --records 20000
  malachi --wire v1 bench produce --records 1000000 --size 1024
  malachi bench produce --records 1000000 --size 1024 --compression zstd
  malachi bench produce --rate 50000 --producers 4 --keys 1000 --ranges 4
  malachi bench consume --records 1000000 --via group --consumers 2
  malachi bench consume --prepare --topic ttl-half --ttl 1h --expired-fraction 0.5
  malachi bench e2e --rate 10000 --records 200000 --json
  malachi bench meta --count 500`,
		Args: cobra.NoArgs,
	}
	f.register(cmd.PersistentFlags())
	for _, m := range []bench.Mode{bench.Produce, bench.Consume, bench.E2E} {
		cmd.AddCommand(newBenchModeCmd(a, f, m))
	}
	cmd.AddCommand(newBenchMetaCmd(a, f))
	return cmd
}

var benchShort = map[bench.Mode]string{
	bench.Produce: "Produce records and time their acks",
	bench.Consume: "Read records back and time the reads",
	bench.E2E:     "Produce and consume at once and time each record end to end",
}

func newBenchModeCmd(a *app, f *benchFlags, m bench.Mode) *cobra.Command {
	return &cobra.Command{
		Use:   string(m),
		Short: benchShort[m],
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, a, f, m)
		},
	}
}

func (f *benchFlags) register(fl *pflag.FlagSet) {
	c := &f.cfg
	fl.StringVar(&c.Topic, "topic", "bench", "topic (e2e default: a fresh topic per run)")
	fl.Int64Var(&c.Records, "records", 100000, "records to produce; to read per consumer (via fetch) or in all (via group)")
	fl.IntVar(&c.Size, "size", 128, "value size in bytes")
	fl.IntVar(&c.Keys, "keys", 0, "key cardinality; 0 sends records without a key")
	fl.IntVar(&c.Producers, "producers", 1, "producers, one connection each")
	fl.IntVar(&c.Consumers, "consumers", 1, "consumers, one connection each")
	fl.IntVar(&c.Batch, "batch", client.DefaultMaxBatchRecords, "most records in one produce request")
	fl.DurationVar(&f.linger, "linger", client.DefaultLinger, "how long a batch waits to fill; 0 sends at once")
	fl.Float64Var(&c.Rate, "rate", 0, "open loop: records/s over all producers, latency from each record's due time; 0 = closed loop")
	fl.BoolVar(&c.Sync, "sync", false, "one record per request, waiting for each ack")
	fl.StringVar(&c.Compression, "compression", "none", "compress the async producers' batches: none, zstd or s2 (wire v2)")
	fl.IntVar(&c.Ranges, "ranges", 0, "ranges of the topic if this run creates it; 0 = broker default")
	fl.StringVar(&c.Via, "via", bench.ViaFetch, `how consumers read: "fetch" (own cursor each) or "group" (push subscription, one group)`)
	fl.StringVar(&c.Group, "group", "", "group of --via group (default: a fresh group per run)")
	fl.IntVar(&c.Window, "window", bench.DefaultWindow, "subscription credit window, records (--via group)")
	fl.IntVar(&c.PageMax, "page-max", bench.DefaultPageMax, "most records per pushed page (--via group) or wire v1 fetch")
	fl.IntVar(&c.MaxBytes, "max-bytes", 0, "most stored bytes per wire v2 fetch page; 0 = the node's default (its cap)")
	fl.DurationVar(&c.Idle, "idle", bench.DefaultIdle, "give up when no record has arrived for this long")
	fl.BoolVar(&f.json, "json", false, "print the result as JSON")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write the bench client's CPU profile of the run to this file (go tool pprof)")
	fl.BoolVar(&f.ttl.prepare, "prepare", false, "consume: first write --records records to a fresh --topic")
	fl.DurationVar(&f.ttl.ttl, "ttl", 0, "consume --prepare: each record's TTL (malachi.ttl_ms); 0 = none")
	fl.Float64Var(&f.ttl.expired, "expired-fraction", 0, "consume --prepare: fraction of records written already expiring (1 ms TTL)")
	fl.BoolVar(&f.ttl.lookalike, "lookalike-headers", false, "consume --prepare without --ttl: a header of a TTL record's size under another name (a control)")
}

// config completes the flags into the run's configuration.
func (f *benchFlags) config(cmd *cobra.Command, m bench.Mode) bench.Config {
	c := f.cfg
	c.Mode = m
	c.Linger = f.linger
	if c.Linger == 0 {
		c.Linger = -1 // the client reads 0 as its default
	}
	if m == bench.E2E && !cmd.Flags().Changed("topic") {
		c.Topic = "bench-e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return c
}

func runBench(cmd *cobra.Command, a *app, f *benchFlags, m bench.Mode) error {
	ctx, stop := signal.NotifyContext(benchContext(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	set, err := a.settings()
	if err != nil {
		return err
	}
	if set.Withheld != "" {
		return usageErr("%s", set.Withheld)
	}
	opts, err := set.clientOptions()
	if err != nil {
		return err
	}
	dial := func(ctx context.Context) (*client.Client, error) {
		c, err := client.Dial(ctx, set.Server, opts...)
		if err != nil {
			return nil, explain(err, errSubject{topic: f.cfg.Topic, set: set})
		}
		return c, nil
	}
	if o := cmd.Flags().Lookup("output"); o != nil && o.Value.String() == "json" {
		f.json = true // the global -o json means --json too
	}
	progress := &bench.Progress{}
	hide := func() {}
	if !f.json {
		hide = benchShowProgress(cmd, progress)
	}
	if err := f.ttl.check(m); err != nil {
		hide()
		return err
	}
	cfg := f.config(cmd, m)
	if f.ttl.prepare {
		left, err := f.ttl.run(ctx, dial, cfg)
		if err != nil {
			hide()
			return explain(err, errSubject{topic: f.cfg.Topic, set: set})
		}
		cfg.Records = left
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		hide()
		return err
	}
	res, err := bench.Run(ctx, cfg, dial, progress)
	stopProfile()
	hide()
	if errors.Is(err, bench.ErrConfig) {
		return &exitError{code: 2, err: err}
	}
	if err != nil {
		err = explain(err, errSubject{topic: f.cfg.Topic, set: set})
	}
	if res != nil && (err == nil || res.Records > 0) { // a partial result, if any
		write := res.WriteText
		if f.json {
			write = res.WriteJSON
		}
		if werr := write(cmd.OutOrStdout()); err == nil {
			err = werr
		}
	}
	return err
}

func benchContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// benchShowProgress draws the progress bar when stderr is a terminal and
// returns the function that erases it.
func benchShowProgress(cmd *cobra.Command, p *bench.Progress) func() {
	errOut, ok := cmd.ErrOrStderr().(*os.File)
	if !ok || !term.IsTerminal(int(errOut.Fd())) {
		return func() {}
	}
	width, _, err := term.GetSize(int(errOut.Fd()))
	if err != nil || width <= 0 {
		width = 80
	}
	return bench.ShowProgress(errOut, p, width)
}

// startCPUProfile starts the process's CPU profile into path (none when
// path is empty) and returns what stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}, nil
}
