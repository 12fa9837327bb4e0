package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/malachi-log/malachi/internal/bench"
	"github.com/malachi-log/malachi/pkg/client"
)

// metaFlags are the flags of `malachi bench meta`.
type metaFlags struct {
	cfg bench.MetaConfig
}

func newBenchMetaCmd(a *app, bf *benchFlags) *cobra.Command {
	f := &metaFlags{}
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Time metadata operations: create, describe, commit",
		Long: `Time metadata operations one at a time per worker: --count topics are created,
then each is described, then each gets a first group position (a commit, a
write like the create). Each operation is timed from request to answer;
the report gives ops/s and p50/p90/p99/max per operation. The topics are
named after --topic and deleted (untimed) at the end unless --keep.

In a cluster, --vnodes N keeps every topic on one vnode of a ring of N (the
vnode of the --topic name), so the run talks to one Raft group: point
--server at that vnode's leader, then at a follower, to compare ('malachi
cluster vnodes' names the leaders; the report names the vnode). By default
the node is asked for its ring size (administrators only) and a single node
has none.`,
		Example: `  malachi bench meta --count 500
  malachi --server 127.0.0.1:4050 bench meta --count 500 --json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchMeta(cmd, a, bf, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.cfg.Count, "count", bench.DefaultMetaCount, "operations of each kind (topics created)")
	fl.IntVar(&f.cfg.Workers, "workers", 1, "operations in flight, one connection each")
	fl.IntVar(&f.cfg.Vnodes, "vnodes", -1, "ring size whose one vnode every topic maps to; 0: any vnode; -1: ask the node")
	fl.BoolVar(&f.cfg.Keep, "keep", false, "keep the created topics")
	return cmd
}

func runBenchMeta(cmd *cobra.Command, a *app, bf *benchFlags, f *metaFlags) error {
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
	cfg := f.cfg
	cfg.Prefix = bf.cfg.Topic
	if !cmd.Flags().Changed("topic") {
		cfg.Prefix = "bench-meta"
	}
	subject := errSubject{topic: cfg.Prefix, set: set}
	dial := func(ctx context.Context) (*client.Client, error) {
		c, err := client.Dial(ctx, set.Server, opts...)
		if err != nil {
			return nil, explain(err, subject)
		}
		return c, nil
	}
	if cfg.Vnodes < 0 {
		if cfg.Vnodes, err = ringSize(ctx, dial); err != nil {
			return err
		}
	}
	res, err := bench.RunMeta(ctx, cfg, dial)
	if errors.Is(err, bench.ErrConfig) {
		return &exitError{code: 2, err: err}
	}
	if err != nil {
		err = explain(err, subject)
	}
	json := bf.json
	if o := cmd.Flags().Lookup("output"); o != nil && o.Value.String() == "json" {
		json = true
	}
	if res != nil {
		write := res.WriteText
		if json {
			write = res.WriteJSON
		}
		if werr := write(cmd.OutOrStdout()); err == nil {
			err = werr
		}
	}
	return err
}

// ringSize asks the node for its vnode count: 0 on a single node, and
// when the user may not ask (cluster status is for administrators).
func ringSize(ctx context.Context, dial bench.Dialer) (int, error) {
	c, err := dial(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	st, err := c.ClusterStatus(ctx)
	if errors.Is(err, client.ErrPermissionDenied) {
		return 0, nil
	}
	return st.Vnodes, err
}
