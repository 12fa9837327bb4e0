package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// errAborted ends the consumers of an e2e run whose producers failed; the
// producers' error is the one reported.
var errAborted = errors.New("bench: producers failed")

// consumers is the consuming side of a run: one worker per connection.
type consumers struct {
	r     *run
	cls   []*client.Client
	t     *tally
	lats  []*Recorder
	group string
	// claimed counts the deliveries the group's members have counted, so
	// that together they count exactly Records (ViaGroup).
	claimed atomic.Int64
	ctx     context.Context // ends the workers: done, idle, aborted or the caller's
	cancel  context.CancelCauseFunc
}

func (r *run) newConsumers(ctx context.Context, cls []*client.Client, p *Progress) *consumers {
	s := &consumers{r: r, cls: cls, t: newTally(r.start, p), lats: make([]*Recorder, len(cls)), group: r.cfg.Group}
	for i := range s.lats {
		s.lats[i] = NewRecorder()
	}
	if s.group == "" {
		s.group = "bench-" + strconv.FormatInt(r.start.UnixNano(), 36)
	}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	return s
}

// abort stops the consumers without an error of their own.
func (s *consumers) abort() { s.cancel(errAborted) }

// run reads until every worker has what it wants, nothing arrives for
// the idle time, or the consumers are stopped.
func (s *consumers) run() error {
	defer s.cancel(errDone)
	go s.watchIdle()
	errs := make([]error, len(s.cls)+1)
	var wg sync.WaitGroup
	for w := range s.cls {
		wg.Go(func() { errs[w] = s.settle(s.worker(w)) })
	}
	wg.Wait()
	if s.ctx.Err() != nil {
		if cause := context.Cause(s.ctx); !errors.Is(cause, errDone) && !errors.Is(cause, errAborted) {
			errs[len(s.cls)] = cause // once, not once per worker it cut short
		}
	}
	return errors.Join(errs...)
}

func (s *consumers) worker(w int) error {
	if s.r.cfg.Via == ViaGroup {
		return s.groupWorker(w)
	}
	return s.fetchWorker(w)
}

// settle drops the error of a worker cut short by the consumers' stop:
// the stop's cause is what run reports.
func (s *consumers) settle(err error) error {
	if s.ctx.Err() != nil {
		return nil
	}
	return err
}

// watchIdle stops the consumers with ErrShort once nothing has arrived
// for the idle time.
func (s *consumers) watchIdle() {
	idle := s.r.cfg.Idle
	tick := time.NewTicker(max(idle/10, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
			last := time.Unix(0, s.t.last.Load())
			if quiet := s.r.clk.Now().Sub(last); quiet > idle {
				s.cancel(fmt.Errorf("%w: %s of %s after %s without a record",
					ErrShort, group(s.t.records.Load()), group(s.r.deliveries()), quiet.Round(time.Millisecond)))
				return
			}
		}
	}
}

// fetchWorker reads the whole topic from its start with its own cursor,
// timing each non-empty fetch from its request to its answer, until it has
// Records records. On wire v2 each fetch reads whole stored batches
// (fetch_batches, up to MaxBytes), which the worker walks without
// building records, through a client.Fetcher: the next fetch goes out as
// soon as the cursor at the head of the previous answer has arrived, and
// pages are read ahead while the worker counts; on v1, one page of up to
// PageMax records at a time, still read ahead.
func (s *consumers) fetchWorker(w int) error {
	c, lat, cfg := s.cls[w], s.lats[w], &s.r.cfg
	opt := client.FetchOptions{Max: cfg.PageMax, Wait: min(time.Second, cfg.Idle/2)}
	if c.WireVersion() >= 2 {
		opt.Max, opt.MaxBytes = 0, cfg.MaxBytes
	}
	f := c.NewFetcher(cfg.Topic, opt)
	defer f.Close()
	for got := int64(0); got < cfg.Records; {
		page, err := f.Next(s.ctx)
		if err != nil {
			return err
		}
		if page.Len() == 0 {
			continue
		}
		now := s.r.clk.Now()
		if cfg.Mode == Consume {
			lat.Record(page.RoundTrip())
		}
		n, err := s.receive(page, now, func(n int64) int64 { return min(n, cfg.Records-got) }, lat)
		page.Release() // counted: its memory serves a later fetch
		if err != nil {
			return err
		}
		got += n
	}
	return nil
}

// groupWorker is member w of the group: it takes the pages the broker
// pushes and acks each, until the group has Records records in all. A
// stream that ends with a retriable error (a dropped connection, a
// rebalance) is opened again from the group's committed position; the
// idle watchdog bounds how long that may go on without progress.
func (s *consumers) groupWorker(w int) error {
	for {
		err := s.subscription(w)
		if err == nil || s.ctx.Err() != nil || !client.IsRetriable(err) {
			return err
		}
	}
}

// subscription runs one subscription of member w until the group is done
// (nil) or the stream fails.
func (s *consumers) subscription(w int) error {
	c, lat, cfg := s.cls[w], s.lats[w], &s.r.cfg
	sub, err := c.Subscribe(s.ctx, cfg.Topic, client.SubscribeOptions{
		Group: s.group, Member: "m" + strconv.Itoa(w), Window: cfg.Window, PageMax: cfg.PageMax,
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	for {
		page, err := sub.Next(s.ctx)
		if err != nil {
			return err
		}
		if _, err := s.receive(records(page.Records), s.r.clk.Now(), s.claim, lat); err != nil {
			return err
		}
		if err := sub.Ack(s.ctx, page.Cursor, len(page.Records)); err != nil {
			return err
		}
		if s.claimed.Load() >= cfg.Records {
			s.cancel(errDone)
			return nil
		}
	}
}

// claim reserves up to n of the group's remaining deliveries and returns
// how many it got. Members may receive more than Records in all (a
// rebalance redelivers from the last commit); the surplus is not counted.
func (s *consumers) claim(n int64) int64 {
	for {
		have := s.claimed.Load()
		got := min(n, s.r.cfg.Records-have)
		if got <= 0 || s.claimed.CompareAndSwap(have, have+got) {
			return max(got, 0)
		}
	}
}

// page is what receive counts: a fetched page, or a pushed one.
type page interface {
	Len() int
	Each(fn func(*client.Record)) error
}

// records is a pushed page's records as a page.
type records []client.Record

func (r records) Len() int { return len(r) }

func (r records) Each(fn func(*client.Record)) error {
	for i := range r {
		fn(&r[i])
	}
	return nil
}

// receive counts the records of a page received at now: of the n it may
// count, take(n) says how many it does. In e2e it times each record from
// the origin stamped in its value, and records stamped before the run (or
// not stamped) are not counted; elsewhere every record counts, and the
// page is walked once.
func (s *consumers) receive(pg page, now time.Time, take func(int64) int64, lat *Recorder) (int64, error) {
	valid := int64(pg.Len())
	if s.r.cfg.Mode == E2E {
		valid = 0
		if err := pg.Each(func(r *client.Record) {
			if s.counts(r.Value) {
				valid++
			}
		}); err != nil {
			return 0, err
		}
	}
	n := take(valid)
	var counted, bytes int64
	err := pg.Each(func(r *client.Record) {
		if counted == n || !s.counts(r.Value) {
			return
		}
		if s.r.cfg.Mode == E2E {
			origin, _ := stamped(r.Value)
			lat.Record(now.Sub(origin))
		}
		counted++
		bytes += int64(len(r.Value))
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.t.add(n, bytes, now)
	}
	return n, nil
}

// counts tells whether a received value counts towards the run.
func (s *consumers) counts(v []byte) bool {
	if s.r.cfg.Mode != E2E {
		return true
	}
	origin, ok := stamped(v)
	return ok && !origin.Before(s.r.start)
}

func (s *consumers) stats() Stats {
	all := NewRecorder()
	all.Merge(s.lats...)
	from := FromRequest
	if s.r.cfg.Mode == E2E {
		from = s.r.origin()
	}
	return s.t.stats(s.r.start, all.Summary(from))
}
