package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/pkg/client"
)

// MetaConfig describes one run of the metadata workload: Count topics
// are created, each described, and each given a group position, one
// operation at a time per worker, every one timed from its request to its
// answer. In a cluster these are writes and reads of the control plane,
// so they show its latency through the node the workers are connected to
// (the vnode's leader, or a follower that forwards).
type MetaConfig struct {
	// Prefix starts the names of the topics the run creates; a run id
	// follows it, so runs never collide.
	Prefix string `json:"prefix"`
	// Count is how many operations of each kind run (default 500).
	Count int `json:"count"`
	// Workers run the operations, each on its own connection (default 1).
	Workers int `json:"workers"`
	// Vnodes, when positive, keeps the created topics on one vnode of a
	// ring of that size: the vnode of Prefix itself. The run's operations
	// then all go to one Raft group, whose leader is one node.
	Vnodes int `json:"vnodes"`
	// Keep leaves the created topics in place; by default they are deleted
	// (untimed) at the end.
	Keep bool `json:"keep"`
}

// Defaults of MetaConfig.
const (
	DefaultMetaCount = 500
	// maxMetaCount bounds the topics one run creates; the node's topic
	// quota (10,000 by default) is the harder limit.
	maxMetaCount = 5000
)

// The metadata operations, in the order a run makes them.
const (
	OpCreate   = "create"
	OpDescribe = "describe"
	OpCommit   = "commit"
)

// MetaResult is what a metadata run measured, one entry per operation.
type MetaResult struct {
	Config MetaConfig `json:"config"`
	// Vnode is the vnode every topic of the run maps to, when Vnodes was
	// given.
	Vnode *uint32   `json:"vnode,omitempty"`
	Ops   []OpStats `json:"ops"`
}

// OpStats is one operation's tally: completed and failed operations,
// throughput over the phase, and latency per operation.
type OpStats struct {
	Op       string   `json:"op"`
	Count    int64    `json:"count"`
	Errors   int64    `json:"errors"`
	ElapsedS float64  `json:"elapsed_s"`
	OpsPerS  float64  `json:"ops_per_s"`
	Latency  *Latency `json:"latency"`
}

func (c MetaConfig) withDefaults() (MetaConfig, error) {
	if c.Count == 0 {
		c.Count = DefaultMetaCount
	}
	c.Workers = max(c.Workers, 1)
	switch {
	case c.Prefix == "":
		return c, fmt.Errorf("%w: a topic prefix is required", ErrConfig)
	case c.Count < 1 || c.Count > maxMetaCount:
		return c, fmt.Errorf("%w: count %d: want 1 to %d", ErrConfig, c.Count, maxMetaCount)
	case c.Workers > c.Count:
		return c, fmt.Errorf("%w: %d workers for %d operations", ErrConfig, c.Workers, c.Count)
	case placement.Ring{Vnodes: c.Vnodes}.Validate() != nil:
		return c, fmt.Errorf("%w: %d vnodes", ErrConfig, c.Vnodes)
	}
	return c, nil
}

// metaGroup is the consumer group whose position the commit phase sets
// on each topic: a first commit of a group is always a write.
const metaGroup = "bench-meta"

// RunMeta runs the metadata workload against the node dial reaches.
func RunMeta(ctx context.Context, cfg MetaConfig, dial Dialer) (*MetaResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cls := make([]*client.Client, 0, cfg.Workers)
	defer func() { closeAll(cls) }()
	for range cfg.Workers {
		c, err := dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("connecting: %w", err)
		}
		cls = append(cls, c)
	}
	res := &MetaResult{Config: cfg}
	names := metaNames(cfg, strconv.FormatInt(time.Now().UnixNano(), 36))
	if cfg.Vnodes > 0 {
		v := placement.Ring{Vnodes: cfg.Vnodes}.VnodeOf(cfg.Prefix)
		res.Vnode = &v
	}
	phases := []struct {
		op string
		fn func(ctx context.Context, c *client.Client, i int) error
	}{
		{OpCreate, func(ctx context.Context, c *client.Client, i int) error { return c.CreateTopic(ctx, names[i]) }},
		{OpDescribe, func(ctx context.Context, c *client.Client, i int) error {
			_, err := c.DescribeTopic(ctx, names[i])
			return err
		}},
	}
	for _, p := range phases {
		s, err := runPhase(ctx, cls, cfg.Count, p.op, p.fn)
		res.Ops = append(res.Ops, s)
		if err != nil {
			return res, err
		}
	}
	cursors, err := endCursors(ctx, cls[0], names)
	if err != nil {
		return res, err
	}
	s, err := runPhase(ctx, cls, cfg.Count, OpCommit, func(ctx context.Context, c *client.Client, i int) error {
		return c.Commit(ctx, names[i], client.CommitOptions{Group: metaGroup, Cursor: cursors[i]})
	})
	res.Ops = append(res.Ops, s)
	if err == nil && !cfg.Keep {
		err = deleteTopics(ctx, cls[0], names)
	}
	return res, err
}

// metaNames returns Count fresh topic names; with Vnodes, only names that
// map to the vnode of the prefix (one in Vnodes names does, so finding
// them costs hashes, not requests).
func metaNames(cfg MetaConfig, run string) []string {
	ring := placement.Ring{Vnodes: cfg.Vnodes}
	want := ring.VnodeOf(cfg.Prefix)
	names := make([]string, 0, cfg.Count)
	for i := 0; len(names) < cfg.Count; i++ {
		name := cfg.Prefix + "-" + run + "-" + strconv.Itoa(i)
		if cfg.Vnodes == 0 || ring.VnodeOf(name) == want {
			names = append(names, name)
		}
	}
	return names
}

// runPhase makes count operations, worker w taking i = w, w+workers, ...
// and times each. A failure ends the phase: the other workers stop after
// their operation in flight.
func runPhase(parent context.Context, cls []*client.Client, count int, op string, fn func(context.Context, *client.Client, int) error) (OpStats, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	lats := make([]*Recorder, len(cls))
	errs := make([]error, len(cls))
	done := make([]int64, len(cls))
	start := time.Now()
	var wg sync.WaitGroup
	for w, c := range cls {
		lats[w] = NewRecorder()
		wg.Go(func() {
			for i := w; i < count && ctx.Err() == nil; i += len(cls) {
				t0 := time.Now()
				if err := fn(ctx, c, i); err != nil {
					if ctx.Err() != nil && parent.Err() == nil {
						return // stopped by another worker's failure
					}
					errs[w] = fmt.Errorf("%s %d: %w", op, i, err)
					cancel()
					return
				}
				lats[w].Record(time.Since(t0))
				done[w]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := OpStats{Op: op, ElapsedS: elapsed.Seconds()}
	for w := range cls {
		s.Count += done[w]
		if errs[w] != nil {
			s.Errors++
		}
	}
	if elapsed > 0 {
		s.OpsPerS = float64(s.Count) / elapsed.Seconds()
	}
	all := NewRecorder()
	all.Merge(lats...)
	s.Latency = all.Summary(FromRequest)
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	return s, parent.Err()
}

// endCursors fetches, untimed, a cursor of each topic for the commits.
func endCursors(ctx context.Context, c *client.Client, names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		cur, err := c.EndCursor(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("end cursor of %s: %w", n, err)
		}
		out[i] = cur
	}
	return out, nil
}

func deleteTopics(ctx context.Context, c *client.Client, names []string) error {
	for _, n := range names {
		if err := c.DeleteTopic(ctx, n); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("deleting %s: %w", n, err)
		}
	}
	return nil
}

// WriteJSON writes r as one indented JSON document.
func (r *MetaResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for people: one line per operation.
func (r *MetaResult) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "meta prefix=%s count=%s workers=%d", r.Config.Prefix, group(int64(r.Config.Count)), r.Config.Workers)
	if r.Vnode != nil {
		fmt.Fprintf(&b, " vnode=%d/%d", *r.Vnode, r.Config.Vnodes)
	}
	b.WriteByte('\n')
	for _, s := range r.Ops {
		fmt.Fprintf(&b, "  %-9s %s ops in %.2f s: %s ops/s", s.Op, group(s.Count), s.ElapsedS, group(int64(s.OpsPerS+0.5)))
		if s.Errors > 0 {
			fmt.Fprintf(&b, ", %s errors", group(s.Errors))
		}
		if l := s.Latency; l != nil {
			fmt.Fprintf(&b, "  p50 %s  p90 %s  p99 %s  max %s", us(l.P50Us), us(l.P90Us), us(l.P99Us), us(l.MaxUs))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
