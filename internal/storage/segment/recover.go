package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cespare/xxhash/v2"
	"github.com/malachi-log/malachi/internal/vfs"
)

// scanChunk is how much a sequential scan reads per call.
const scanChunk = 1 << 20

// window reads [0, size) of a file through one reusable buffer.
type window struct {
	f     vfs.File
	size  int64
	chunk int
	buf   []byte
	start int64 // buf holds the file's bytes [start, start+len(buf))
}

// at returns the n bytes at pos, reading a new chunk when they are not in
// the buffer. The slice is valid until the next call.
func (w *window) at(pos int64, n int) ([]byte, error) {
	if pos < 0 || n < 0 || pos+int64(n) > w.size {
		return nil, io.ErrUnexpectedEOF
	}
	if pos >= w.start && pos+int64(n) <= w.start+int64(len(w.buf)) {
		return w.buf[pos-w.start : pos-w.start+int64(n)], nil
	}
	want := int(min(int64(max(n, w.chunk)), w.size-pos))
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	got, err := w.f.ReadAt(w.buf, pos)
	if got < want {
		w.buf = w.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	w.start = pos
	return w.buf[:n], nil
}

// visit is called for each batch a scan accepts; b is nil unless the scan
// verifies CRCs.
type visit func(h BatchHeader, pos int64, b []byte)

// scan walks the batches from pos to the window's end. It stops at the
// first batch that is short, malformed, fails its CRC (when verify is set)
// or goes below minBase, returning where it stopped and why. A clean walk
// returns w.size and nil. Read errors of the file come back unwrapped;
// everything about the bytes themselves wraps ErrCorrupt or ErrShortBatch.
func scan(w *window, pos int64, minBase uint64, verify bool, fn visit) (int64, error) {
	for pos < w.size {
		hb, err := w.at(pos, HeaderSize)
		if err != nil {
			return pos, shortOr(err)
		}
		h, err := ParseHeader(hb)
		if err != nil {
			return pos, err
		}
		if h.BaseOffset < minBase {
			return pos, corruptf("batch base %d below previous end %d", h.BaseOffset, minBase)
		}
		var b []byte
		if verify {
			if b, err = w.at(pos, h.Length); err != nil {
				return pos, shortOr(err)
			}
			if err := Verify(b); err != nil {
				return pos, err
			}
		} else if pos+int64(h.Length) > w.size {
			return pos, ErrShortBatch
		}
		fn(h, pos, b)
		minBase = h.LastOffset() + 1
		pos += int64(h.Length)
	}
	return pos, nil
}

func shortOr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrShortBatch
	}
	return err
}

// isDataError reports whether a scan stopped because of the bytes (torn or
// corrupt) rather than because the file could not be read.
func isDataError(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrShortBatch) || errors.Is(err, ErrBadVersion)
}

// Recovery reports what Recover found.
type Recovery struct {
	// TruncatedBytes is the size of the torn tail removed.
	TruncatedBytes int64
	// Damage, when non-nil (wrapping ErrCorrupt), means an invalid batch
	// is followed by valid ones: that is damage, not a torn write, so
	// nothing was truncated and the segment must take no more appends.
	Damage error
	// EndPastDamage, with Damage, is the offset after the last valid batch
	// anywhere in the file, past the damage: offsets below it may have been
	// handed out, so whatever follows this segment must start at or above it.
	EndPastDamage uint64
}

// Recover opens the active segment at path, verifies every batch (CRC,
// framing, increasing offsets), rebuilds the index and the content hash,
// and makes the file end at the last good batch.
//
// A torn tail — a short or invalid batch with nothing valid after it, as a
// crash leaves behind — is truncated. An invalid batch followed by a valid
// one cannot come from a torn append, so it is reported as Damage and the
// bytes are kept. The file is fsynced before returning so that everything
// recovered is durable and may be served. A file too short to hold its
// header returns ErrTornCreate.
func Recover(fs vfs.FS, path string, o Options) (*Segment, Recovery, error) {
	var rec Recovery
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, rec, err
	}
	s, rec, err := recoverFile(f, o, -1)
	if err != nil {
		_ = f.Close()
		return nil, rec, fmt.Errorf("recover %s: %w", path, err)
	}
	return s, rec, nil
}

// RecoverCut is Recover for a segment whose appends since byte cut are
// held, durably, by the store's node journal, which will append them
// again: everything before cut was fsynced and must be whole (an invalid
// batch there is Damage, never a torn tail), and whatever follows cut —
// possibly pages of unsynced appends that reached the disk out of order —
// is cut off. A file shorter than cut has lost synced data: Damage.
func RecoverCut(fs vfs.FS, path string, o Options, cut int64) (*Segment, Recovery, error) {
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, Recovery{}, err
	}
	s, rec, err := recoverFile(f, o, max(cut, FileHeaderSize))
	if err != nil {
		_ = f.Close()
		return nil, rec, fmt.Errorf("recover %s: %w", path, err)
	}
	return s, rec, nil
}

// recoverFile recovers an active segment's file; cut < 0 means no journal
// holds its tail (see RecoverCut).
func recoverFile(f vfs.File, o Options, cut int64) (*Segment, Recovery, error) {
	var rec Recovery
	size, err := f.Size()
	if err != nil {
		return nil, rec, err
	}
	w := &window{f: f, size: size, chunk: scanChunk}
	hdr, err := w.at(0, FileHeaderSize)
	if err != nil {
		return nil, rec, ErrTornCreate
	}
	fh, err := parseFileHeader(hdr)
	if err != nil {
		if size == FileHeaderSize {
			// Create fsyncs the header before any append, so a file no
			// longer than its header holds no batch: a header torn or
			// zero-filled by a crash during Create, never acknowledged data.
			return nil, rec, ErrTornCreate
		}
		return nil, rec, err
	}
	id, base := fh.id, fh.base
	s := newSegment(f, fh, o)
	if cut >= 0 {
		return recoverTrusted(w, s, cut)
	}
	stop, serr := scan(w, FileHeaderSize, base, true, func(h BatchHeader, pos int64, b []byte) {
		s.idx.Add(h, pos)
		s.written.add(h)
		_, _ = s.hash.Write(b)
	})
	if serr != nil && !isDataError(serr) {
		return nil, rec, serr
	}
	if serr != nil {
		if next, found := findValidAfter(w, stop+1, s.written.End); found {
			rec.Damage = fmt.Errorf("%w: segment %d: invalid batch at byte %d (%v) followed by a valid batch at byte %d",
				ErrCorrupt, id, stop, serr, next)
			rec.EndPastDamage = endPastDamage(w, next, s.written.End)
			s.err = rec.Damage
		} else {
			if err := f.Truncate(stop); err != nil {
				return nil, rec, err
			}
			rec.TruncatedBytes = size - stop
		}
	}
	// Whatever survived a process crash may still be only in the page
	// cache; make it durable before anyone reads it.
	if err := f.Sync(); err != nil {
		return nil, rec, err
	}
	s.durable = s.written
	return s, rec, nil
}

// recoverTrusted is recoverFile's journal case: [0, cut) was synced and
// must verify; the rest is cut off, the journal holding it.
func recoverTrusted(w *window, s *Segment, cut int64) (*Segment, Recovery, error) {
	var rec Recovery
	size := w.size
	if size < cut {
		rec.Damage = fmt.Errorf("%w: segment %d: file ends at byte %d, its synced part reached byte %d",
			ErrCorrupt, s.id, size, cut)
	} else {
		w.size = cut
	}
	stop, serr := scan(w, FileHeaderSize, s.base, true, func(h BatchHeader, pos int64, b []byte) {
		s.idx.Add(h, pos)
		s.written.add(h)
		_, _ = s.hash.Write(b)
	})
	switch {
	case serr != nil && !isDataError(serr):
		return nil, rec, serr
	case serr != nil && rec.Damage == nil:
		rec.Damage = fmt.Errorf("%w: segment %d: invalid batch at byte %d of its synced part (%v)",
			ErrCorrupt, s.id, stop, serr)
	}
	if rec.Damage != nil {
		rec.EndPastDamage = s.written.End
		if stop < w.size {
			if next, ok := findValidAfter(w, stop+1, s.written.End); ok {
				rec.EndPastDamage = endPastDamage(w, next, s.written.End)
			}
		}
		s.err = rec.Damage
	} else if size > cut {
		if err := s.f.Truncate(cut); err != nil {
			return nil, rec, err
		}
		rec.TruncatedBytes = size - cut
	}
	if err := s.f.Sync(); err != nil {
		return nil, rec, err
	}
	s.durable = s.written
	return s, rec, nil
}

// endPastDamage walks the valid batches from pos, the first valid batch
// after damage, hopping over any further damage, and returns the offset
// after the last of them (at least minBase).
func endPastDamage(w *window, pos int64, minBase uint64) uint64 {
	end := minBase
	for {
		stop, _ := scan(w, pos, end, true, func(h BatchHeader, _ int64, _ []byte) { end = h.LastOffset() + 1 })
		if stop >= w.size {
			return end
		}
		next, ok := findValidAfter(w, stop+1, end)
		if !ok {
			return end
		}
		pos = next
	}
}

// findValidAfter searches [from, size) for the start of a batch that
// parses, passes its CRC and does not go below minBase.
func findValidAfter(w *window, from int64, minBase uint64) (int64, bool) {
	for q := from; q+HeaderSize <= w.size; {
		c, err := w.at(q, int(min(int64(w.chunk), w.size-q)))
		if err != nil {
			return 0, false
		}
		i := bytes.IndexByte(c, Magic)
		if i < 0 {
			q += int64(len(c))
			continue
		}
		q += int64(i)
		if validAt(w, q, minBase) {
			return q, true
		}
		q++
	}
	return 0, false
}

func validAt(w *window, q int64, minBase uint64) bool {
	hb, err := w.at(q, HeaderSize)
	if err != nil {
		return false
	}
	h, err := ParseHeader(hb)
	if err != nil || h.BaseOffset < minBase {
		return false
	}
	b, err := w.at(q, h.Length)
	return err == nil && Verify(b) == nil
}

// OpenSealed opens a sealed segment read-only. Its structure is trusted:
// the file must be exactly as long as the footer says, the index comes
// from idxPath when that file is present and consistent, and is otherwise
// rebuilt by walking batch headers (not CRCs; reads verify those). Any
// inconsistency is reported wrapping ErrCorrupt; nothing is ever modified.
func OpenSealed(fs vfs.FS, path, idxPath string, ft Footer, o Options) (*Segment, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	s, err := openSealedFile(fs, f, idxPath, ft, o)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("open sealed %s: %w", path, err)
	}
	return s, nil
}

func openSealedFile(fs vfs.FS, f vfs.File, idxPath string, ft Footer, o Options) (*Segment, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size != FileHeaderSize+ft.Bytes {
		return nil, corruptf("file is %d bytes, footer says %d", size, FileHeaderSize+ft.Bytes)
	}
	w := &window{f: f, size: size, chunk: scanChunk}
	hdr, err := w.at(0, FileHeaderSize)
	if err != nil {
		return nil, err
	}
	fh, err := parseFileHeader(hdr)
	if err != nil {
		return nil, err
	}
	base := fh.base
	if base != ft.Base {
		return nil, corruptf("file base %d, footer says %d", base, ft.Base)
	}
	s := newSegment(f, fh, o)
	if !loadIndex(fs, s, idxPath, size) {
		if _, err := scan(w, FileHeaderSize, base, false, func(h BatchHeader, pos int64, _ []byte) {
			s.idx.Add(h, pos)
		}); err != nil {
			return nil, err
		}
	}
	st := Stats{Base: ft.Base, End: ft.End, Bytes: ft.Bytes, Records: ft.Records,
		MaxExpiry: ft.MaxExpiry, MaxTimestamp: ft.MaxTimestamp}
	s.written, s.durable, s.sealed = st, st, true
	return s, nil
}

func loadIndex(fs vfs.FS, s *Segment, idxPath string, size int64) bool {
	if idxPath == "" {
		return false
	}
	b, err := readSmallFile(fs, idxPath, idxEntrySize*(size/HeaderSize+1)+idxHeader+4)
	if err != nil {
		return false
	}
	x, ok := parseIndex(b, s.interval, size)
	if ok {
		s.idx = x
	}
	return ok
}

// Verify rereads the durable part of the segment: every batch's framing,
// CRC and offset order, and — when ft is non-nil — the footer's bytes,
// record count, end, max expiry, max timestamp and content hash. Any
// mismatch wraps ErrCorrupt.
func (s *Segment) Verify(ft *Footer) error {
	s.io.RLock()
	defer s.io.RUnlock()
	s.mu.RLock()
	d := s.durable
	s.mu.RUnlock()
	w := &window{f: s.f, size: FileHeaderSize + d.Bytes, chunk: scanChunk}
	got := Stats{Base: s.base, End: s.base}
	h := xxhash.New()
	if _, err := scan(w, FileHeaderSize, s.base, true, func(bh BatchHeader, _ int64, b []byte) {
		got.add(bh)
		_, _ = h.Write(b)
	}); err != nil {
		if isDataError(err) {
			return fmt.Errorf("segment %d: %w", s.id, err)
		}
		return err
	}
	if ft == nil {
		return nil
	}
	return checkFooter(s, got, h.Sum64(), *ft)
}

func checkFooter(s *Segment, got Stats, hash uint64, ft Footer) error {
	size, err := s.f.Size()
	if err != nil {
		return err
	}
	switch {
	case size != FileHeaderSize+ft.Bytes:
		return corruptf("segment %d: file is %d bytes, footer says %d", s.id, size, FileHeaderSize+ft.Bytes)
	case got.Bytes != ft.Bytes || got.Records != ft.Records:
		return corruptf("segment %d: %d bytes/%d records, footer says %d/%d", s.id, got.Bytes, got.Records, ft.Bytes, ft.Records)
	case got.End > ft.End:
		return corruptf("segment %d: data reaches offset %d past footer end %d", s.id, got.End, ft.End)
	case got.MaxExpiry != ft.MaxExpiry || got.MaxTimestamp != ft.MaxTimestamp:
		return corruptf("segment %d: max expiry/timestamp disagree with footer", s.id)
	case hash != ft.ContentHash:
		return corruptf("segment %d: content hash %#x, footer says %#x", s.id, hash, ft.ContentHash)
	}
	return nil
}
