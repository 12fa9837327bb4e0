package client

import (
	"context"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// Defaults of ProducerOptions.
const (
	DefaultLinger             = 5 * time.Millisecond
	DefaultMaxBatchRecords    = 10000
	DefaultMaxBatchBytes      = 1 << 20
	DefaultMaxInFlight        = 32
	DefaultMaxBufferedRecords = 100000
)

// ProducerOptions tune a Producer. Zero values take the defaults.
type ProducerOptions struct {
	// Linger is how long a topic's batch waits for more records before it
	// is sent (default 5 ms). A negative Linger sends every record as soon
	// as it is produced.
	Linger time.Duration
	// MaxBatchRecords and MaxBatchBytes send a batch as soon as it holds
	// this many records or encoded bytes (defaults 10000 and 1 MiB; the
	// bytes are capped below the client's frame limit). A record larger
	// than MaxBatchBytes goes alone.
	MaxBatchRecords int
	MaxBatchBytes   int
	// MaxInFlight bounds the produce requests awaiting their answer
	// (default 32).
	MaxInFlight int
	// MaxBufferedRecords bounds the records produced whose promise has not
	// run yet; Produce blocks beyond it (default 100000).
	MaxBufferedRecords int
}

func (o ProducerOptions) withDefaults(maxFrame uint32) ProducerOptions {
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	// Leave room for the frame header and the topic name.
	o.MaxBatchBytes = max(min(o.MaxBatchBytes, int(maxFrame)-64<<10), 1)
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxBufferedRecords <= 0 {
		o.MaxBufferedRecords = DefaultMaxBufferedRecords
	}
	return o
}

// Producer batches records per topic and sends the batches pipelined on
// the Client's connection.
//
// Ordering: a topic's batches are sealed in Produce order and written to
// the connection in that order by one sender goroutine, and the broker
// keeps pipelined produces of a connection in order, so records with the
// same key are stored in the order they were produced. Promises run one at
// a time, in Produce order per topic.
//
// Failures: a batch that could not be sent at all (no connection) is
// retried in place, which keeps the order. A batch the broker refused, or
// whose connection broke after it was sent, is not retried, because later
// batches of its topic may already be stored: retrying it would reorder
// keys. Its promises get the error; IsRetriable tells whether producing
// the records again is worthwhile. Delivery is at-least-once.
type Producer struct {
	c   *Client
	opt ProducerOptions

	stop    context.Context // ends when Close gives up on unsent batches
	cancel  context.CancelFunc
	slots   chan struct{} // one per produce request in flight
	wake    chan struct{} // the sender has batches (capacity 1)
	deliver chan struct{} // the promiser has batches (capacity 1)
	sender  sync.WaitGroup
	done    chan struct{} // closed when the promiser exits

	mu sync.Mutex // guards the following
	// topics holds the topics with a batch filling or unresolved.
	topics map[string]*topicState
	sendq  []*batch // sealed batches not yet sent, in seal order
	readyq []*batch // resolved batches whose promises are due, in order
	// buffered counts records produced whose promise has not run.
	buffered int
	// changed is closed and replaced whenever buffered falls.
	changed chan struct{}
	closed  bool
}

// topicState is one topic's batches.
type topicState struct {
	name  string
	fill  *batch      // the batch records are added to; nil if none
	timer *time.Timer // seals fill when the linger ends
	// queue holds sealed batches until their promises are due, oldest
	// first; promises run only from its head, which keeps them in order.
	queue []*batch
}

type batch struct {
	topic    *topicState
	recs     []Record
	wrecs    []wire.Record
	promises []func(Record, error)
	bytes    int
	resolved bool
	err      error
}

// NewProducer returns a Producer sending through c. Close it to flush and
// stop its goroutines; closing c fails whatever is still buffered.
func NewProducer(c *Client, opt ProducerOptions) *Producer {
	stop, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c:       c,
		opt:     opt.withDefaults(c.cfg.maxFrame),
		stop:    stop,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		deliver: make(chan struct{}, 1),
		done:    make(chan struct{}),
		topics:  make(map[string]*topicState),
		changed: make(chan struct{}),
	}
	p.slots = make(chan struct{}, p.opt.MaxInFlight)
	p.sender.Add(1)
	go p.sendLoop()
	go p.promiseLoop()
	return p
}

// Produce buffers rec for topic and calls promise once rec is durable or
// has failed. Promises run one at a time, in Produce order per topic, on
// the producer's goroutine: they must not block (hand work to another
// goroutine instead). promise may be nil.
//
// When MaxBufferedRecords records are buffered, Produce waits for space
// or for ctx to be done; in the latter case promise gets ctx's error.
// After Close, promise is called at once with ErrClosed.
func (p *Producer) Produce(ctx context.Context, topic string, rec Record, promise func(Record, error)) {
	if promise == nil {
		promise = func(Record, error) {}
	}
	if rec.Timestamp.IsZero() {
		rec.Timestamp = time.Now() // the promise sees the time sent
	}
	w := toWire(&rec, rec.Timestamp)
	size := w.Size()
	p.mu.Lock()
	for !p.closed && p.buffered >= p.opt.MaxBufferedRecords {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			if !p.closed {
				p.failLocked(p.topicLocked(topic), rec, promise, context.Cause(ctx))
				p.mu.Unlock()
				return
			}
		}
	}
	if p.closed {
		p.mu.Unlock()
		promise(rec, ErrClosed)
		return
	}
	p.buffered++
	t := p.topicLocked(topic)
	if b := t.fill; b != nil && (len(b.recs) >= p.opt.MaxBatchRecords || b.bytes+size > p.opt.MaxBatchBytes) {
		p.sealLocked(t)
	}
	if t.fill == nil {
		p.openLocked(t)
	}
	b := t.fill
	b.recs = append(b.recs, rec)
	b.wrecs = append(b.wrecs, w)
	b.promises = append(b.promises, promise)
	b.bytes += size
	if p.opt.Linger < 0 || len(b.recs) >= p.opt.MaxBatchRecords || b.bytes >= p.opt.MaxBatchBytes {
		p.sealLocked(t)
	}
	p.mu.Unlock()
}

// Flush sends every buffered batch at once and waits until every record
// produced so far (and any produced meanwhile) has had its promise
// called, or until ctx is done.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.topics {
		p.sealLocked(t)
	}
	for p.buffered > 0 {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			p.mu.Lock()
			return context.Cause(ctx)
		}
		p.mu.Lock()
		for _, t := range p.topics {
			p.sealLocked(t) // records produced during the flush
		}
	}
	return nil
}

// Close stops accepting records and flushes. If ctx ends first, batches
// not yet sent fail with ErrClosed and Close returns ctx's error; batches
// already sent still get their promises when their answers arrive.
// Close does not close the Client.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(ctx)
	p.cancel()
	p.sender.Wait()
	p.mu.Lock()
	p.signalLocked(p.deliver) // let the promiser see it may exit
	p.mu.Unlock()
	if err == nil {
		<-p.done
	}
	return err
}

func (p *Producer) topicLocked(name string) *topicState {
	t := p.topics[name]
	if t == nil {
		t = &topicState{name: name}
		p.topics[name] = t
	}
	return t
}

// openLocked starts a new batch for t and arms its linger timer.
func (p *Producer) openLocked(t *topicState) {
	b := &batch{topic: t}
	t.fill = b
	if p.opt.Linger > 0 {
		t.timer = time.AfterFunc(p.opt.Linger, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if t.fill == b {
				p.sealLocked(t)
			}
		})
	}
}

// sealLocked closes t's filling batch and queues it for the sender.
func (p *Producer) sealLocked(t *topicState) {
	b := t.fill
	if b == nil {
		return
	}
	t.fill = nil
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.queue = append(t.queue, b)
	p.sendq = append(p.sendq, b)
	p.signalLocked(p.wake)
}

// failLocked fails one record without sending it, after the records
// produced before it, so its promise keeps its place in the order.
func (p *Producer) failLocked(t *topicState, rec Record, promise func(Record, error), err error) {
	p.sealLocked(t)
	p.buffered++
	t.queue = append(t.queue, &batch{
		topic: t, recs: []Record{rec}, promises: []func(Record, error){promise},
		resolved: true, err: err,
	})
	p.popLocked(t)
}

// resolve records a batch's outcome and releases any promises now due.
func (p *Producer) resolve(b *batch, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.resolved, b.err = true, err
	p.popLocked(b.topic)
}

// popLocked moves t's resolved batches at the head of its queue to the
// promiser.
func (p *Producer) popLocked(t *topicState) {
	n := 0
	for n < len(t.queue) && t.queue[n].resolved {
		n++
	}
	if n == 0 {
		return
	}
	p.readyq = append(p.readyq, t.queue[:n]...)
	t.queue = t.queue[n:]
	if len(t.queue) == 0 && t.fill == nil && p.topics[t.name] == t {
		delete(p.topics, t.name)
	}
	p.signalLocked(p.deliver)
}

func (p *Producer) signalLocked(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sendLoop writes sealed batches to the connection, one at a time and in
// seal order, while at most MaxInFlight await their answers.
func (p *Producer) sendLoop() {
	defer p.sender.Done()
	for {
		b := p.nextToSend()
		if b == nil {
			return
		}
		if p.stop.Err() != nil {
			p.resolve(b, ErrClosed)
			continue
		}
		select {
		case p.slots <- struct{}{}:
			p.send(b)
		case <-p.stop.Done():
			p.resolve(b, ErrClosed)
		}
	}
}

// nextToSend waits for a sealed batch; nil once the producer stops and
// nothing is left to send.
func (p *Producer) nextToSend() *batch {
	for {
		p.mu.Lock()
		if len(p.sendq) > 0 {
			b := p.sendq[0]
			p.sendq[0] = nil
			p.sendq = p.sendq[1:]
			p.mu.Unlock()
			return b
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.stop.Done():
			p.mu.Lock()
			empty := len(p.sendq) == 0
			p.mu.Unlock()
			if empty {
				return nil
			}
		}
	}
}

// send writes one batch, holding an in-flight slot, and leaves a goroutine
// waiting for its answer. A batch that could not be written because no
// connection could be had is retried here, before anything later is sent,
// so the retry keeps the order.
func (p *Producer) send(b *batch) {
	req := wire.ProduceRequest{Topic: str(b.topic.name), Records: b.wrecs}
	for attempt := 1; ; attempt++ {
		cn, err := p.c.conn(p.stop)
		if err == nil {
			cl := newCall()
			corr, err := cn.send(req, cl)
			if err != nil {
				// A write that failed part way may have reached the
				// broker: not retried.
				p.fail(b, err)
				return
			}
			go p.await(cn, corr, cl, b)
			return
		}
		if attempt >= p.c.cfg.retryAttempts || !shouldRetry(err, false, false) || sleep(p.stop, p.c.backoff(attempt)) != nil {
			p.fail(b, err)
			return
		}
	}
}

// fail resolves a batch that holds an in-flight slot but was not sent.
func (p *Producer) fail(b *batch, err error) {
	<-p.slots
	p.resolve(b, err)
}

// await waits for one batch's answer and resolves it.
func (p *Producer) await(cn *conn, corr uint32, cl *call, b *batch) {
	defer func() { <-p.slots }()
	t := time.NewTimer(p.c.cfg.requestTimeout)
	defer t.Stop()
	var err error
	select {
	case r := <-cl.ch:
		var payload []byte
		if payload, err = r.result(); err == nil {
			var resp wire.CountResponse
			if derr := resp.Decode(payload); derr != nil {
				err = ErrProtocol
			}
		}
	case <-t.C:
		cn.forget(corr)
		err = ErrRequestTimeout
	}
	p.resolve(b, err)
}

// promiseLoop runs promises in the order batches became due, one at a
// time, and frees their buffer space afterwards. It exits once the
// producer is closed and every record's promise has run.
func (p *Producer) promiseLoop() {
	defer close(p.done)
	for {
		p.mu.Lock()
		ready := p.readyq
		p.readyq = nil
		exit := len(ready) == 0 && p.closed && p.buffered == 0
		p.mu.Unlock()
		if exit {
			return
		}
		if len(ready) == 0 {
			<-p.deliver
			continue
		}
		n := 0
		for _, b := range ready {
			for i := range b.recs {
				b.promises[i](b.recs[i], b.err)
			}
			n += len(b.recs)
		}
		p.mu.Lock()
		p.buffered -= n
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}
