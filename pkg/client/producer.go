package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/wire"
)

// Defaults of ProducerOptions.
const (
	DefaultLinger             = 5 * time.Millisecond
	DefaultMaxBatchRecords    = 10000
	DefaultMaxBatchBytes      = 1 << 20
	DefaultMaxInFlight        = 32
	DefaultMaxBufferedRecords = 1000000
	DefaultMaxBufferedBytes   = 64 << 20
	DefaultRangeBatchBytes    = 64 << 10
)

// ProducerOptions tune a Producer. Zero values take the defaults.
type ProducerOptions struct {
	// Linger is how long a batch waits for more records before it is
	// sent (default 5 ms): with wire v2, a range's batch, from its first
	// record; with wire v1, a topic's. A batch waiting for an in-flight
	// slot takes more records meanwhile. A negative Linger sends every
	// record as soon as it is produced (with wire v2, as soon as an
	// in-flight slot is free: records produced while none is go
	// together).
	Linger time.Duration
	// RangeBatchBytes is how many bytes of records a range's batch holds
	// before it is ready to go without waiting for Linger (wire v2;
	// default 64 KiB). A batch that is ready still takes records, up to
	// the node's batch limits, until a request takes it. See Producer.
	RangeBatchBytes int
	// MaxBatchRecords and MaxBatchBytes send a batch as soon as it holds
	// this many records or encoded bytes (defaults 10000 and 1 MiB; the
	// bytes are capped below the client's frame limit). A record larger
	// than MaxBatchBytes goes alone.
	//
	// With wire v2 the limits bound a topic's whole produce_batches
	// request (its records, and their raw, uncompressed bytes), as they
	// bound a wire v1 request, and a range's batch too. The request
	// carries whole stored batches, each for one range and within the
	// node's own batch limits (max_batch_records and max_batch_bytes from
	// api_versions: 4096 and 256 KiB today): a range that takes more
	// records than one batch holds gets another batch, in the same request
	// if it fits, so that a request is not cut at the node's batch size.
	// The request stays below the frame limit, 16 MiB of raw records and
	// 4096 batches. A record too large for the node's batch limit goes
	// alone, with wire v1.
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
	// run yet; Produce blocks beyond it (default 1,000,000: with records
	// of more than 64 bytes, or produced with a promise, MaxBufferedBytes
	// binds first). With wire v2
	// the producer sends no new request while the records in requests
	// not yet resolved fill half of either bound: the other half is left
	// to the ranges' batches to grow in.
	MaxBufferedRecords int
	// MaxBufferedBytes bounds the same records by size (default 64 MiB):
	// a record counts its encoded key, value and headers, and one produced
	// with a promise counts as well the copy kept for the promise (about
	// 100 bytes, its key, value and headers again, and 40 bytes a
	// header); with wire v2, a record that starts a range's batch counts
	// as well the batch's first buffer and bookkeeping (about 1.3 KiB).
	// The bound thus holds the memory the buffer takes whether records
	// have promises or not, and however thinly they spread over topics
	// and ranges. Produce blocks while a record would take the buffer
	// past it. A record larger than the bound is taken alone, once the
	// buffer is empty. A Produce whose context ends while it waits fails
	// its record with ErrBufferFull.
	MaxBufferedBytes int
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
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if !o.Compression.valid() {
		o.Compression = CompressionNone
	}
	if o.RangeBatchBytes <= 0 {
		o.RangeBatchBytes = DefaultRangeBatchBytes
	}
	return o
}

// Producer batches records per topic and sends the batches pipelined on
// the Client's connection.
//
// With wire v2 (see WithWireVersion) the producer keeps a copy of the
// topic's routes (asked for on the topic's first record, which makes that
// Produce wait for one round trip, and asked for again in the background
// when the node reports it had to re-route), and encodes each record into
// its range's batch as it is produced. A range's batch grows across
// requests until it is ready (Linger, RangeBatchBytes, full); a
// produce_batches request carries the ready batches of many ranges, and is
// made when an in-flight slot is free, so that under load batches grow
// while earlier requests are answered. With many ranges, each stored batch
// thus holds many records, which is what the node's work, and a reader's,
// is counted in. Routes are the client's business only; stale ones cost
// the node some work but lose or reorder nothing.
//
// Produce copies the record's Key, Value and Headers (into the batch being
// built or, with wire v1, into the producer's buffers): the caller may
// reuse that memory as soon as Produce returns. The Record a promise
// receives holds copies too, so it shows the record as it was produced
// even when the caller has since overwritten its buffers.
//
// Ordering: a topic's records are sealed into requests in Produce order
// per range (with wire v1, per topic), the requests are written to the
// connection in the order they were sealed by one sender goroutine, and
// the broker keeps pipelined produces of a connection in order, so records
// with the same key are stored in the order they were produced. Promises
// run one at a time, in the order of the topic's requests and in Produce
// order within each: hence in Produce order per range (per key), and per
// topic with wire v1 or with one range. With wire v2 and many ranges, a
// range whose batch filled sooner may have its promises run before those
// of records produced earlier into another range.
//
// Failures: a batch that could not be sent at all (no connection) is
// retried in place, which keeps the order. A batch the broker refused
// with a retriable reason, or whose answer was lost (the connection broke
// or the request timed out), is retried in order: the producer stops
// sending the topic's batches, waits for those in flight, and sends the
// failed ones again, oldest first, before anything newer, after a
// back-off (WithRetry bounds the attempts), one at a time, the topic's
// newer batches waiting until they are stored. If a newer batch of the
// topic was stored meanwhile (one already in flight when the failure came
// back), retrying would put older records after newer ones, so the failed
// batches are not retried and their promises get the error instead;
// IsRetriable tells whether producing them again is worthwhile. A topic's
// batches do not go out on a new connection while some are in flight on
// the one that broke, so a lost connection has all its batches retried.
// With MaxInFlight 1 nothing is in flight beside a failed batch, so a
// retriable failure is always retried while attempts are left.
// Delivery is at-least-once: a batch whose answer was lost may be stored
// twice.
//
// Promises and OnBatch run on the producer's own goroutine. They may call
// Produce, but a Produce that would have to wait for buffer space fails
// its record with ErrInPromise, and Flush and Close return ErrInPromise:
// each would wait for the promise that called it.
type Producer struct {
	c   *Client
	opt ProducerOptions

	stop    context.Context // ends when Close gives up on unsent batches
	cancel  context.CancelFunc
	slots   chan struct{} // one per produce request in flight
	wake    chan struct{} // the sender has batches (capacity 1)
	deliver chan struct{} // the promiser has batches (capacity 1)
	sender  sync.WaitGroup
	// compressing counts the goroutines compressing batches (enqueueLocked);
	// Close waits for them, so that what they hold is back when it returns.
	compressing sync.WaitGroup
	done        chan struct{} // closed when the promiser exits

	mu sync.Mutex // guards the following
	// topics holds the topics with a batch filling or unresolved; last is
	// the one of the latest Produce, if still there, which spares a
	// producer feeding one topic a map lookup per record.
	topics map[string]*topicState
	last   *topicState
	sendq  []*batch // sealed batches not yet sent, in seal order
	readyq []*batch // resolved batches whose promises are due, in order
	// buffered counts records produced whose promise has not run, and
	// bufferedBytes their sizes (recordSize, plus keptSize for those
	// with a promise).
	buffered, bufferedBytes int
	// changed is closed and replaced whenever buffered falls.
	changed chan struct{}
	// accN and accBytes count the buffered records in accumulations
	// (not yet in a request); pressed is set while a Produce waits for
	// room, until room is made, and makes every accumulated part ready.
	accN, accBytes int
	pressed        bool
	closed         bool
	// closeDone is closed when the first Close has finished, closeErr
	// then holding what it returned, for the calls that waited for it.
	closeDone chan struct{}
	closeErr  error

	// promiser is the id of the goroutine that runs promises (goid).
	promiser atomic.Uint64
}

// topicState is one topic's batches.
type topicState struct {
	name  string
	fill  *batch      // the wire v1 batch records are added to; nil if none
	timer *time.Timer // seals fill when the linger ends
	// acc holds the wire v2 records not yet in a request; nil if none.
	acc *accum
	// queue holds sealed batches until their promises are due, oldest
	// first; promises run only from its head, which keeps them in order.
	queue []*batch

	// sealed numbers the topic's batches in seal order (batch.seq).
	sealed uint64
	// inflight counts the topic's batches handed to send and not yet
	// answered or failed, and resending those of them sent again after
	// a failure (see waitsLocked).
	inflight, resending int
	// on is the connection the batches in flight went out on; nil while
	// none is. A batch goes out on another one only once they are all
	// answered (see parkOffConn).
	on *conn
	// stored is the seq of the newest batch the broker stored.
	stored uint64
	// held stops the sender from sending the topic's batches while
	// failed ones wait to be retried: parked takes them instead, in
	// order, and retry holds the failed ones, ordered by seq.
	held   bool
	parked []*batch
	retry  []*batch
}

// kept is the records of a batch or part, as its promises need them.
type kept struct {
	// n counts the records and values their value bytes; held is their
	// buffered bytes. recs and promises hold only the records produced
	// with a promise, in order, so that a record without one costs
	// nothing here.
	n, values, held int
	recs            []Record // as produced, for the promises
	promises        []func(Record, error)
	parena          []byte // holds the bytes of recs
}

// batch is one produce request of a topic: wire v1 records, or with wire
// v2 stored batches, one or more per range, taken from the topic's
// accumulation (accum).
type batch struct {
	topic *topicState
	kept
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
	// seq is the batch's place in its topic's seal order; attempts counts
	// the times it was answered with a retriable failure.
	seq      uint64
	attempts int

	// Wire v1: the records, their bytes copied into arena.
	wrecs []wire.Record
	arena []byte

	// Wire v2 (table is set): parts holds the stored batches in the order
	// they go out in. lim is the negotiation the batch was built for and
	// caps the limits it derives from it.
	table *routeTable
	lim   wireInfo
	caps  v2Caps
	parts []part
	// out holds the finished batches, in buf (or finishErr why they are
	// not); when finished is set, a goroutine is compressing them and
	// closes it when done.
	out       []wire.RangeBatch
	buf       []byte
	finishErr error
	finished  chan struct{}
	// freeing is set by release; whichever of release and the
	// compressing goroutine takes it back (CompareAndSwap) after
	// finished is closed frees the batch, so that exactly one does.
	freeing atomic.Bool
	// v2 says what went out last: produce_batches.
	v2 bool
}

// part is one stored batch of a wire v2 request: a range and its builder
// (chunked).
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

		closeDone: make(chan struct{}),
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
// When MaxBufferedRecords records or MaxBufferedBytes bytes are buffered,
// Produce waits for space or for ctx to be done; in the latter case
// promise gets ErrBufferFull (wrapping ctx's error). Called from a promise,
// Produce does not wait: promise gets ErrInPromise when there is no room.
// With wire v2, the first record of a topic also waits for the topic's
// routes; if they cannot be had (ErrNoSuchTopic, ErrPermissionDenied, ctx
// done ...), promise gets that error, in its place in the order.
// After Close, promise is called at once with ErrClosed.
func (p *Producer) Produce(ctx context.Context, topic string, rec Record, promise func(Record, error)) {
	size := recordSize(&rec)
	cost := size
	if promise != nil {
		cost += keptSize(&rec)
	}
	var (
		dest     *v2Dest
		routeErr error
	)
	info := p.c.wireInfo()
	if info.version >= 2 && size <= info.maxBatchBytes {
		var table *routeTable
		table, routeErr = p.c.routes(ctx, topic)
		if errors.Is(routeErr, errNoV2) {
			routeErr = nil // the connection changed: wire v1
		} else if routeErr != nil {
			routeErr = opError("produce", topic, routeErr)
		} else {
			dest = &v2Dest{table: table, info: info, idx: table.index(rec.Key), size: size}
		}
	}
	p.mu.Lock()
	if routeErr == nil {
		cost, routeErr = p.waitRoomLocked(ctx, topic, cost, dest)
	}
	if p.closed || routeErr != nil {
		p.refuseLocked(topic, rec, promise, routeErr)
		return
	}
	p.buffered++
	p.bufferedBytes += cost
	t := p.topicLocked(topic)
	if dest != nil {
		p.addV2Locked(t, &rec, promise, cost, dest)
	} else {
		p.addV1Locked(t, rec, promise, cost)
	}
	p.mu.Unlock()
}

// waitRoomLocked waits until a record of cost bytes, going to dest with
// wire v2, fits in the buffer, the producer is closed, or ctx ends. It
// returns what the record costs the buffer, with the part it opens, if
// any (placeLocked, which leaves dest.into set as things stand when it
// returns).
//
// REQUIRES: p.mu held; it is held again on return.
func (p *Producer) waitRoomLocked(ctx context.Context, topic string, cost int, dest *v2Dest) (int, error) {
	for !p.closed {
		size := cost + p.placeLocked(topic, dest)
		if !p.fullLocked(size) {
			return size, nil
		}
		if goid() == p.promiser.Load() {
			return cost, fmt.Errorf("produce to %q: buffer full: %w", topic, ErrInPromise)
		}
		// Room comes only as batches are answered: a batch still filling
		// (a buffer smaller than MaxBatchBytes fills before it does)
		// goes now rather than at the end of its linger.
		for _, t := range p.topics {
			p.sealLocked(t)
		}
		p.pressed = true
		p.signalLocked(p.wake)
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
			p.mu.Lock()
		case <-ctx.Done():
			p.mu.Lock()
			return cost, fmt.Errorf("produce to %q: %w: %w", topic, ErrBufferFull, context.Cause(ctx))
		}
	}
	return cost, nil
}

// fullLocked reports whether a record of size bytes must wait for room.
func (p *Producer) fullLocked(size int) bool {
	if p.buffered >= p.opt.MaxBufferedRecords {
		return true
	}
	return p.buffered > 0 && p.bufferedBytes+size > p.opt.MaxBufferedBytes
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

// addV1Locked adds rec, of cost buffered bytes, to t's wire v1 batch,
// sealing as the limits say.
func (p *Producer) addV1Locked(t *topicState, rec Record, promise func(Record, error), cost int) {
	if rec.Timestamp.IsZero() {
		rec.Timestamp = time.Now() // the promise sees the time sent
	}
	w := toWire(&rec, rec.Timestamp)
	size := w.Size()
	if t.accumulating() {
		p.drainLocked(t) // wire v2 records produced before: they go first
	}
	if b := t.fill; b != nil && (b.n >= p.opt.MaxBatchRecords || b.bytes+size > p.opt.MaxBatchBytes) {
		p.sealLocked(t)
	}
	if t.fill == nil {
		p.openLocked(t)
	}
	b := t.fill
	w, b.arena = copyWire(w, b.arena)
	b.wrecs = append(b.wrecs, w)
	b.keep(rec, promise, cost)
	b.bytes += size
	if p.opt.Linger < 0 || b.n >= p.opt.MaxBatchRecords || b.bytes >= p.opt.MaxBatchBytes {
		p.sealLocked(t)
	}
}

// keep counts rec, of size bytes buffered, into b, and keeps a copy of it
// for its promise if it has one: the caller may have overwritten its
// buffers by the time the promise runs.
func (b *kept) keep(rec Record, promise func(Record, error), size int) {
	b.n++
	b.values += len(rec.Value)
	b.held += size
	if promise != nil {
		rec, b.parena = copyRecord(rec, b.parena)
		b.recs = append(b.recs, rec)
		b.promises = append(b.promises, promise)
	}
}

// keptSize is what keep holds for a record with a promise besides its
// encoding: the Record, its promise's slot, and the copies of its bytes
// and headers (a header's key is a string the copy shares, but keeps).
// Without it a buffer of small records with promises would take several
// times MaxBufferedBytes.
func keptSize(r *Record) int {
	n := int(unsafe.Sizeof(Record{})+unsafe.Sizeof(func(Record, error) {})) + len(r.Key) + len(r.Value)
	for i := range r.Headers {
		n += int(unsafe.Sizeof(Header{})) + len(r.Headers[i].Key) + len(r.Headers[i].Value)
	}
	return n
}

// copyRecord copies r's byte slices (and its Headers slice) into arena, a
// chunk shared by the promised records of a batch.
func copyRecord(r Record, arena []byte) (Record, []byte) {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Value)
	}
	if cap(arena)-len(arena) < n {
		arena = make([]byte, 0, max(n, 4<<10))
	}
	cp := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	r.Key, r.Value = cp(r.Key), cp(r.Value)
	if r.Headers != nil {
		hs := make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = Header{Key: h.Key, Value: cp(h.Value)}
		}
		r.Headers = hs
	}
	return r, arena
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
// called, or until ctx is done. Called from a promise, it returns
// ErrInPromise at once.
func (p *Producer) Flush(ctx context.Context) error {
	if goid() == p.promiser.Load() {
		return fmt.Errorf("flush: %w", ErrInPromise)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sealAllLocked()
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
		p.sealAllLocked() // records produced during the flush
	}
	return nil
}

// sealAllLocked seals every record buffered into requests for the sender.
func (p *Producer) sealAllLocked() {
	for _, t := range p.topics {
		p.sealLocked(t)
		if t.accumulating() {
			p.drainLocked(t)
		}
	}
}

// Close stops accepting records and flushes. If ctx ends first, batches
// not yet sent fail with ErrClosed and Close returns ctx's error; batches
// already sent still get their promises when their answers arrive.
// Either way Close returns only once the batches being compressed are
// (compression is CPU work, not a wait on the node), so that what they
// hold is handed back. Close does not close the Client. Called from a promise, it returns
// ErrInPromise at once and closes nothing. Later calls, and calls made
// while the first still flushes, wait for the first (or for their own
// ctx) and return what it returned.
func (p *Producer) Close(ctx context.Context) error {
	if goid() == p.promiser.Load() {
		return fmt.Errorf("close: %w", ErrInPromise)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		select {
		case <-p.closeDone:
			return p.closeErr
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(ctx)
	p.cancel()
	p.sender.Wait()
	p.compressing.Wait()
	p.mu.Lock()
	p.signalLocked(p.deliver) // let the promiser see it may exit
	p.mu.Unlock()
	if err == nil {
		<-p.done
	}
	p.closeErr = err
	close(p.closeDone)
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

// sealLocked closes t's filling wire v1 batch and queues it for the
// sender.
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
	p.enqueueLocked(t, b)
	p.sendq = append(p.sendq, b)
	p.signalLocked(p.wake)
}

// enqueueLocked gives b its place in t's seal order and in t's queue of
// promises, and starts compressing it.
func (p *Producer) enqueueLocked(t *topicState, b *batch) {
	t.sealed++
	b.seq = t.sealed
	t.queue = append(t.queue, b)
	if b.table != nil && p.opt.Compression != CompressionNone {
		// Compress now, off the lock and off the sender, so batches of
		// several topics (or several batches of one) compress in
		// parallel while earlier ones go out; the sender waits for it.
		b.finished = make(chan struct{})
		p.compressing.Go(func() {
			b.finish(p.opt.Compression)
			close(b.finished)
			if b.freeing.CompareAndSwap(true, false) {
				b.free() // released while compressing: see release
			}
		})
	}
}

// finish compresses the batches of b's parts into b.out, one after the
// other in one buffer, b.buf, and hands the parts' chunks back. b.bytes
// counts a header's room and more for each, and a batch that compressing
// does not shrink goes as it is, so the buffer does not grow.
func (b *batch) finish(codec Codec) {
	buf := batchfmt.Buffer(b.bytes)
	ends := make([]int, len(b.parts))
	for i, pt := range b.parts {
		var err error
		buf, err = pt.b.FinishTo(buf, batchfmt.Codec(codec), maxCompressionRatio)
		if err != nil {
			for _, rest := range b.parts[i+1:] {
				rest.b.Reset()
			}
			batchfmt.Release(buf)
			b.parts, b.finishErr = nil, batchError(err)
			return
		}
		ends[i] = len(buf)
	}
	out := make([]wire.RangeBatch, len(b.parts))
	start := 0
	for i, pt := range b.parts {
		out[i] = wire.RangeBatch{Range: b.table.ranges[pt.idx].Range, Batch: buf[start:ends[i]:ends[i]]}
		start = ends[i]
	}
	b.parts, b.out, b.buf = nil, out, buf
}

// batchError is the error of a batch Finish refuses.
func batchError(err error) error {
	if errors.Is(err, batchfmt.ErrTooLarge) {
		return fmt.Errorf("%w: %w", ErrRequestTooLarge, err)
	}
	return fmt.Errorf("malachi: %w", err)
}

// failLocked fails one record without sending it, after the records
// produced before it, so its promise keeps its place in the order.
func (p *Producer) failLocked(t *topicState, rec Record, promise func(Record, error), err error) {
	p.sealLocked(t)
	if t.accumulating() {
		p.drainLocked(t)
	}
	p.buffered++
	b := &batch{topic: t, opened: rec.Timestamp, resolved: true, err: err}
	b.keep(rec, promise, 0)
	t.queue = append(t.queue, b)
	p.popLocked(t)
}

// resolveLocked records a batch's outcome, frees its encoded records and
// releases any promises now due.
//
// REQUIRES: p.mu held.
func (p *Producer) resolveLocked(b *batch, err error) {
	b.release()
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
	if len(t.queue) == 0 && t.fill == nil && !t.accumulating() && p.topics[t.name] == t {
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

// promiseLoop runs promises in the order batches became due, one at a
// time, and frees their buffer space afterwards. It exits once the
// producer is closed and every record's promise has run.
func (p *Producer) promiseLoop() {
	defer close(p.done)
	p.promiser.Store(goid())
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
		n, held := 0, 0
		for _, b := range ready {
			for i := range b.recs {
				b.promises[i](b.recs[i], b.err)
			}
			n += b.n
			held += b.held
			if p.opt.OnBatch != nil {
				p.opt.OnBatch(BatchResult{Topic: b.topic.name, Records: b.n, ValueBytes: b.values, Opened: b.opened, Err: b.err})
			}
		}
		p.mu.Lock()
		p.buffered -= n
		p.bufferedBytes -= held
		p.pressed = false
		p.signalLocked(p.wake) // the sender may cut requests again
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}

// goid returns the id of the calling goroutine, from the first line of
// its stack trace ("goroutine 42 [running]:"). The producer uses it only
// where a call would otherwise wait for the goroutine making it (see
// ErrInPromise), so its cost, a microsecond or so, is paid off the
// producing path.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	var id uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			break
		}
		id = id*10 + uint64(ch-'0')
	}
	return id
}
