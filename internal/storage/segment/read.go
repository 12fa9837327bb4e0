package segment

import (
	"fmt"
	"io"
)

// Read returns whole stored batches, verbatim, starting with the batch
// that holds offset from (or the first batch after it, when from falls in
// a hole). The total is at most maxBytes, except that the first batch is
// always returned whole; no returned batch has LastOffset >= upTo; only
// durable bytes are read. next is the offset after the last returned batch,
// or from when none is returned. Every returned batch has passed its CRC;
// damage is reported wrapping ErrCorrupt.
func (s *Segment) Read(from uint64, maxBytes int, upTo uint64) ([]byte, uint64, error) {
	out, _, next, err := s.ReadInto(from, maxBytes, upTo, heapBuffers{})
	return out, next, err
}

// maxReadAhead bounds how much of a read the seek window takes on: past
// it, the rest is read into a buffer of the read's own size.
const maxReadAhead = 256 << 10

// readChunk sizes the seek window's first pread from the index point pos,
// so that a read usually costs one pread:
//
//   - it takes in what the caller asked for past the index point, so a
//     small read (many ranges sharing one page) needs no second one;
//   - and at least the bytes up to the next indexed batch (the durable
//     end past the last one), which hold the first batch the read
//     returns (see Index.LookupSpan). The caller's size is no guide to
//     that batch's: a page over many ranges asks each for a share (64 KiB
//     or less) of a page, while a producer's batch may be 256 KiB, and
//     the first batch is returned whole whatever its size. Sized by the
//     request alone, such a batch cost a second pread of all of it into a
//     fresh buffer.
//
// Both are bounded by maxReadAhead past the interval's walk (but see
// known, below); a batch larger than that costs a second pread of its
// remainder only (readSpan).
//
// When the batch at pos is the one the read starts with (at), there is
// no walk to allow for: a reader that took whole batches stands at a
// batch's base, which is often an indexed one, and the interval's
// allowance was then read past the end of what it asked for and dropped.
// When that batch's header is known (the last read of the segment
// stopped at it, peeked) and the read will return it, the window takes
// it whole, whatever its size: the read returns it whole, so nothing of
// it is read in vain. A producer's batch of 256 KiB of records is a few
// dozen bytes over maxReadAhead with its framing; bounded there, the
// window read the bound, copied it into a buffer of the batch's size and
// fetched the last bytes with a second pread (docs/perf.md, eighth
// round). Unknown, the batch is not sized from the index: the bytes up
// to the next index point may be a small batch and a large one the read
// does not return.
func (s *Segment) readChunk(maxBytes int, pos, next, limit int64, at bool, known int64) int {
	walk := s.interval + 2*HeaderSize
	if at {
		walk = 0
	}
	if next <= pos || next > limit {
		next = limit
	}
	ahead := max(int64(maxBytes), next-pos-int64(walk), 0)
	return walk + int(max(min(ahead, maxReadAhead), known))
}

// knownBatch is the length of the durable batch at file position pos
// whose base offset is from, when the last read of the segment stopped
// at it (peeked), a read up to upTo returns it, and it is larger than
// maxBytes, so that it is all the read returns; 0 otherwise. A read asked
// for more spans more than the batch: a window of the batch's size would
// still be copied into a buffer of the read's, only a larger copy.
func (s *Segment) knownBatch(pos int64, from, upTo uint64, limit int64, maxBytes int) int64 {
	h, ok := s.kept(pos, from, limit)
	if !ok || h.LastOffset() >= upTo || h.Length <= maxBytes {
		return 0
	}
	return int64(h.Length)
}

// kept is the header the last read of the segment stopped at (peeked),
// when it is that of the durable batch at file position pos whose base
// offset is from.
func (s *Segment) kept(pos int64, from uint64, limit int64) (BatchHeader, bool) {
	p := s.peeked.Load()
	if p == nil || p.pos != pos || p.h.BaseOffset != from || pos+int64(p.h.Length) > limit {
		return BatchHeader{}, false
	}
	return p.h, true
}

// readSpan returns the span bytes at first: a slice of the seek window when
// it holds them, else a buffer of span bytes from bufs that takes what the
// window holds of them and reads only the rest, so no byte is read twice.
// The window is the caller's alone, so handing out a slice of it is safe.
// fresh says the bytes are in a buffer of their own, not the window's.
func (s *Segment) readSpan(w *window, first, span int64, bufs Buffers) (out []byte, fresh bool, err error) {
	end := w.start + int64(len(w.buf))
	if first >= w.start && first+span <= end {
		off := first - w.start
		return w.buf[off : off+span : off+span], false, nil
	}
	out = bufs.Get(int(span))[:span]
	have := 0
	if first >= w.start && first < end {
		have = copy(out, w.buf[first-w.start:])
	}
	at := first + int64(have)
	if n, err := s.f.ReadAt(out[have:], at); n != len(out)-have {
		bufs.Put(out)
		return nil, false, fmt.Errorf("segment %d: read at %d: %w", s.id, at, readErr(err))
	}
	return out, true, nil
}

func readErr(err error) error {
	if err == nil || err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// seek walks batch headers from pos to the first batch whose last offset
// is >= from. It returns -1 when there is none before the window's end.
func (s *Segment) seek(w *window, pos int64, from uint64) (int64, BatchHeader, error) {
	for pos < w.size {
		hb, err := w.at(pos, HeaderSize)
		if err != nil {
			return -1, BatchHeader{}, s.corrupt(pos, shortOr(err))
		}
		h, err := ParseHeader(hb)
		if err != nil {
			return -1, h, s.corrupt(pos, err)
		}
		if pos+int64(h.Length) > w.size {
			return -1, h, s.corrupt(pos, ErrShortBatch)
		}
		if h.LastOffset() >= from {
			return pos, h, nil
		}
		pos += int64(h.Length)
	}
	return -1, BatchHeader{}, nil
}

// cut returns how many leading bytes of out (read from file position
// first) are whole, CRC-checked batches below upTo, and the offset after
// the last of them. A batch that would run past the end of out is left for
// the next read, unless it would also run past limit (the durable end):
// durable data always ends on a batch boundary, so that is damage. stop is
// the header of the batch left for want of room, with its position, when
// out holds that header (nil otherwise).
//
// The last peek bytes of out are only the header of the batch after the
// read (peekPast): the read did not ask for that batch, so damage in its
// header is left for the read that asks for it, which reports it, and the
// good batches before it are returned.
func (s *Segment) cut(out []byte, first, limit int64, upTo uint64, peek int) (int, uint64, *peekedHeader, error) {
	cut, next := 0, uint64(0)
	for len(out)-cut >= HeaderSize {
		peeked := peek > 0 && cut == len(out)-peek
		h, err := ParseHeader(out[cut:])
		switch {
		case err != nil && peeked:
			return cut, next, nil, nil
		case err != nil:
			return 0, 0, nil, s.corrupt(first+int64(cut), err)
		case h.LastOffset() >= upTo:
			return cut, next, nil, nil
		}
		if cut+h.Length > len(out) {
			switch {
			case first+int64(cut+h.Length) <= limit:
				return cut, next, &peekedHeader{pos: first + int64(cut), h: h}, nil
			case peeked:
				return cut, next, nil, nil
			}
			return 0, 0, nil, s.corrupt(first+int64(cut), ErrShortBatch)
		}
		if err := Verify(out[cut : cut+h.Length]); err != nil {
			return 0, 0, nil, s.corrupt(first+int64(cut), err)
		}
		cut += h.Length
		next = h.LastOffset() + 1
	}
	return cut, next, nil, nil
}

// corrupt wraps a problem found in stored bytes as ErrCorrupt, keeping the
// original reason in the message.
func (s *Segment) corrupt(pos int64, err error) error {
	return fmt.Errorf("%w: segment %d at byte %d: %v", ErrCorrupt, s.id, pos, err)
}

// SeekTime returns the base offset of the first durable batch whose
// MaxTimestamp is at least t, reading batch headers only: no record is
// read or decompressed. ok is false when no batch qualifies. Record
// timestamps are the clients' and need not grow with offsets, so batches
// are not ordered by time; the index's prefix maxima are, and name the one
// index interval that holds the answer (see Index.SeekTime), whose headers
// are then walked. A segment whose durable MaxTimestamp is below t is
// answered without reading the file.
func (s *Segment) SeekTime(t int64) (base uint64, ok bool, err error) {
	s.io.RLock()
	defer s.io.RUnlock()
	s.mu.RLock()
	d := s.durable
	pos := s.idx.SeekTime(t)
	s.mu.RUnlock()
	if d.Records == 0 || d.MaxTimestamp < t {
		return 0, false, nil
	}
	limit := FileHeaderSize + d.Bytes
	w := &window{f: s.f, size: limit, chunk: s.interval + 2*HeaderSize}
	for pos < limit {
		hb, err := w.at(pos, HeaderSize)
		if err != nil {
			return 0, false, s.corrupt(pos, shortOr(err))
		}
		h, err := ParseHeader(hb)
		if err != nil {
			return 0, false, s.corrupt(pos, err)
		}
		if h.MaxTimestamp >= t {
			return h.BaseOffset, true, nil
		}
		pos += int64(h.Length)
	}
	return 0, false, nil
}

// BatchHeaderAt returns the header of the durable batch whose base
// offset is from, when the index places one there (ok false otherwise:
// from lies inside a batch, at a batch the index skipped, or past the
// durable end). It reads that header only, and not even that when the
// last read of the segment stopped at that batch (peeked). A reader that
// cannot take a batch larger than what it has left asks first, rather
// than reading the whole batch (up to a producer's 256 KiB, and its CRC)
// only to leave it for its next page. Anything wrong with the header is
// left for the read that follows to report.
func (s *Segment) BatchHeaderAt(from uint64) (h BatchHeader, ok bool) {
	s.io.RLock()
	defer s.io.RUnlock()
	s.mu.RLock()
	d := s.durable
	pos, _, found, at := s.idx.lookupSpanAt(from)
	s.mu.RUnlock()
	limit := FileHeaderSize + d.Bytes
	if !found || !at || from >= d.End || pos+HeaderSize > limit {
		return BatchHeader{}, false
	}
	if h, ok := s.kept(pos, from, limit); ok {
		return h, true
	}
	var hb [HeaderSize]byte
	if got, _ := s.f.ReadAt(hb[:], pos); got != len(hb) {
		return BatchHeader{}, false
	}
	h, err := ParseHeader(hb[:])
	if err != nil || h.BaseOffset != from || pos+int64(h.Length) > limit {
		return BatchHeader{}, false
	}
	return h, true
}
