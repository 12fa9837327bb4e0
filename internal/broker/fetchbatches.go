package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// BatchPage is one fetch answer of wire v2: stored batches, every record
// of which is for the reader.
type BatchPage struct {
	Batches []RangeBatch
	Cursor  *string
	// Skipped and SkippedBound are Page's.
	Skipped      uint64
	SkippedBound bool
	// hold keeps the pooled buffers Batches lie in (Release).
	hold *readHold
}

// FetchBatchesRequest is a FetchRequest bounded in bytes: MaxBytes bounds
// the page (clamped to FetchMaxBytes; the first batch is whole
// regardless) and Max, when positive, bounds the records exactly: the
// page ends inside a batch rather than pass it.
type FetchBatchesRequest struct {
	FetchRequest
	MaxBytes int
}

// FetchBatches returns the next page of a topic as stored batches. A
// batch goes out as stored when every record in it is for the reader (the
// usual case: a range read from a batch boundary). A batch that holds
// records the reader must not get (another key slice of a split or
// merged ancestor, or records before the reader's position) is decoded,
// filtered and re-encoded uncompressed at the same offsets. Unlike Fetch,
// an unknown topic is an error (ErrNoSuchTopic), not an empty page.
func (b *Broker) FetchBatches(ctx context.Context, req FetchBatchesRequest) (BatchPage, error) {
	var (
		out  []RangeBatch
		hold *readHold
	)
	maxBytes := b.cfg.FetchMaxBytes
	if req.MaxBytes > 0 {
		maxBytes = min(req.MaxBytes, maxBytes)
	}
	maxRecords := req.Max
	if maxRecords <= 0 {
		maxRecords = 1 << 30
	}
	var sk skips
	pos, err := b.poll(ctx, req.FetchRequest, func(pos *position, at seen) (bool, error) {
		before := pos.entries
		defer func() { sk.add(b.skipsBetween(pos.topicID, before, pos.entries)) }()
		bg := budget{records: maxRecords, bytes: maxBytes}
		hold.release() // an earlier read of this poll found nothing to keep
		if !at.woke {
			var (
				cut bool
				err error
			)
			out, *pos, cut, hold, err = b.readBatchPage(ctx, *pos, bg, at)
			return len(out) > 0 || cut, err
		}
		page, after, err := at.w.readShared(at, pageKey(pageBatches, *pos, maxRecords, maxBytes), func() (any, position, int, error) {
			out, after, cut, hold, err := b.readBatchPage(ctx, *pos, bg, at)
			return cutPage[RangeBatch]{out, cut, hold}, after, batchesSize(out), err
		})
		res, _ := page.(cutPage[RangeBatch])
		out, hold, *pos = res.items, res.hold, after
		return len(out) > 0 || res.cut, err
	})
	if err != nil && pos.topicID == 0 {
		hold.release()
		return BatchPage{}, err
	}
	page := b.page(pos, nil)
	b.keepCursor(req.FetchRequest, pos, page.Cursor)
	return BatchPage{Batches: out, Cursor: page.Cursor, Skipped: sk.n, SkippedBound: sk.bound, hold: hold}, err
}

// readBatchPage reads whole batches across the reader's ranges (see
// pageRead.fill). A first pass gives each range visited an equal share of
// the records and bytes, and lets a range take its first batch if it fits
// what the page has left, so one busy range cannot starve the others; a
// second lets the ranges that have more fill the rest. Pages take turns
// over the ranges, so batches larger than a share do not favour the first
// range either.
//
// Bytes: a range passes its share by at most one batch (its first of the
// page, taken only if the page has room for it), and the page passes
// total.bytes only with its first batch, when that alone is larger. The
// store's reads are bounded likewise: each asks for at most what is left
// (segmentRead at most) and returns more only to make its first batch
// whole, and the page ends at the first batch it has no room for.
//
// The batches lie in pooled buffers that the returned hold keeps (nil when
// the page is empty); its taker releases it. An empty page answers as
// readPage's does.
func (b *Broker) readBatchPage(ctx context.Context, pos position, total budget, at seen) ([]RangeBatch, position, bool, *readHold, error) {
	pr, plans, first := b.startPage(ctx, pos, at)
	if len(plans) == 0 {
		return nil, pos, false, nil, nil
	}
	pr.hold = &readHold{}
	var out []RangeBatch
	shareBytes := share(total.bytes, len(plans), pr.carried)
	shareRecords := share(total.records, len(plans), pr.carried)
	roomless := false
	err := pr.fill(plans, first, func() bool { return total.spent() || pr.cut || roomless }, func(p *plan, pass int) (walkEnd, error) {
		bg := budget{records: total.records, bytes: total.bytes, hardRecords: total.records}
		if pass == 0 {
			bg.records, bg.bytes, bg.firstBytes = min(shareRecords, total.records), min(shareBytes, total.bytes), total.bytes
		}
		before := bg
		var (
			end walkEnd
			err error
		)
		pr.refused = 0
		out, end, err = walkRange(pr, p, &bg, out, b.readSourceBatches)
		total.records -= before.records - bg.records
		total.bytes -= before.bytes - bg.bytes
		// A batch read and left because the page has no room for it ends
		// the page: the other ranges' batches come from the same producers
		// and are most likely as large, and each would cost a read of its
		// size only to be left too (otherwise, with batches of 64-256 KiB,
		// a page of 1 MiB over 64 ranges reads several times what it
		// returns).
		roomless = pr.refused > total.bytes
		return end, err
	})
	if err != nil || len(out) == 0 {
		// Nothing read is kept: a batch taken into no page, or a page
		// that failed, refers to no buffer once this returns.
		pr.hold.release()
		if err != nil {
			return nil, pos, false, nil, err
		}
		return nil, pr.after(pos), pr.cut, nil, pr.endUnknown(0)
	}
	return out, pr.after(pos), pr.cut, pr.hold, nil
}

// readSourceBatches is readSource for whole batches.
func (b *Broker) readSourceBatches(pr *pageRead, p *plan, src *source, entries []cursor.Entry, start uint64, bg *budget, out []RangeBatch) (uint64, bool, []RangeBatch, error) {
	f := newBatchFilter(p, src, entries, pr.lin, pr.now)
	f.memo = &pr.reads.expiries
	f.filtered = &b.stats.ttlFiltered
	for _, seg := range src.segments {
		f.seg = seg.ID
		if !seg.Active && seg.End <= start {
			continue
		}
		start = max(start, seg.Base) // below Base: a hole retention or compaction left
		for !bg.spent() {
			if bg.took && f.last > bg.bytes {
				// The next batch is most likely as large as the last, which
				// would not fit: reading it only to leave it for the next
				// page would cost a read of its size.
				bg.full = true
				break
			}
			if n, no := b.wontFit(pr, f, seg, start, bg, len(out) > 0); no {
				bg.full, f.refused = true, n
				pr.refused = max(pr.refused, n)
				break
			}
			asked, left := min(bg.bytes, segmentRead), bg.bytes
			buf, rb, _, err := b.readSegmentPooled(pr.ctx, seg, start, asked, ^uint64(0))
			pr.hold.add(rb)
			switch {
			case seg.Active && errors.Is(err, storage.ErrNotFound):
				return start, false, out, nil // registered a moment before its file exists
			case errors.Is(err, storage.ErrNotFound):
				return start, false, out, segmentGone(seg.ID, err)
			case err != nil:
				return start, false, out, readFailed(seg.ID, err)
			}
			if len(buf) == 0 {
				break
			}
			out, start, err = f.add(buf, start, bg, out)
			pr.refused = max(pr.refused, f.refused)
			pr.largest = max(pr.largest, f.last)
			if err != nil {
				return start, false, out, err
			}
			if pr.scanned(len(buf), bg) {
				return start, false, out, nil
			}
			if asked == left && left-bg.bytes == len(buf) && len(buf) < asked {
				// The read had the whole budget and every byte of it was
				// taken as stored, so it stopped short at a batch larger
				// than what is left: reading that batch now would only
				// leave it for a later page.
				if size, no := b.nextWontFit(seg, start, bg, asked-len(buf)); no {
					bg.full = true
					pr.refused = max(pr.refused, size)
					break
				}
			}
		}
		if bg.spent() || seg.Active {
			return start, false, out, nil
		}
		start = max(start, seg.End)
	}
	return max(start, src.trimmed), !src.active, out, nil
}

// wontFit says the batch of seg based at start, the next this range
// would give the page, is one it would leave for want of room, and its
// size: the store's index places a batch at start, and its header says
// it is larger than what the range may still take. Reading it only to
// leave it cost a read of its size and its CRC, most pages over many
// ranges: with batches of 100-256 KiB, a range's share or the page's
// last room is often smaller than the next batch, and each range visited
// is asked on its own. At one range, a page's second pass read one more
// batch of 256 KiB only to leave it (70 MB more than a 284 MB consume
// delivered).
//
// The store is asked only when the page holds a batch already (its first
// is taken whatever its size), what the range may take is less than a
// batch the page has seen (else the next one most likely fits, and the
// question would cost a read of its own), and the batch would go out as
// stored: whole to this reader, no TTL to filter, not cut to the page's
// record bound. A copy bounded by a watermark it learns from others is
// never asked about, as in nextWontFit.
func (b *Broker) wontFit(pr *pageRead, f *batchFilter, seg metadata.Segment, start uint64, bg *budget, pageHolds bool) (int, bool) {
	limit := bg.bytes
	if !bg.took {
		limit = max(limit, bg.firstBytes)
	}
	if !pageHolds || limit >= pr.largest || !f.ok || start < f.whole {
		return 0, false
	}
	h, ok := b.localHeaderAt(seg, start)
	if !ok || !leftAsStored(h, limit, bg) {
		return 0, false
	}
	return h.Length, true
}

// localHeaderAt is the header of seg's batch based at start, read from
// this node's copy (Store.BatchHeaderAt): only a complete copy held here
// that needs no watermark from others (sealed, or active and not
// replicated) is asked; ok is false for any other, or when the index
// places no batch at start.
func (b *Broker) localHeaderAt(seg metadata.Segment, start uint64) (segment.BatchHeader, bool) {
	if seg.Active && replicated(seg) || !b.holds(seg) || !b.copyComplete(seg) {
		return segment.BatchHeader{}, false
	}
	return b.store.BatchHeaderAt(storage.SegmentID(seg.ID), start)
}

// leftAsStored says the batch with header h would go out as stored and
// be left for want of room: larger than limit, not cut to the page's
// record bound, and holding no expiring records (which may be passed over
// or filtered down).
func leftAsStored(h segment.BatchHeader, limit int, bg *budget) bool {
	return h.Length > limit && int(h.RecordCount) <= bg.hard() && !h.HasExpiry()
}

// nextWontFit says the batch of seg at offset next, which a read that
// stopped short of its budget left out, would be left again by the next
// read: the budget took a batch already, no batch can pass its record
// bound (a stored batch holds fewer records than bytes), and seg holds a
// durable batch from next on, so the read stopped at a batch that did
// not fit, not at the end. A copy bounded by a watermark it learns from
// others is never answered for here: it reads on as before.
//
// A read may also stop short at an indexed batch that would fit: one
// ended early on an index boundary (segment.wholeEnd) leaves up to an
// index interval of small batches for the next read. Only a read short
// by segment.TrimAtLeast or more (short) may have been, and it ends at an
// indexed batch, so a copy held here is then asked for that batch's
// header, which says; a batch the index skipped means the read was not
// ended early. A sealed copy read from another node keeps the inference,
// and may end a range's visit up to an interval early.
//
// It also returns the size to count as refused: the batch's, when its
// header was read, else one more than what is left.
func (b *Broker) nextWontFit(seg metadata.Segment, next uint64, bg *budget, short int) (int, bool) {
	switch {
	case !bg.took || bg.spent() || bg.hard() < segment.MaxBatchSize:
		return 0, false
	case seg.Active && (replicated(seg) || !b.holds(seg)):
		return 0, false
	}
	if short >= segment.TrimAtLeast {
		if h, ok := b.localHeaderAt(seg, next); ok {
			return h.Length, leftAsStored(h, bg.bytes, bg)
		}
	}
	if !seg.Active {
		return bg.bytes + 1, next < seg.End
	}
	_, durable, err := b.store.Ends(storage.SegmentID(seg.ID))
	return bg.bytes + 1, err == nil && next < durable
}

// batchFilter decides, batch by batch, what of one source a reader gets.
type batchFilter struct {
	p       *plan
	src     *source
	entries []cursor.Entry
	lin     lineage
	// whole is the offset from which a batch of src can go out as stored:
	// src is the range being read (so every key is in the slice), no
	// descendant has consumed part of it, and no entry of the reader
	// reaches past it.
	whole uint64
	ok    bool
	last  int // the stored size of the last batch seen
	// now is the page's clock for the TTL filter (unix ms); memo holds
	// the earliest expiries of the topic's batches, seg is the segment
	// being read.
	now  int64
	memo *expiryMemo
	seg  uint64
	// filtered counts the records passed over as expired (stats.go).
	filtered *atomic.Uint64
	// refused is the size of the batch left for a later page because it
	// did not fit the budget (0 when none was).
	refused int
}

func newBatchFilter(p *plan, src *source, entries []cursor.Entry, lin lineage, nowMs int64) *batchFilter {
	f := &batchFilter{p: p, src: src, entries: entries, lin: lin, ok: src.id == p.rangeID, now: nowMs}
	for _, e := range entries {
		switch {
		case e.Source == src.id:
			f.whole = max(f.whole, e.Offset)
		case lin.isAncestor(src.id, e.Source):
			f.ok = false
		}
	}
	return f
}

// add appends the batches of one read to out, whole or filtered, and
// returns the offset after the last one taken. The first batch of a page
// is taken whatever its size, and a range's first batch of a page if it
// fits bg.firstBytes; after that, a batch that would overrun the byte
// budget marks the budget full and is left for the next page.
func (f *batchFilter) add(buf []byte, start uint64, bg *budget, out []RangeBatch) ([]RangeBatch, uint64, error) {
	// Walked in place rather than split first: a page over many ranges
	// holds hundreds of small batches, and each header is parsed once.
	for rest := buf; len(rest) > 0; {
		h, err := segment.ParseHeader(rest)
		if err != nil {
			return out, start, err
		}
		if h.Length > len(rest) {
			return out, start, segment.ErrShortBatch
		}
		batch := rest[:h.Length:h.Length]
		rest = rest[h.Length:]
		f.last = len(batch)
		// A batch without the expiry flag costs nothing more here; one
		// whose records have all expired is passed over like another
		// slice's, and one holding some expired records is filtered.
		ex, err := expiryOf(f.memo, batchAt{seg: f.seg, base: h.BaseOffset}, batch, h, f.now)
		if err != nil {
			return out, start, fmt.Errorf("broker: segment of range %d: %w", f.src.id, err)
		}
		if ex == expiryAll {
			f.filtered.Add(uint64(h.RecordCount))
			start = h.LastOffset() + 1
			continue
		}
		// Served as stored when every record is the reader's. The CRC is
		// not checked again here: readSegment returns only batches that
		// passed it (the store checks what it reads, and what another node
		// sends is checked on arrival).
		kept, n := batch, int(h.RecordCount)
		if !f.ok || h.BaseOffset < max(start, f.whole) || ex == expirySome {
			if kept, n, err = f.filter(batch, start); err != nil {
				return out, start, fmt.Errorf("broker: segment of range %d: %w", f.src.id, err)
			}
		}
		if n == 0 {
			// Nothing here for this reader (another slice's records):
			// like a v1 page, only what is delivered counts; a page is
			// empty only at the end of what the reader can have, or when
			// the page's scan bound cut it (pageRead.scanned).
			start = h.LastOffset() + 1
			continue
		}
		next := h.LastOffset() + 1
		if hard := bg.hard(); n > hard {
			// The page may hold only hard more records: it ends inside
			// this batch, whose head is re-encoded.
			if kept, n, next, err = cutBatch(kept, hard); err != nil {
				return out, start, fmt.Errorf("broker: segment of range %d: %w", f.src.id, err)
			}
			bg.full = true
		}
		limit := bg.bytes
		if !bg.took {
			limit = max(limit, bg.firstBytes)
		}
		if len(out) > 0 && len(kept) > limit {
			bg.full, f.refused = true, len(kept)
			return out, start, nil
		}
		start = next
		out = append(out, RangeBatch{Range: f.src.id, Batch: kept})
		bg.took = true
		bg.taken += n
		bg.records -= n
		bg.bytes -= len(kept)
		if bg.spent() {
			return out, start, nil
		}
	}
	return out, start, nil
}

// cutBatch re-encodes the first n records of batch, and returns the offset
// of the first record left out.
func cutBatch(batch []byte, n int) ([]byte, int, uint64, error) {
	recs, err := segment.DecodeRecords(batch, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	out, err := segment.EncodeBatchAt(nil, recs[:n], segment.CodecNone)
	return out, n, recs[n].Offset, err
}

// filter decodes a batch and re-encodes the records the reader gets:
// those of its slice, past its position, and not expired.
func (f *batchFilter) filter(batch []byte, start uint64) ([]byte, int, error) {
	recs, err := segment.DecodeRecords(batch, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("broker: decode: %w", err)
	}
	self := f.src.id == f.p.rangeID
	kept := recs[:0]
	for _, r := range recs {
		pos := f.src.span.Start // records without a key belong to the source's first position
		if r.Key != nil {
			pos = keyspace.Position(r.Key, f.p.bits)
		}
		if r.Offset >= start && expired(&r, f.now) {
			f.filtered.Add(1)
		}
		if r.Offset < start || expired(&r, f.now) || (!self && !f.p.slice.Contains(pos)) ||
			cursor.Consumed(f.entries, f.src.id, pos, r.Offset, f.lin.isAncestor) {
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		return nil, 0, nil
	}
	out, err := segment.EncodeBatchAt(nil, kept, segment.CodecNone)
	return out, len(kept), err
}

// segmentRead bounds one read of a segment for a page: the store reads a
// request of up to 256 KiB (its read-ahead) with the one pread that finds
// the first batch, where a larger one costs that pread and a second,
// larger buffer.
const segmentRead = 256 << 10

func batchesSize(bs []RangeBatch) int {
	n := 0
	for _, b := range bs {
		n += len(b.Batch)
	}
	return n
}
