package segment

// Buffers lends a read the memory it reads into. Get returns a buffer of
// at least n bytes (its contents are not assumed zero); Put takes back one
// the read no longer needs, which the read then never touches again.
type Buffers interface {
	Get(n int) []byte
	Put(b []byte)
}

// heapBuffers allocates every buffer and takes none back: Read's buffers
// belong to its caller and the garbage collector.
type heapBuffers struct{}

func (heapBuffers) Get(n int) []byte { return make([]byte, n) }
func (heapBuffers) Put([]byte)       {}

// compactBelow: a result that fills less than 1/compactBelow of the lent
// buffer it was read into is copied into a buffer of its own size, and the
// large one goes back at once. Many ranges read a few small batches each through
// windows sized for the index interval and the read-ahead; the answer
// would otherwise hold every window until it is written.
const compactBelow = 4

// ReadInto is Read into memory lent by bufs. held is the buffer (from
// bufs.Get) that out lies in, which the caller now owns and gives back
// once nothing refers to out; it is nil when out is nil. Every other
// buffer the read took it has put back.
func (s *Segment) ReadInto(from uint64, maxBytes int, upTo uint64, bufs Buffers) (out, held []byte, next uint64, err error) {
	s.io.RLock()
	defer s.io.RUnlock()
	s.mu.RLock()
	d := s.durable
	pos, nextPos, ok, at := s.idx.lookupSpanAt(from)
	whole := int64(0) // see wholeEnd
	if ok && at {
		whole = s.idx.boundaryAtOrBelow(pos + int64(maxBytes))
	}
	s.mu.RUnlock()
	if !ok {
		pos, nextPos = FileHeaderSize, 0
	}
	limit := FileHeaderSize + d.Bytes
	if from >= d.End || from >= upTo || pos >= limit {
		return nil, nil, from, nil
	}
	if at {
		whole = wholeEnd(whole, pos, int64(maxBytes), limit, int64(s.interval))
	}
	peek := peekPast(whole, limit)
	known := int64(0)
	if at {
		known = s.knownBatch(pos, from, upTo, limit, maxBytes)
	}
	chunk := s.readChunk(maxBytes, pos, nextPos, limit, at, known)
	if whole > 0 {
		chunk = int(min(int64(chunk), whole+peek-pos))
	}
	// The window reads into wb and never grows it: each of its reads is
	// at most chunk bytes, none past limit, all from pos on.
	wb := bufs.Get(int(min(int64(chunk), limit-pos)))
	w := &window{f: s.f, size: limit, chunk: chunk, buf: wb[:0]}
	first, h, err := s.seek(w, pos, from)
	if err != nil || first < 0 || h.LastOffset() >= upTo {
		bufs.Put(wb)
		return nil, nil, from, err
	}
	span := min(int64(max(h.Length, maxBytes)), limit-first)
	tail := 0 // the peeked header's bytes at the end of the span
	if whole >= first+int64(h.Length) {
		// Never below the first batch: an index entry inside it (a
		// damaged .idx) must not make the read return nothing.
		span, tail = whole+peek-first, int(peek)
	}
	out, fresh, err := s.readSpan(w, first, span, bufs)
	if err != nil {
		bufs.Put(wb)
		return nil, nil, from, err
	}
	held = wb
	if fresh {
		bufs.Put(wb)
		held = out
	}
	cut, next, stop, err := s.cut(out, first, limit, upTo, tail)
	if err != nil || cut == 0 {
		bufs.Put(held)
		return nil, nil, from, err
	}
	if stop != nil {
		s.peeked.Store(stop)
	}
	out = out[:cut:cut]
	if _, heap := bufs.(heapBuffers); !heap && cap(held) >= compactBelow*cut {
		small := bufs.Get(cut)[:cut]
		copy(small, out)
		bufs.Put(held)
		out, held = small[:cut:cut], small
	}
	return out, held, next, nil
}

// wholeEnd is where a read from the indexed batch at pos, of at most
// maxBytes, ends on a batch boundary: the last indexed batch that starts
// within it (boundary, from Index.boundaryAtOrBelow), or the durable end
// when all of what is durable fits. 0 means the read is sized as before:
// no boundary past pos fits (the first batch is larger than maxBytes, and
// is read whole), or the boundary is less than two index intervals (and
// TrimAtLeast) short of maxBytes.
//
// Past the last boundary, an index entry would sit at the first batch
// starting an interval or more after it. So when maxBytes reaches two
// intervals past it, a batch starts less than an interval past it and
// runs beyond maxBytes: ending at the boundary leaves at most an interval
// of smaller batches that would have fitted (read by the next read), and
// saves reading an interval or more of a batch that would be dropped.
// (This assumes the index was built at the store's interval: a .idx kept
// from a run with a larger one can leave up to that interval instead.)
// Without it, over many ranges whose batches are a large part of a read
// (a range's share of a page, 256 KiB, against batches of 100-256 KiB),
// most reads ended inside a batch, read in part and left.
func wholeEnd(boundary, pos, maxBytes, limit, interval int64) int64 {
	switch {
	case pos+maxBytes >= limit:
		return limit
	case boundary > pos && pos+maxBytes-boundary >= max(2*interval, TrimAtLeast):
		return boundary
	}
	return 0
}

// peekPast is how far a read that ends on the batch boundary whole reads
// on: the next batch's header, when durable, so that the read learns
// whether that batch would fit the reader's next page (see peeked) and the
// reader need not ask for it with a read of its own. A read ended early
// has TrimAtLeast to spare, so the header stays within what it was asked.
func peekPast(whole, limit int64) int64 {
	if whole > 0 && whole+HeaderSize <= limit {
		return HeaderSize
	}
	return 0
}

// TrimAtLeast: a read is ended early only to save at least this much of a
// batch it would drop. Below it, the small batches the early end may
// leave cost the next read a system call, more than copying this much. A
// read that returns less than it was asked for by less than this was not
// ended early: it stopped at a batch that did not fit.
const TrimAtLeast = 32 << 10
