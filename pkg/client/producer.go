package client

import (
	"context"
	"errors"
	"sync"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
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
	//
	// With wire v2 the limits bound a topic's whole produce_batches
	// request (its records, and their raw, uncompressed bytes), as they
	// bound a wire v1 request. The request carries stored batches, each
	// for one range and within the node's own batch limits
	// (max_batch_records and max_batch_bytes from api_versions: 4096 and
	// 256 KiB today): a range that takes more records than one batch holds
	// gets another batch in the same request, so that a request is not cut
	// at the node's batch size. The request stays below the frame limit,
	// 16 MiB of raw records and 4096 batches. A record too large for the
	// node's batch limit goes alone, with wire v1.
	MaxBatchRecords int
	MaxBatchBytes   int
	// Compression compresses each batch sent with wire v2
	// (CompressionNone, CompressionZstd, CompressionS2 or CompressionLZ4;
	// default none). A batch that compression does not shrink, or shrinks
	// beyond what a node accepts (1024 times), goes uncompressed.
	// The node stores batches as received, so they stay compressed on
	// disk and on their way to wire v2 readers. Wire v1 carries records
	// uncompressed whatever this says. An unknown codec means none.
	Compression Codec
	// MaxInFlight bounds the produce requests awaiting their answer
	// (default 32).
	MaxInFlight int
	// MaxBufferedRecords bounds the records produced whose promise has not
	// run yet; Produce blocks beyond it (default 100000).
	MaxBufferedRecords int
	// OnBatch, when set, is called once for every produce request the
	// producer resolves, on the goroutine that runs promises, right after
	// the promises of its records and in the same order. It tells what a
	// per-record promise would, once per request: a caller that counts
	// acknowledgements or times them passes nil promises and this, and so
	// pays nothing per record for it. A record Produce refuses at once
	// (after Close) is not reported here.
	OnBatch func(BatchResult)
}

// BatchResult is the outcome of one produce request of a Producer (or of
// one record that failed before it could join one), as OnBatch receives it.
type BatchResult struct {
	Topic string
	// Records counts the records of the request, and ValueBytes their
	// values' bytes.
	Records    int
	ValueBytes int
	// Opened is when the request's first record was produced: the oldest
	// record's wait runs from it.
	Opened time.Time
	// Err is nil once every record is durable; otherwise every record of
	// the request failed with it, as their promises say.
	Err error
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
	if !o.Compression.valid() {
		o.Compression = CompressionNone
	}
	return o
}

// Producer batches records per topic and sends the batches pipelined on
// the Client's connection.
//
// With wire v2 (see WithWireVersion) a topic's batch is one
// produce_batches request holding one stored batch per range: the
// producer keeps a copy of the topic's routes (asked for on the topic's
// first record, which makes that Produce wait for one round trip, and
// asked for again in the background when the node reports it had to
// re-route), and encodes each record into its range's batch as it is
// produced. Routes are the client's business only; stale ones cost the
// node some work but lose or reorder nothing.
//
// Produce copies the record's Key, Value and Headers (into the batch being
// built or, with wire v1, into the producer's buffers): the caller may
// reuse that memory as soon as Produce returns. The Record a promise
// receives is the one passed to Produce, so its slices are the caller's.
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
	// topics holds the topics with a batch filling or unresolved; last is
	// the one of the latest Produce, if still there, which spares a
	// producer feeding one topic a map lookup per record.
	topics map[string]*topicState
	last   *topicState
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

// batch is one produce request of a topic: wire v1 records, or with wire
// v2 stored batches, one or more per range, encoded as records arrive.
type batch struct {
	topic *topicState
	// n counts the records and values their value bytes; recs and
	// promises hold only the records produced with a promise, in order, so
	// that a record without one costs nothing here.
	n, values int
	recs      []Record // as produced, for the promises
	promises  []func(Record, error)
	// opened is when the first record was produced, read once per batch:
	// the time records without one get is opened plus the monotonic time
	// since, which costs half a wall clock read.
	opened     time.Time
	openedNano int64 // opened as Unix nanoseconds
	// bytes is the encoded size: the wire records with v1, the raw
	// records sections (and batch overheads) with v2.
	bytes    int
	resolved bool
	err      error

	// Wire v1: the records, their bytes copied into arena.
	wrecs []wire.Record
	arena []byte

	// Wire v2 (table is set): open holds, per range of table, the builder
	// taking its records (nil until it takes one, and again once it is
	// full); parts holds every builder in the order they were started,
	// which is the order their batches go out in. lim is the negotiation
	// the batch was built for and caps the limits it derives from it.
	table *routeTable
	lim   wireInfo
	caps  v2Caps
	open  []*batchfmt.Builder
	parts []part
	// out holds the finished batches (or finishErr why they are not);
	// when finished is set, a goroutine is compressing them and closes
	// it when done.
	out       []wire.RangeBatch
	finishErr error
	finished  chan struct{}
	// v2 says what went out: produce_batches, with sent, its batches.
	v2   bool
	sent []wire.RangeBatch
}

// part is one stored batch of a wire v2 request: a range and its builder.
type part struct {
	idx int // in the batch's table
	b   *batchfmt.Builder
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
// goroutine instead). promise may be nil. Produce copies rec's bytes, so
// the caller may reuse them once it returns.
//
// When MaxBufferedRecords records are buffered, Produce waits for space
// or for ctx to be done; in the latter case promise gets ctx's error.
// With wire v2, the first record of a topic also waits for the topic's
// routes; if they cannot be had (ErrNoSuchTopic, ErrPermissionDenied, ctx
// done ...), promise gets that error, in its place in the order.
// After Close, promise is called at once with ErrClosed.
func (p *Producer) Produce(ctx context.Context, topic string, rec Record, promise func(Record, error)) {
	size := recordSize(&rec)
	var (
		table    *routeTable
		routeErr error
	)
	info := p.c.wireInfo()
	if info.version >= 2 && size <= info.maxBatchBytes {
		table, routeErr = p.c.routes(ctx, topic)
		if errors.Is(routeErr, errNoV2) {
			table, routeErr = nil, nil // the connection changed: wire v1
		}
	}
	p.mu.Lock()
	for !p.closed && routeErr == nil && p.buffered >= p.opt.MaxBufferedRecords {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			routeErr = context.Cause(ctx)
		}
	}
	if p.closed || routeErr != nil {
		p.refuseLocked(topic, rec, promise, routeErr)
		return
	}
	p.buffered++
	t := p.topicLocked(topic)
	if table != nil {
		p.addV2Locked(t, &rec, promise, size, table, info)
	} else {
		p.addV1Locked(t, rec, promise)
	}
	p.mu.Unlock()
}

// refuseLocked fails a record Produce does not buffer: ErrClosed after
// Close, else err in its place in the order. It releases p.mu.
func (p *Producer) refuseLocked(topic string, rec Record, promise func(Record, error), err error) {
	if rec.Timestamp.IsZero() {
		rec.Timestamp = time.Now() // the promise sees the time sent
	}
	if p.closed {
		p.mu.Unlock()
		if promise != nil {
			promise(rec, ErrClosed)
		}
		return
	}
	p.failLocked(p.topicLocked(topic), rec, promise, err)
	p.mu.Unlock()
}

// addV1Locked adds rec to t's wire v1 batch, sealing as the limits say.
func (p *Producer) addV1Locked(t *topicState, rec Record, promise func(Record, error)) {
	if rec.Timestamp.IsZero() {
		rec.Timestamp = time.Now() // the promise sees the time sent
	}
	w := toWire(&rec, rec.Timestamp)
	size := w.Size()
	if b := t.fill; b != nil && (b.table != nil || b.n >= p.opt.MaxBatchRecords || b.bytes+size > p.opt.MaxBatchBytes) {
		p.sealLocked(t)
	}
	if t.fill == nil {
		p.openLocked(t)
	}
	b := t.fill
	w, b.arena = copyWire(w, b.arena)
	b.wrecs = append(b.wrecs, w)
	b.keep(rec, promise)
	b.bytes += size
	if p.opt.Linger < 0 || b.n >= p.opt.MaxBatchRecords || b.bytes >= p.opt.MaxBatchBytes {
		p.sealLocked(t)
	}
}

// keep counts rec into b, and keeps it for its promise if it has one.
func (b *batch) keep(rec Record, promise func(Record, error)) {
	b.n++
	b.values += len(rec.Value)
	if promise != nil {
		b.recs = append(b.recs, rec)
		b.promises = append(b.promises, promise)
	}
}

// batchOverhead is what a batch adds to a produce_batches request besides
// its records section: its header, its range and its length.
const batchOverhead = batchfmt.HeaderSize + 8 + 4

// v2Caps are the bounds of a wire v2 request: of one stored batch (a
// part), as the node takes them, and of the whole request.
type v2Caps struct {
	partRecords, partBytes int
	records, bytes         int
}

// v2Caps derives the bounds of a request built for lim.
func (p *Producer) v2Caps(lim *wireInfo) v2Caps {
	frame := min(int(p.c.cfg.maxFrame), lim.maxFrame)
	// Room for the frame header and the topic name, and for compression
	// that fails to compress (it adds a little). Batch headers are
	// counted as parts start.
	request := min(max(frame-min(64<<10, frame/8)-frame/64, 1), maxRequestRawBytes)
	return v2Caps{
		partRecords: min(p.opt.MaxBatchRecords, lim.maxBatchRecords),
		partBytes:   min(p.opt.MaxBatchBytes, lim.maxBatchBytes),
		records:     p.opt.MaxBatchRecords,
		bytes:       min(p.opt.MaxBatchBytes+batchOverhead, request),
	}
}

// addV2Locked encodes rec into its range's batch in t's wire v2 request,
// sealing as the limits say. It reads the clock only as a monotonic
// offset from the batch's opening, and keeps rec only if it has a
// promise: a record costs its encoding and little else.
func (p *Producer) addV2Locked(t *topicState, rec *Record, promise func(Record, error), size int, table *routeTable, info *wireInfo) {
	b := t.fill
	if b != nil && (b.table == nil || b.lim != *info) {
		p.sealLocked(t)
		b = nil
	}
	// The range is picked once per record: a keyless record's pick moves
	// the round-robin on.
	i, picked := -1, (*routeTable)(nil)
	if b != nil {
		i, picked = b.table.index(rec.Key), b.table
		if !b.fits(i, size) {
			p.sealLocked(t)
			b = nil
		}
	}
	if b == nil {
		p.openLocked(t)
		b = t.fill
		b.table, b.lim, b.caps = table, *info, p.v2Caps(info)
		b.open = make([]*batchfmt.Builder, len(table.ranges))
		if picked != table {
			i = table.index(rec.Key)
		}
	}
	rb := b.open[i]
	if rb != nil && rb.RawLen()+size > b.caps.partBytes {
		rb = nil // full for this record: the range starts a new part
	}
	if rb == nil {
		rb = new(batchfmt.Builder)
		b.open[i] = rb
		b.parts = append(b.parts, part{idx: i, b: rb})
		b.bytes += batchOverhead
	}
	var ms int64
	if rec.Timestamp.IsZero() {
		since := time.Since(b.opened)
		ms = max((b.openedNano+int64(since))/int64(time.Millisecond), 0)
		if promise != nil {
			rec.Timestamp = b.opened.Add(since) // the promise sees the time sent
		}
	} else {
		ms = max(rec.Timestamp.UnixMilli(), 0)
	}
	before := rb.RawLen()
	addRecord(rb, rec, ms)
	b.bytes += rb.RawLen() - before
	b.keep(*rec, promise)
	c := &b.caps
	if rb.Len() >= c.partRecords || rb.RawLen() >= c.partBytes {
		b.open[i] = nil // full: the range's next record starts a new part
	}
	if p.opt.Linger < 0 || b.n >= c.records || b.bytes >= c.bytes {
		p.sealLocked(t)
	}
}

// fits reports whether a record of size bytes for range i fits in b.
func (b *batch) fits(i, size int) bool {
	c := &b.caps
	extra := size
	if b.open[i] == nil {
		if len(b.parts) >= maxRequestBatches {
			return false
		}
		extra += batchOverhead
	} else if b.open[i].RawLen()+size > c.partBytes {
		// A new part for the record, unless the request is cut here.
		if len(b.parts) >= maxRequestBatches {
			return false
		}
		extra += batchOverhead
	}
	return b.n < c.records && b.bytes+extra <= c.bytes
}

// copyWire copies w's byte slices into arena, a chunk shared by the
// records of a batch, so that the caller's buffers may be reused.
func copyWire(w wire.Record, arena []byte) (wire.Record, []byte) {
	n := len(w.Key) + len(w.Value)
	for _, h := range w.Headers {
		n += len(h.Key) + len(h.Value)
	}
	if cap(arena)-len(arena) < n {
		arena = make([]byte, 0, max(n, 32<<10))
	}
	cp := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	w.Key, w.Value = cp(w.Key), cp(w.Value)
	for i := range w.Headers {
		// toWire made w.Headers and their keys: only values are the caller's.
		w.Headers[i].Value = cp(w.Headers[i].Value)
	}
	return w, arena
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
	if t := p.last; t != nil && t.name == name {
		return t
	}
	t := p.topics[name]
	if t == nil {
		t = &topicState{name: name}
		p.topics[name] = t
	}
	p.last = t
	return t
}

// openLocked starts a new batch for t and arms its linger timer.
func (p *Producer) openLocked(t *topicState) {
	now := time.Now()
	b := &batch{topic: t, opened: now, openedNano: now.UnixNano()}
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
	if b.table != nil && p.opt.Compression != CompressionNone {
		// Compress now, off the lock and off the sender, so batches of
		// several topics (or several batches of one) compress in
		// parallel while earlier ones go out; the sender waits for it.
		b.finished = make(chan struct{})
		go func() {
			defer close(b.finished)
			b.finish(p.opt.Compression)
		}()
	}
}

// finish finishes the batches of b's parts into b.out.
func (b *batch) finish(codec Codec) {
	out := make([]wire.RangeBatch, 0, len(b.parts))
	for _, pt := range b.parts {
		bb, err := finishBatch(pt.b, codec)
		if err != nil {
			releaseBatches(out)
			b.finishErr = err
			return
		}
		out = append(out, wire.RangeBatch{Range: b.table.ranges[pt.idx].Range, Batch: bb})
	}
	b.open, b.parts, b.out = nil, nil, out
}

// failLocked fails one record without sending it, after the records
// produced before it, so its promise keeps its place in the order.
func (p *Producer) failLocked(t *topicState, rec Record, promise func(Record, error), err error) {
	p.sealLocked(t)
	p.buffered++
	b := &batch{topic: t, opened: rec.Timestamp, resolved: true, err: err}
	b.keep(rec, promise)
	t.queue = append(t.queue, b)
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
		if p.last == t {
			p.last = nil
		}
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
	for attempt := 1; ; attempt++ {
		cn, err := p.c.conn(p.stop)
		if err == nil {
			req, err := p.request(b, cn)
			if err != nil {
				p.fail(b, err)
				return
			}
			cl := newCall()
			corr, err := cn.send(req, cl)
			b.release() // the frame holds a copy of the batches now
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

// request is the produce request of b on cn: produce_batches for a batch
// built for wire v2 when cn speaks it as negotiated when the batch was
// built, else a wire v1 produce (a v2 batch is decoded back to records
// for it, which keeps each key's records in order). Batches are finished
// (header, CRC) here when uncompressed; compressed ones were started at
// seal time.
func (p *Producer) request(b *batch, cn *conn) (wire.Request, error) {
	if b.table == nil {
		return wire.ProduceRequest{Topic: str(b.topic.name), Records: b.wrecs}, nil
	}
	if b.finished != nil {
		<-b.finished
	} else {
		b.finish(CompressionNone)
	}
	if b.finishErr != nil {
		return nil, b.finishErr
	}
	out := b.out
	b.out = nil
	if cn.v2 && cn.wire == b.lim {
		b.v2, b.sent = true, out
		return wire.ProduceBatchesRequest{Topic: str(b.topic.name), Batches: out}, nil
	}
	recs := make([]Record, 0, b.n)
	for _, rb := range out {
		var err error
		if recs, err = decodeBatch(rb.Batch, 0, recs); err != nil {
			return nil, err // our own encoding: cannot happen
		}
	}
	wrecs := make([]wire.Record, len(recs))
	for i := range recs {
		wrecs[i] = toWire(&recs[i], time.Time{})
	}
	// recs alias the batches, which must outlive the send.
	return wire.ProduceRequest{Topic: str(b.topic.name), Records: wrecs}, nil
}

// release frees what b needed only until it was written.
func (b *batch) release() {
	releaseBatches(b.sent)
	b.sent, b.wrecs, b.arena = nil, nil, nil
}

// fail resolves a batch that holds an in-flight slot but was not sent.
func (p *Producer) fail(b *batch, err error) {
	<-p.slots
	b.release()
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
			if b.v2 {
				var resp wire.ProduceBatchesResponse
				if derr := resp.Decode(payload); derr != nil {
					err = ErrProtocol
				} else if resp.Rerouted > 0 {
					p.c.refreshRoutes(b.topic.name)
				}
			} else {
				var resp wire.CountResponse
				if derr := resp.Decode(payload); derr != nil {
					err = ErrProtocol
				}
			}
		}
	case <-t.C:
		cn.forget(corr)
		err = ErrRequestTimeout
	}
	if b.v2 && IsRetriable(err) {
		p.c.refreshRoutes(b.topic.name)
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
			n += b.n
			if p.opt.OnBatch != nil {
				p.opt.OnBatch(BatchResult{Topic: b.topic.name, Records: b.n, ValueBytes: b.values, Opened: b.opened, Err: b.err})
			}
		}
		p.mu.Lock()
		p.buffered -= n
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}
