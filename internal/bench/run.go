package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// Dialer opens one authenticated client connection; each worker gets its
// own.
type Dialer func(ctx context.Context) (*client.Client, error)

// ErrShort reports that consumers stopped receiving before they had read
// the records asked for: the topic holds fewer, or the producers failed.
var ErrShort = errors.New("bench: fewer records arrived than expected")

// errDone ends the consumers once they have read what was asked.
var errDone = errors.New("bench: done")

// run is the state of one Run.
type run struct {
	cfg      Config
	dial     Dialer
	clk      clock
	progress *Progress
	payload  *payload
	start    time.Time // the workload's time zero, after connections are open
	wire     int       // the wire version the connections speak
}

// Run executes the workload cfg describes against the node dial reaches
// and returns what it measured. progress may be nil. On failure Run
// returns the partial Result along with the error when it got that far.
func Run(ctx context.Context, cfg Config, dial Dialer, progress *Progress) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = &Progress{}
	}
	r := &run{cfg: cfg, dial: dial, clk: realClock{}, progress: progress, payload: newPayload(cfg.Size, cfg.Keys)}
	switch cfg.Mode {
	case Produce:
		return r.produce(ctx)
	case Consume:
		return r.consume(ctx)
	default:
		return r.e2e(ctx)
	}
}

// dialAll opens n connections, closing them all if one fails, and notes
// the wire version they speak: the lowest, should they differ.
func (r *run) dialAll(ctx context.Context, n int) ([]*client.Client, error) {
	cls := make([]*client.Client, 0, n)
	for range n {
		c, err := r.dial(ctx)
		if err != nil {
			closeAll(cls)
			return nil, fmt.Errorf("connecting: %w", err)
		}
		cls = append(cls, c)
		if v := c.WireVersion(); r.wire == 0 || v < r.wire {
			r.wire = v
		}
	}
	if r.wire < 2 && r.cfg.Compression != "none" && r.cfg.Mode != Consume {
		closeAll(cls)
		return nil, fmt.Errorf("%w: compression %s needs wire v2, and the connections speak v%d", ErrConfig, r.cfg.Compression, r.wire)
	}
	return cls, nil
}

// result starts the Result of the run.
func (r *run) result(s Stats) *Result {
	return &Result{Config: r.cfg, Wire: r.wire, Stats: s}
}

func closeAll(cls []*client.Client) {
	for _, c := range cls {
		c.Close()
	}
}

// createTopic creates the topic unless it exists.
func (r *run) createTopic(ctx context.Context, c *client.Client) error {
	var opts []client.TopicOption
	if r.cfg.Ranges > 0 {
		opts = append(opts, client.WithRanges(r.cfg.Ranges))
	}
	err := c.CreateTopic(ctx, r.cfg.Topic, opts...)
	if err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", r.cfg.Topic, err)
	}
	return nil
}

// deliveries is how many records the consumers receive in all.
func (r *run) deliveries() int64 {
	if r.cfg.Via == ViaGroup {
		return r.cfg.Records
	}
	return r.cfg.Records * int64(r.cfg.Consumers)
}

func (r *run) produce(ctx context.Context) (*Result, error) {
	cls, err := r.dialAll(ctx, r.cfg.Producers)
	if err != nil {
		return nil, err
	}
	defer closeAll(cls)
	if err := r.createTopic(ctx, cls[0]); err != nil {
		return nil, err
	}
	r.progress.total.Store(r.cfg.Records)
	r.start = r.clk.Now()
	side := r.newProducers(cls, r.progress)
	err = side.run(ctx)
	return r.result(side.stats()), err
}

func (r *run) consume(ctx context.Context) (*Result, error) {
	cls, err := r.dialAll(ctx, r.cfg.Consumers)
	if err != nil {
		return nil, err
	}
	defer closeAll(cls)
	r.progress.total.Store(r.deliveries())
	r.start = r.clk.Now()
	side := r.newConsumers(ctx, cls, r.progress)
	err = side.run()
	return r.result(side.stats()), err
}

// e2e runs consumers and producers together; the consumers, started
// first, measure each record from its origin stamp to its receipt.
func (r *run) e2e(ctx context.Context) (*Result, error) {
	cls, err := r.dialAll(ctx, r.cfg.Producers+r.cfg.Consumers)
	if err != nil {
		return nil, err
	}
	defer closeAll(cls)
	if err := r.createTopic(ctx, cls[0]); err != nil {
		return nil, err
	}
	r.progress.total.Store(r.deliveries())
	r.start = r.clk.Now()
	cons := r.newConsumers(ctx, cls[r.cfg.Producers:], r.progress)
	prods := r.newProducers(cls[:r.cfg.Producers], nil)
	cerr := make(chan error, 1)
	go func() { cerr <- cons.run() }()
	perr := prods.run(ctx)
	if perr != nil {
		// The consumers would wait for records that will never come.
		cons.abort()
	}
	err = errors.Join(perr, <-cerr)
	ps := prods.stats()
	res := r.result(cons.stats())
	res.Produce = &ps
	return res, err
}
