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
	s.io.RLock()
	defer s.io.RUnlock()
	s.mu.RLock()
	d := s.durable
	pos, ok := s.idx.Lookup(from)
	s.mu.RUnlock()
	if !ok {
		pos = FileHeaderSize
	}
	limit := FileHeaderSize + d.Bytes
	if from >= d.End || from >= upTo || pos >= limit {
		return nil, from, nil
	}
	// The seek window also reads what the caller asked for past the index
	// point, so a small read (many ranges sharing one page) costs one
	// pread instead of two.
	w := &window{f: s.f, size: limit, chunk: s.interval + 2*HeaderSize + min(max(maxBytes, 0), maxReadAhead)}
	first, h, err := s.seek(w, pos, from)
	if err != nil || first < 0 || h.LastOffset() >= upTo {
		return nil, from, err
	}
	span := min(int64(max(h.Length, maxBytes)), limit-first)
	out, err := s.readSpan(w, first, span)
	if err != nil {
		return nil, from, err
	}
	cut, next, err := s.cut(out, first, limit, upTo)
	if err != nil {
		return nil, from, err
	}
	if cut == 0 {
		return nil, from, nil
	}
	return out[:cut:cut], next, nil
}

// maxReadAhead bounds how much of a read the seek window takes on: past
// it, the bytes are read into a buffer of their own size.
const maxReadAhead = 256 << 10

// readSpan returns the span bytes at first: a slice of the seek window when
// it holds them, else a fresh read. The window is the caller's alone, so
// handing out a slice of it is safe.
func (s *Segment) readSpan(w *window, first, span int64) ([]byte, error) {
	if first >= w.start && first+span <= w.start+int64(len(w.buf)) {
		off := first - w.start
		return w.buf[off : off+span : off+span], nil
	}
	out := make([]byte, span)
	if n, err := s.f.ReadAt(out, first); int64(n) != span {
		return nil, fmt.Errorf("segment %d: read at %d: %w", s.id, first, readErr(err))
	}
	return out, nil
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
// durable data always ends on a batch boundary, so that is damage.
func (s *Segment) cut(out []byte, first, limit int64, upTo uint64) (int, uint64, error) {
	cut, next := 0, uint64(0)
	for len(out)-cut >= HeaderSize {
		h, err := ParseHeader(out[cut:])
		if err != nil {
			return 0, 0, s.corrupt(first+int64(cut), err)
		}
		if h.LastOffset() >= upTo {
			break
		}
		if cut+h.Length > len(out) {
			if first+int64(cut+h.Length) > limit {
				return 0, 0, s.corrupt(first+int64(cut), ErrShortBatch)
			}
			break
		}
		if err := Verify(out[cut : cut+h.Length]); err != nil {
			return 0, 0, s.corrupt(first+int64(cut), err)
		}
		cut += h.Length
		next = h.LastOffset() + 1
	}
	return cut, next, nil
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
