package segment

import (
	"encoding/binary"
	"hash/crc32"
	"sort"
)

// IndexEntry maps the base offset of a batch to its byte position in the
// .log file, and says how late the records up to that batch reach.
type IndexEntry struct {
	Offset uint64
	Pos    int64
	// PrefixMaxTimestamp is the largest batch MaxTimestamp from the
	// segment's first batch through this entry's batch. It never falls
	// from one entry to the next, so a time search can binary-search it;
	// see Index.SeekTime for why a prefix rather than a per-interval max.
	PrefixMaxTimestamp int64
}

// Index is a sparse offset and time index: the first batch, then one batch
// every interval bytes. A lookup lands at most about one interval (plus
// one batch) before the wanted batch, which a reader then walks by headers.
type Index struct {
	interval int64
	entries  []IndexEntry
	maxTS    int64 // largest MaxTimestamp of every batch added so far
}

// NewIndex returns an empty index with an entry every interval bytes.
func NewIndex(interval int) Index {
	return Index{interval: int64(max(interval, 1))}
}

// Add notes batch h at byte pos. Batches must be added in file order, all
// of them, indexed or not: each one's MaxTimestamp counts toward the prefix
// max of the next entry.
func (x *Index) Add(h BatchHeader, pos int64) {
	n := len(x.entries)
	if n == 0 {
		x.maxTS = h.MaxTimestamp // the first batch is always indexed
	}
	x.maxTS = max(x.maxTS, h.MaxTimestamp)
	if n == 0 || pos-x.entries[n-1].Pos >= x.interval {
		x.entries = append(x.entries, IndexEntry{Offset: h.BaseOffset, Pos: pos, PrefixMaxTimestamp: x.maxTS})
	}
}

// Lookup returns the position of the last indexed batch whose base offset
// is <= off; ok is false when there is none (start at the first batch).
func (x *Index) Lookup(off uint64) (pos int64, ok bool) {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i].Offset > off })
	if i == 0 {
		return 0, false
	}
	return x.entries[i-1].Pos, true
}

// LookupSpan is Lookup, and also returns the position of the indexed
// batch after pos (0 when there is none). The batch holding off starts
// before next and, its successor's base being above off, ends at or
// before it: with batches larger than the interval, every batch is
// indexed and [pos, next) is exactly the batch holding off.
func (x *Index) LookupSpan(off uint64) (pos, next int64, ok bool) {
	pos, next, ok, _ = x.lookupSpanAt(off)
	return pos, next, ok
}

// lookupSpanAt is LookupSpan also saying whether the indexed batch at pos
// has base offset off (at): a read from off then starts with it, with no
// headers to walk.
func (x *Index) lookupSpanAt(off uint64) (pos, next int64, ok, at bool) {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i].Offset > off })
	if i < len(x.entries) {
		next = x.entries[i].Pos
	}
	if i == 0 {
		return 0, 0, false, false
	}
	e := x.entries[i-1]
	return e.Pos, next, true, e.Offset == off
}

// boundaryAtOrBelow returns the position of the last indexed batch that
// starts at or before pos (0 when none does): a batch boundary, so the
// bytes from an earlier indexed batch up to it are whole batches.
func (x *Index) boundaryAtOrBelow(pos int64) int64 {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i].Pos > pos })
	if i == 0 {
		return 0
	}
	return x.entries[i-1].Pos
}

// SeekTime returns where a walk of batch headers must start to find the
// first batch whose MaxTimestamp is at least t: that batch, if any, lies
// after the returned position's batch (at it, for FileHeaderSize) and at or
// before the next indexed batch. Past the last entry the walk runs to the
// end of what the caller may read, which may hold no such batch.
//
// Entries carry the max over the prefix ending at their batch rather than
// over the interval they start, because only the prefix max is ordered:
// with e the first entry whose prefix max reaches t, no batch up to e's
// predecessor qualifies and some batch up to e does, so the answer lies in
// the one interval between them. A per-interval max would need a scan of
// all entries, would keep changing for the last entry as an active segment
// grows, and could count batches written but not yet durable; a prefix max
// is final when its entry is added and covers only batches up to it, so an
// entry past the durable end still bounds the durable batches correctly.
func (x *Index) SeekTime(t int64) (from int64) {
	i := sort.Search(len(x.entries), func(i int) bool { return x.entries[i].PrefixMaxTimestamp >= t })
	if i == 0 {
		return FileHeaderSize
	}
	return x.entries[i-1].Pos
}

// Len is the number of entries.
func (x *Index) Len() int { return len(x.entries) }

// Entries returns the entries (shared, do not modify).
func (x *Index) Entries() []IndexEntry { return x.entries }

// Index file (.idx) layout, little-endian:
//
//	magic "MIDX" | version u16 | reserved u16 | count u32 |
//	count × (offset u64, pos u64, prefix max timestamp i64) |
//	CRC32C u32 over everything before it
//
// Version 1 lacked the prefix max timestamp; such a file is refused like
// any other bad one, and the index is rebuilt from the log.
const (
	idxMagic     = "MIDX"
	idxVersion   = 2
	idxHeader    = 12
	idxEntrySize = 24
)

// MarshalBinary encodes the index for an .idx file.
func (x *Index) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, idxHeader+idxEntrySize*len(x.entries)+4)
	b = append(b, idxMagic...)
	b = binary.LittleEndian.AppendUint16(b, idxVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.entries)))
	for _, e := range x.entries {
		b = binary.LittleEndian.AppendUint64(b, e.Offset)
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Pos))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.PrefixMaxTimestamp))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// parseIndex decodes an .idx file and checks it against the log it
// indexes: offsets and positions strictly increasing, prefix maxima never
// falling, positions inside [FileHeaderSize, size), the first at the first
// batch. Any doubt returns ok=false and the caller rebuilds the index from
// the log.
func parseIndex(b []byte, interval int, size int64) (Index, bool) {
	x := NewIndex(interval)
	le := binary.LittleEndian
	if len(b) < idxHeader+4 || string(b[:4]) != idxMagic || le.Uint16(b[4:]) != idxVersion {
		return x, false
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != le.Uint32(b[len(b)-4:]) {
		return x, false
	}
	n := le.Uint32(b[8:])
	if uint64(len(body)-idxHeader) != uint64(n)*idxEntrySize {
		return x, false
	}
	x.entries = make([]IndexEntry, n)
	for i := range x.entries {
		p := idxHeader + idxEntrySize*i
		e := IndexEntry{Offset: le.Uint64(b[p:]), Pos: int64(le.Uint64(b[p+8:])), PrefixMaxTimestamp: int64(le.Uint64(b[p+16:]))}
		if e.Pos < FileHeaderSize || e.Pos >= size || (i > 0 && !follows(e, x.entries[i-1])) {
			return x, false
		}
		x.entries[i] = e
	}
	if (size > FileHeaderSize) != (n > 0) || (n > 0 && x.entries[0].Pos != FileHeaderSize) {
		return x, false
	}
	return x, true
}

// follows reports whether e may come right after prev in an index.
func follows(e, prev IndexEntry) bool {
	return e.Offset > prev.Offset && e.Pos > prev.Pos && e.PrefixMaxTimestamp >= prev.PrefixMaxTimestamp
}
