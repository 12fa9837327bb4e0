package segment

import (
	"encoding/binary"
	"hash/crc32"
	"sort"
)

// IndexEntry maps the base offset of a batch to its byte position in the
// .log file.
type IndexEntry struct {
	Offset uint64
	Pos    int64
}

// Index is a sparse offset index: the first batch, then one batch every
// interval bytes. A lookup lands at most about one interval (plus one
// batch) before the wanted batch, which a reader then walks by headers.
type Index struct {
	interval int64
	entries  []IndexEntry
}

// NewIndex returns an empty index with an entry every interval bytes.
func NewIndex(interval int) Index {
	return Index{interval: int64(max(interval, 1))}
}

// Add notes a batch with base offset base at byte pos. Batches must be
// added in file order.
func (x *Index) Add(base uint64, pos int64) {
	n := len(x.entries)
	if n == 0 || pos-x.entries[n-1].Pos >= x.interval {
		x.entries = append(x.entries, IndexEntry{Offset: base, Pos: pos})
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

// Len is the number of entries.
func (x *Index) Len() int { return len(x.entries) }

// Entries returns the entries (shared, do not modify).
func (x *Index) Entries() []IndexEntry { return x.entries }

// Index file (.idx) layout, little-endian:
//
//	magic "MIDX" | version u16 | reserved u16 | count u32 |
//	count × (offset u64, pos u64) | CRC32C u32 over everything before it
const (
	idxMagic   = "MIDX"
	idxVersion = 1
	idxHeader  = 12
)

// MarshalBinary encodes the index for an .idx file.
func (x *Index) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, idxHeader+16*len(x.entries)+4)
	b = append(b, idxMagic...)
	b = binary.LittleEndian.AppendUint16(b, idxVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.entries)))
	for _, e := range x.entries {
		b = binary.LittleEndian.AppendUint64(b, e.Offset)
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Pos))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// parseIndex decodes an .idx file and checks it against the log it
// indexes: entries strictly increasing, inside [FileHeaderSize, size), the
// first at the first batch. Any doubt returns ok=false and the caller
// rebuilds the index from the log.
func parseIndex(b []byte, interval int, size int64) (Index, bool) {
	x := NewIndex(interval)
	if len(b) < idxHeader+4 || string(b[:4]) != idxMagic || binary.LittleEndian.Uint16(b[4:]) != idxVersion {
		return x, false
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return x, false
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if uint64(len(body)-idxHeader) != uint64(n)*16 {
		return x, false
	}
	x.entries = make([]IndexEntry, n)
	for i := range x.entries {
		p := idxHeader + 16*i
		e := IndexEntry{Offset: binary.LittleEndian.Uint64(b[p:]), Pos: int64(binary.LittleEndian.Uint64(b[p+8:]))}
		if e.Pos < FileHeaderSize || e.Pos >= size || (i > 0 && (e.Offset <= x.entries[i-1].Offset || e.Pos <= x.entries[i-1].Pos)) {
			return x, false
		}
		x.entries[i] = e
	}
	if (size > FileHeaderSize) != (n > 0) || (n > 0 && x.entries[0].Pos != FileHeaderSize) {
		return x, false
	}
	return x, true
}
