package segment

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// ErrNotBoundary: a cut was asked at an offset where no batch ends, so
// cutting there would either split a batch or leave the segment ending
// somewhere else than asked.
var ErrNotBoundary = errors.New("not a batch boundary")

// Cut is a planned truncation: where the file is cut and what the segment
// holds below that point, worked out from the file's bytes. It is applied
// with ApplyCut, which refuses it if the segment was written or cut since.
type Cut struct {
	End uint64 // the segment's end after the cut
	Pos int64  // the file size after the cut
	// seg, cuts and from name the file's content when the plan was made:
	// the segment, how many cuts it had applied, and what it had written.
	// Appends only add bytes and only cuts remove them, so the same
	// written stats and the same count of cuts mean the same bytes. The
	// file size alone does not: cuts and appends can bring it back to the
	// plan's size with other batches in it.
	seg   *Segment
	cuts  uint64
	from  Stats
	stats Stats
	idx   Index
	hash  *xxhash.Digest
}

// PlanCut plans cutting the segment back to end, which must be its base
// or the end (last offset + 1) of one of its batches: the segment then
// ends exactly at end. Everything written must be durable, and the caller
// must not append until the cut is applied or dropped. The batches kept
// are read and verified to rebuild the index, the counts and the content
// hash, which cannot be rolled back: the footer of a cut segment must be
// the footer of a segment that never held the cut batches.
func (s *Segment) PlanCut(end uint64) (Cut, error) {
	s.mu.RLock()
	w, d, sealed, err, cuts := s.written, s.durable, s.sealed, s.err, s.cuts
	s.mu.RUnlock()
	switch {
	case err != nil:
		return Cut{}, err
	case sealed:
		return Cut{}, ErrSealed
	case w != d:
		return Cut{}, fmt.Errorf("segment %d: unsynced data at cut", s.id)
	case end < s.base:
		return Cut{}, fmt.Errorf("%w: cut to %d below segment %d base %d", ErrOffsetRegression, end, s.id, s.base)
	case end > w.End:
		return Cut{}, fmt.Errorf("segment %d: cut to %d above its end %d", s.id, end, w.End)
	}
	limit := FileHeaderSize + w.Bytes
	pos, err := s.boundary(end, limit)
	if err != nil {
		return Cut{}, err
	}
	c := Cut{End: end, Pos: pos, seg: s, cuts: cuts, from: w, stats: Stats{Base: s.base, End: s.base},
		idx: NewIndex(s.interval), hash: xxhash.New()}
	win := &window{f: s.f, size: pos, chunk: scanChunk}
	stop, err := scan(win, FileHeaderSize, s.base, true, func(h BatchHeader, at int64, b []byte) {
		c.idx.Add(h, at)
		c.stats.add(h)
		_, _ = c.hash.Write(b)
	})
	switch {
	case err != nil && isDataError(err):
		return Cut{}, s.corrupt(stop, err)
	case err != nil:
		return Cut{}, err
	}
	if c.stats.End != end {
		return Cut{}, fmt.Errorf("%w: segment %d holds batches up to %d below byte %d, cut asked at %d",
			ErrCorrupt, s.id, c.stats.End, pos, end)
	}
	return c, nil
}

// boundary returns the file position after the batch that ends at end
// (FileHeaderSize when end is the base), walking batch headers from the
// index entry at or before it.
func (s *Segment) boundary(end uint64, limit int64) (int64, error) {
	if end == s.base {
		return FileHeaderSize, nil
	}
	s.mu.RLock()
	pos, ok := s.idx.Lookup(end - 1)
	s.mu.RUnlock()
	if !ok {
		pos = FileHeaderSize
	}
	w := &window{f: s.f, size: limit, chunk: s.interval + 2*HeaderSize}
	for pos < limit {
		hb, err := w.at(pos, HeaderSize)
		if err != nil {
			return 0, s.corrupt(pos, shortOr(err))
		}
		h, err := ParseHeader(hb)
		if err != nil {
			return 0, s.corrupt(pos, err)
		}
		switch last := h.LastOffset(); {
		case last+1 == end:
			return pos + int64(h.Length), nil
		case last+1 > end:
			return 0, fmt.Errorf("%w: segment %d: offset %d falls in batch %d..%d or the hole before it",
				ErrNotBoundary, s.id, end, h.BaseOffset, last)
		}
		pos += int64(h.Length)
	}
	return 0, fmt.Errorf("%w: segment %d: no batch ends at %d", ErrNotBoundary, s.id, end)
}

// ApplyCut truncates the file as planned and fsyncs it, so the cut is
// durable when it returns, and makes the segment hold exactly what the
// plan kept. Readers are held off while the file shrinks, so none reads
// a cut batch half-way. A failure is sticky, as for Sync.
func (s *Segment) ApplyCut(c Cut) error {
	s.io.Lock()
	defer s.io.Unlock()
	s.mu.Lock()
	switch {
	case s.err != nil:
		err := s.err
		s.mu.Unlock()
		return err
	case s.sealed:
		s.mu.Unlock()
		return ErrSealed
	case c.seg != s:
		s.mu.Unlock()
		return fmt.Errorf("segment %d: the cut was planned for another segment or file", s.id)
	case s.cuts != c.cuts || s.written != c.from || s.written != s.durable:
		s.mu.Unlock()
		return fmt.Errorf("segment %d: written to or cut since the cut was planned", s.id)
	}
	s.written, s.durable, s.idx = c.stats, c.stats, c.idx
	s.cuts++
	s.peeked.Store(nil) // reads are held off (io): none stores one meanwhile
	s.mu.Unlock()
	s.hash = c.hash
	clear(s.unhashed)
	s.unhashed = s.unhashed[:0]
	err := s.f.Truncate(c.Pos)
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		s.fail(err)
	}
	return err
}
