package bench

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// producers is the producing side of a run: one worker per connection.
type producers struct {
	r    *run
	cls  []*client.Client
	t    *tally
	lats []*Recorder
}

func (r *run) newProducers(cls []*client.Client, p *Progress) *producers {
	s := &producers{r: r, cls: cls, t: newTally(r.start, p), lats: make([]*Recorder, len(cls))}
	for i := range s.lats {
		s.lats[i] = NewRecorder()
	}
	return s
}

// run produces every record and waits for every ack.
func (s *producers) run(ctx context.Context) error {
	errs := make([]error, len(s.cls))
	var wg sync.WaitGroup
	for w := range s.cls {
		wg.Go(func() { errs[w] = s.worker(ctx, w) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if n := s.t.errors.Load(); n > 0 {
		return &RecordErrors{Count: n, First: s.t.err()}
	}
	return nil
}

func (s *producers) stats() Stats {
	all := NewRecorder()
	all.Merge(s.lats...)
	return s.t.stats(s.r.start, all.Summary(s.r.origin()))
}

// origin tells what the producers' latencies are measured from.
func (r *run) origin() Origin {
	if r.cfg.Rate > 0 {
		return FromSchedule
	}
	return FromSend
}

// worker w produces its share of the records: records w, w+P, w+2P ...
// of the run, so that keys cycle over all producers alike.
func (s *producers) worker(ctx context.Context, w int) error {
	cfg := &s.r.cfg
	n := share(cfg.Records, w, len(s.cls))
	sched := newSchedule(s.r.start, cfg.Rate, w, len(s.cls))
	index := func(i int64) int64 { return i*int64(len(s.cls)) + int64(w) }
	if cfg.Sync {
		return s.syncWorker(ctx, s.cls[w], s.lats[w], sched, n, index)
	}
	return s.asyncWorker(ctx, s.cls[w], s.lats[w], sched, n, index)
}

// syncWorker sends one record per request and waits for each ack.
func (s *producers) syncWorker(ctx context.Context, c *client.Client, lat *Recorder, sched schedule, n int64, index func(int64) int64) error {
	topic, size := s.r.cfg.Topic, int64(s.r.cfg.Size)
	return pace(ctx, s.r.clk, sched, n, func(i int64, origin time.Time) error {
		if _, err := c.Produce(ctx, topic, s.r.payload.record(index(i), origin)); err != nil {
			s.t.fail(err)
			return err
		}
		now := s.r.clk.Now()
		lat.Record(now.Sub(origin))
		s.t.add(1, size, now)
		return nil
	})
}

// asyncWorker hands records to a client.Producer, which batches them and
// keeps requests in flight; each record's promise times it. Produce blocks
// when the producer's buffer is full, which is the closed loop's back
// pressure; in open loop the records then fall behind schedule and carry
// the delay in their latency.
func (s *producers) asyncWorker(ctx context.Context, c *client.Client, lat *Recorder, sched schedule, n int64, index func(int64) int64) error {
	cfg := &s.r.cfg
	p := client.NewProducer(c, client.ProducerOptions{Linger: cfg.Linger, MaxBatchRecords: cfg.Batch, Compression: codecs[cfg.Compression]})
	size := int64(cfg.Size)
	err := pace(ctx, s.r.clk, sched, n, func(i int64, origin time.Time) error {
		p.Produce(ctx, cfg.Topic, s.r.payload.record(index(i), origin), func(_ client.Record, err error) {
			if err != nil {
				s.t.fail(err)
				return
			}
			now := s.r.clk.Now()
			lat.Record(now.Sub(origin))
			s.t.add(1, size, now)
		})
		return nil
	})
	return errors.Join(err, p.Close(ctx))
}

// RecordErrors reports records whose produce failed.
type RecordErrors struct {
	Count int64
	First error
}

func (e *RecordErrors) Error() string {
	return "bench: " + group(e.Count) + " records failed, the first with: " + e.First.Error()
}

func (e *RecordErrors) Unwrap() error { return e.First }
