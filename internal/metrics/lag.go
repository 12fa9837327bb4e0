package metrics

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

// lagRefresher computes consumer-group lag on one goroutine, every
// LagEvery within LagTime and LagBytes, and keeps the last result for
// scrapes to show. It starts at the first scrape, so a node nobody
// scrapes reads nothing, and stops at close.
type lagRefresher struct {
	src  source
	opts Options
	last atomic.Pointer[lagResult] // nil until the first computation ends
	runs atomic.Int64              // computations ended

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine ends
}

// lagResult is one finished computation.
type lagResult struct {
	rep  broker.LagReport
	at   time.Time     // when it ended
	took time.Duration // how long it ran
}

func newLagRefresher(src source, opts Options) *lagRefresher {
	return &lagRefresher{src: src, opts: opts}
}

// latest starts the computation if it is not running, and returns the
// last result without waiting for one.
func (r *lagRefresher) latest() *lagResult {
	r.mu.Lock()
	if !r.started && !r.closed {
		r.started = true
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel, r.done = cancel, make(chan struct{})
		go r.run(ctx)
	}
	r.mu.Unlock()
	return r.last.Load()
}

func (r *lagRefresher) run(ctx context.Context) {
	defer close(r.done)
	for {
		r.refresh(ctx)
		t := r.opts.Clock.NewTimer(r.opts.LagEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

func (r *lagRefresher) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.LagTime)
	defer cancel()
	start := r.opts.Now()
	rep := r.src.groupLags(ctx, broker.LagBudget{MaxGroups: r.opts.MaxGroups, Bytes: r.opts.LagBytes, Time: r.opts.LagTime})
	if ctx.Err() != nil {
		rep.Cut = true
	}
	end := r.opts.Now()
	r.last.Store(&lagResult{rep: rep, at: end, took: end.Sub(start)})
	r.runs.Add(1)
}

// close stops the goroutine, cancelling a computation under way, and
// waits for it.
func (r *lagRefresher) close() {
	r.mu.Lock()
	r.closed = true
	started, cancel, done := r.started, r.cancel, r.done
	r.mu.Unlock()
	if started {
		cancel()
		<-done
	}
}
