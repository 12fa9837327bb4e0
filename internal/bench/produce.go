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
	switch {
	case r.cfg.Rate > 0:
		return FromSchedule
	case r.cfg.Sync:
		return FromSend
	default:
		return FromBatch
	}
}

// worker w produces its share of the records: records w, w+P, w+2P ...
// of the run, so that keys cycle over all producers alike.
func (s *producers) worker(ctx context.Context, w int) error {
	cfg := &s.r.cfg
	n := share(cfg.Records, w, len(s.cls))
	sched := newSchedule(s.r.start, cfg.Rate, w, len(s.cls))
	index := func(i int64) int64 { return i*int64(len(s.cls)) + int64(w) }
	switch {
	case cfg.Sync:
		return s.syncWorker(ctx, s.cls[w], s.lats[w], sched, n, index)
	case sched.open():
		return s.openWorker(ctx, s.cls[w], s.lats[w], sched, n, index)
	default:
		return s.closedWorker(ctx, s.cls[w], s.lats[w], n, index)
	}
}

// syncWorker sends one record per request and waits for each ack.
func (s *producers) syncWorker(ctx context.Context, c *client.Client, lat *Recorder, sched schedule, n int64, index func(int64) int64) error {
	topic, size := s.r.cfg.Topic, int64(s.r.cfg.Size)
	var buf recordBuf
	return pace(ctx, s.r.clk, sched, n, func(i int64, origin time.Time) error {
		if _, err := c.Produce(ctx, topic, s.r.payload.record(index(i), origin, &buf)); err != nil {
			s.t.fail(err)
			return err
		}
		now := s.r.clk.Now()
		lat.Record(now.Sub(origin))
		s.t.add(1, size, now)
		return nil
	})
}

// producer returns a client.Producer with the run's settings and onBatch.
func (s *producers) producer(c *client.Client, onBatch func(client.BatchResult)) *client.Producer {
	cfg := &s.r.cfg
	return client.NewProducer(c, client.ProducerOptions{
		Linger: cfg.Linger, MaxBatchRecords: cfg.Batch, Compression: codecs[cfg.Compression], OnBatch: onBatch,
	})
}

// openWorker hands records to a client.Producer on the open-loop
// schedule; each record's promise times it from its due time. Produce
// blocks when the producer's buffer is full; the records then fall behind
// schedule and carry the delay in their latency.
func (s *producers) openWorker(ctx context.Context, c *client.Client, lat *Recorder, sched schedule, n int64, index func(int64) int64) error {
	cfg := &s.r.cfg
	p := s.producer(c, nil)
	size := int64(cfg.Size)
	var buf recordBuf
	err := pace(ctx, s.r.clk, sched, n, func(i int64, origin time.Time) error {
		p.Produce(ctx, cfg.Topic, s.r.payload.record(index(i), origin, &buf), func(_ client.Record, err error) {
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

// closedWorker hands records to a client.Producer as fast as it takes
// them (Produce blocks when its buffer is full: the closed loop's back
// pressure) and counts and times the acks per produce request, through
// OnBatch, rather than per record: per-record promises and clock reads
// would cost the client more than the records themselves. Values carry a
// send time only in e2e, where the consumers need it.
func (s *producers) closedWorker(ctx context.Context, c *client.Client, lat *Recorder, n int64, index func(int64) int64) error {
	cfg := &s.r.cfg
	p := s.producer(c, func(b client.BatchResult) {
		if b.Err != nil {
			s.t.failN(int64(b.Records), b.Err)
			return
		}
		now := s.r.clk.Now()
		lat.RecordN(now.Sub(b.Opened), int64(b.Records))
		s.t.add(int64(b.Records), int64(b.ValueBytes), now)
	})
	var buf recordBuf
	var err error
	if cfg.Mode == E2E {
		err = pace(ctx, s.r.clk, schedule{}, n, func(i int64, origin time.Time) error {
			p.Produce(ctx, cfg.Topic, s.r.payload.record(index(i), origin, &buf), nil)
			return nil
		})
	} else {
		for i := int64(0); i < n; i++ {
			if i%1024 == 0 && ctx.Err() != nil {
				err = context.Cause(ctx)
				break
			}
			p.Produce(ctx, cfg.Topic, s.r.payload.record(index(i), time.Time{}, &buf), nil)
		}
	}
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
