package server

import (
	"context"
	"sync"
)

// byteBudget bounds the memory one connection holds for its client:
// answers queued for the writer (or being written), and room reserved by
// fetches that are still being worked on. Slots bound how many answers a
// connection may owe; the budget bounds how large they may be together.
//
// A fetch's answer can be megabytes, and its size is only known once the
// broker has read it — by then the memory is spent. So a fetch reserves
// the largest answer it could produce before it starts, and trades the
// reservation for its real size when its answer is queued. It may start
// when that reservation fits in what is left, or when the connection
// holds nothing at all: one answer larger than the whole budget is still
// sent, alone. What a connection holds therefore stays within the budget,
// plus at most one answer that is larger than its reservation.
//
// The reader stops admitting requests while queued answers alone fill the
// budget; only the client reading them frees it. Reservations do not stop
// the reader: a long poll holds its reservation while it waits, and
// produces on the same connection go on meanwhile.
type byteBudget struct {
	limit int64

	mu       sync.Mutex
	reserved int64         // room held by running fetches
	queued   int64         // answers handed to the writer and not yet written
	peak     int64         // the most reserved+queued has been, for tests
	waiting  int           // goroutines blocked in wait, for tests
	freed    chan struct{} // closed when bytes are given back; nil if no one waits
}

func newByteBudget(limit int64) *byteBudget { return &byteBudget{limit: limit} }

// fits reports whether n more bytes may be held: within the limit, or
// alone.
func (b *byteBudget) fits(n int64) bool {
	held := b.reserved + b.queued
	return held == 0 || held+n <= b.limit
}

// wait blocks until ok holds (checked under the lock), then runs then
// under the same lock. It reports false if ctx ends or stop closes first.
func (b *byteBudget) wait(ctx context.Context, stop <-chan struct{}, ok func() bool, then func()) bool {
	b.mu.Lock()
	for !ok() {
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.waiting++
		b.mu.Unlock()
		var ended bool
		select {
		case <-freed:
		case <-ctx.Done():
			ended = true
		case <-stop:
			ended = true
		}
		b.mu.Lock()
		b.waiting--
		if ended {
			b.mu.Unlock()
			return false
		}
	}
	then()
	b.noteLocked()
	b.mu.Unlock()
	return true
}

// room waits until the queued answers leave room for another request.
func (b *byteBudget) room(ctx context.Context, stop <-chan struct{}) bool {
	return b.wait(ctx, stop, func() bool { return b.queued < b.limit }, func() {})
}

// reserve waits until n bytes fit and holds them for a running fetch.
func (b *byteBudget) reserve(ctx context.Context, stop <-chan struct{}, n int64) bool {
	return b.wait(ctx, stop, func() bool { return b.fits(n) }, func() { b.reserved += n })
}

// queueWhenFits waits until an answer of n bytes fits, then counts it
// queued: for frames whose bytes already exist and that may wait, such as
// subscription pushes.
func (b *byteBudget) queueWhenFits(ctx context.Context, stop <-chan struct{}, n int64) bool {
	return b.wait(ctx, stop, func() bool { return b.fits(n) }, func() { b.queued += n })
}

// settle trades a reservation for an answer of n bytes, queued now.
// Either may be zero: an answer nothing was reserved for is counted as
// it is queued, which never blocks (produce answers are queued from the
// segment store's commit goroutine).
func (b *byteBudget) settle(reserved, n int64) {
	b.mu.Lock()
	b.reserved -= reserved
	b.queued += n
	b.noteLocked()
	if reserved > n {
		b.wakeLocked()
	}
	b.mu.Unlock()
}

// written gives back an answer's n bytes once the writer is done with it.
func (b *byteBudget) written(n int64) {
	b.mu.Lock()
	b.queued -= n
	b.wakeLocked()
	b.mu.Unlock()
}

func (b *byteBudget) noteLocked() {
	b.peak = max(b.peak, b.reserved+b.queued)
}

func (b *byteBudget) wakeLocked() {
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
}

// snapshot returns the gauges tests read: bytes held now, the most ever
// held, and how many goroutines wait for room.
func (b *byteBudget) snapshot() (held, peak int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reserved + b.queued, b.peak, b.waiting
}

// fetchPageBytes is the broker's default page size (broker.Config
// FetchMaxBytes): a page stops once its records pass it, so it can hold
// that much plus one more record.
const fetchPageBytes = 1 << 20

// fetchReserve is the largest answer a fetch can produce: a page, plus
// one more record (no larger than a produce frame), plus the cursor and
// the framing.
func fetchReserve(maxFrame uint32) int64 {
	return fetchPageBytes + int64(maxFrame) + 64<<10
}
