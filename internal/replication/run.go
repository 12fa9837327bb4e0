package replication

import (
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/internal/batch"
)

// ErrBadRun is returned for batches that do not tile the offsets they
// claim: a header that does not parse, a batch cut short, or a batch that
// does not start where the one before it ended.
var ErrBadRun = errors.New("replication: batches do not tile their offsets")

// Span is the offsets [Base, End) of one appended batch.
type Span struct{ Base, End uint64 }

// splitRun cuts buf, concatenated batches, into one slice per batch and
// checks that they tile [base, end) exactly. Only the headers are read:
// the store verifies each batch's CRC when it appends it (S1).
func splitRun(buf []byte, base uint64) (parts [][]byte, end uint64, err error) {
	end = base
	for len(buf) > 0 {
		n, next, err := nextBatch(buf, end)
		if err != nil {
			return nil, base, err
		}
		parts = append(parts, buf[:n:n])
		buf, end = buf[n:], next
	}
	return parts, end, nil
}

// runEnd checks buf like splitRun, without cutting it, and returns the
// end its batches reach from base.
func runEnd(buf []byte, base uint64) (uint64, error) {
	end := base
	for len(buf) > 0 {
		n, next, err := nextBatch(buf, end)
		if err != nil {
			return base, err
		}
		buf, end = buf[n:], next
	}
	return end, nil
}

// nextBatch checks the batch buf starts with, due at offset at, and
// returns its length in bytes and the offset after it.
func nextBatch(buf []byte, at uint64) (int, uint64, error) {
	h, err := batch.ParseHeader(buf)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", ErrBadRun, err)
	}
	if len(buf) < h.Length {
		return 0, 0, fmt.Errorf("%w: a batch of %d bytes with %d left", ErrBadRun, h.Length, len(buf))
	}
	if h.BaseOffset != at {
		return 0, 0, fmt.Errorf("%w: a batch at %d where %d was due", ErrBadRun, h.BaseOffset, at)
	}
	return h.Length, h.LastOffset() + 1, nil
}

// queue is a FIFO over a slice: popping from the front costs nothing, and
// the slice is compacted once half of it is popped, so a long-lived queue
// neither copies on every pop nor keeps its popped items.
type queue[T any] struct {
	items []T
	head  int
}

func (q *queue[T]) push(v T) { q.items = append(q.items, v) }
func (q *queue[T]) len() int { return len(q.items) - q.head }
func (q *queue[T]) all() []T { return q.items[q.head:] }
func (q *queue[T]) front() T { return q.items[q.head] }
func (q *queue[T]) clear()   { clear(q.items); q.items, q.head = q.items[:0], 0 }
func (q *queue[T]) pop(n int) {
	clear(q.items[q.head : q.head+n])
	q.head += n
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 32 && q.head*2 > len(q.items) {
		q.items = q.items[:copy(q.items, q.items[q.head:])]
		q.head = 0
	}
}

// spanOf is how many offsets the batch b, already checked by splitRun,
// spans.
func spanOf(b []byte) uint64 {
	h, _ := batch.ParseHeader(b)
	return uint64(h.LastOffsetDelta) + 1
}
