package broker

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// CursorAt returns a cursor positioned at the first record of each active
// range's history whose timestamp is at least atMs (unix ms): reading from
// it starts there and goes on through the rest of the lineage (a sealed
// parent's later records, then the range's own). A range with no such
// record is positioned at its end. Records carry the clients' timestamps,
// which need not grow with offsets; the first record in reading order
// that qualifies is the one chosen, so an earlier-stamped record after it
// is still read.
//
// Segments whose max timestamp is below atMs are skipped on their summary
// alone; in the segment that may hold the answer only batch headers are
// walked, and then the one batch found is decoded to place the cursor on
// the exact record.
func (b *Broker) CursorAt(topic string, atMs int64) (string, error) {
	return b.CursorAtContext(context.Background(), topic, atMs)
}

// CursorAtContext is CursorAt whose calls to other nodes end when ctx
// ends, or the broker closes.
func (b *Broker) CursorAtContext(ctx context.Context, topic string, atMs int64) (string, error) {
	ctx, cancel := b.readContext(ctx)
	defer cancel()
	topicID, err := b.topicID(topic)
	if err != nil {
		return "", err
	}
	plans, lin := b.plans(position{topicID: topicID})
	var entries []cursor.Entry
	for i := range plans {
		p := &plans[i]
		bits := p.slice.Log2Size()
		found := false
		for j := range p.sources {
			src := &p.sources[j]
			off, ok, err := b.firstAtOrAfter(ctx, src, atMs)
			if err != nil {
				return "", err
			}
			if ok {
				entries = cursor.Advance(entries, src.id, p.slice.Start, bits, off, lin.isAncestor)
				found = true
				break
			}
			// Nothing late enough in this source: it is done for the
			// range's slice. An explicit entry is needed because after a
			// merge an earlier source need not be an ancestor of a later
			// one, so the later one's entry would not imply it.
			end, err := b.durableEndOf(ctx, src)
			if err != nil {
				return "", err
			}
			entries = cursor.Advance(entries, src.id, p.slice.Start, bits, end, lin.isAncestor)
		}
		if !found {
			end, err := b.durableEndOf(ctx, p.self())
			if err != nil {
				return "", err
			}
			entries = cursor.Advance(entries, p.rangeID, p.slice.Start, bits, end, lin.isAncestor)
		}
	}
	return cursor.Encode(b.secret, cursor.Cursor{TopicID: topicID, Entries: entries}), nil
}

// readContext is ctx, ended also when the broker closes: a read on a
// client's behalf stops when either goes.
func (b *Broker) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.life, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// firstAtOrAfter returns the offset of the first durable record of src
// whose timestamp is at least atMs.
func (b *Broker) firstAtOrAfter(ctx context.Context, src *source, atMs int64) (uint64, bool, error) {
	for _, seg := range src.segments {
		info, err := b.segmentExtent(ctx, seg)
		if err != nil {
			if seg.Active && errors.Is(err, storage.ErrNotFound) {
				return 0, false, nil // registered a moment before its file: nothing durable yet
			}
			return 0, false, fmt.Errorf("broker: segment %d: %w", seg.ID, err)
		}
		if info.records == 0 || info.maxTimestamp < atMs {
			continue
		}
		base, ok, err := b.seekSegment(ctx, seg, atMs)
		if err != nil {
			return 0, false, fmt.Errorf("broker: seek segment %d by time: %w", seg.ID, err)
		}
		if !ok {
			continue
		}
		buf, _, err := b.readSegment(ctx, seg, base, 1, math.MaxUint64)
		if err != nil {
			return 0, false, fmt.Errorf("broker: read segment %d: %w", seg.ID, err)
		}
		batches, err := segment.SplitBatches(buf)
		if err != nil || len(batches) == 0 {
			return 0, false, fmt.Errorf("broker: segment %d at %d: no batch (%v)", seg.ID, base, err)
		}
		recs, err := segment.DecodeRecords(batches[0], nil)
		if err != nil {
			return 0, false, fmt.Errorf("broker: decode: %w", err)
		}
		for _, r := range recs {
			if r.Timestamp >= atMs {
				return r.Offset, true, nil
			}
		}
	}
	return 0, false, nil
}

// CursorFromEnd returns a cursor n records before the end of each active
// range's history, so a read from it returns the last n records of every
// range (all of a range's history when it holds fewer). The range's own
// records are counted back by offset; when n reaches into sealed
// ancestors, their records in the range's slice are counted by reading
// them, newest source first.
func (b *Broker) CursorFromEnd(topic string, n uint64) (string, error) {
	return b.CursorFromEndContext(context.Background(), topic, n)
}

// CursorFromEndContext is CursorFromEnd whose calls to other nodes end
// when ctx ends, or the broker closes.
func (b *Broker) CursorFromEndContext(ctx context.Context, topic string, n uint64) (string, error) {
	if n == 0 {
		return b.EndCursorContext(ctx, topic)
	}
	ctx, cancel := b.readContext(ctx)
	defer cancel()
	topicID, err := b.topicID(topic)
	if err != nil {
		return "", err
	}
	plans, lin := b.plans(position{topicID: topicID})
	var entries []cursor.Entry
	for i := range plans {
		p := &plans[i]
		bits := p.slice.Log2Size()
		at, off, err := b.fromEnd(ctx, p, n)
		if err != nil {
			return "", err
		}
		if at < 0 {
			continue // fewer than n records: no entry reads the whole history
		}
		for j := range at {
			src := &p.sources[j]
			end, err := b.durableEndOf(ctx, src)
			if err != nil {
				return "", err
			}
			entries = cursor.Advance(entries, src.id, p.slice.Start, bits, end, lin.isAncestor)
		}
		entries = cursor.Advance(entries, p.sources[at].id, p.slice.Start, bits, off, lin.isAncestor)
	}
	return cursor.Encode(b.secret, cursor.Cursor{TopicID: topicID, Entries: entries}), nil
}

// fromEnd finds where the last n records of a plan's history begin: the
// index of the source and the offset in it, or at = -1 when the history
// holds fewer than n records.
func (b *Broker) fromEnd(ctx context.Context, p *plan, n uint64) (at int, off uint64, err error) {
	// Each source holds at most end-base records of the slice: when even
	// that bound does not exceed n, the whole history qualifies and
	// nothing needs reading, however large n is.
	ends := make([]uint64, len(p.sources))
	var bound uint64
	for j := range p.sources {
		src := &p.sources[j]
		if ends[j], err = b.durableEndOf(ctx, src); err != nil {
			return 0, 0, err
		}
		if base := sourceBase(src); ends[j] > base {
			bound += ends[j] - base
		}
	}
	if bound <= n {
		return -1, 0, nil
	}
	remaining := n
	for j := len(p.sources) - 1; j >= 0; j-- {
		src := &p.sources[j]
		base, end := sourceBase(src), ends[j]
		if end <= base {
			continue
		}
		if src.id == p.rangeID {
			// Every record of the range itself is in its slice, at
			// consecutive offsets.
			if end-base >= remaining {
				return j, end - remaining, nil
			}
			remaining -= end - base
			continue
		}
		var m uint64
		if err := b.scanSlice(p, src, base, end, func(uint64, uint64) bool { m++; return true }); err != nil {
			return 0, 0, err
		}
		if m < remaining {
			remaining -= m
			continue
		}
		// The first of the last `remaining` records in the slice is the
		// (m-remaining)th, counting from 0.
		skip := m - remaining
		err := b.scanSlice(p, src, base, end, func(_, offset uint64) bool {
			if skip == 0 {
				off = offset
				return false
			}
			skip--
			return true
		})
		return j, off, err
	}
	return -1, 0, nil
}
