package cursor

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/malachi-log/malachi/internal/keyspace"
)

const (
	// Version is the first byte of every cursor Encode makes without a
	// Resume; VersionResume of those with one. Decode also reads
	// VersionSparse, the layout of earlier releases.
	Version = 2
	// VersionResume is Version's layout followed by Resume (uvarint, not
	// 0).
	VersionResume = 3
	// VersionSparse is the first layout: every field of every entry in
	// full.
	VersionSparse = 1
	// MaxEntries bounds the entries of one cursor: one per active range of
	// a topic and more while lineages drain, so above the active ranges a
	// node allows a topic (2^17 covers keyspaces of 16 bits and more).
	MaxEntries = 1 << 17
	// MaxEncodedLen bounds the length of an encoded cursor string: the
	// largest cursor of MaxEntries entries, well inside a wire frame.
	MaxEncodedLen = 2 << 20
	// MaxSliceBits is the largest slice: a whole keyspace of keyspace.MaxBits.
	MaxSliceBits = keyspace.MaxBits
	// MACLen is the length of the truncated HMAC-SHA256 that ends a cursor.
	MACLen = 8
)

// minRawLen is version + topic id + entry count + MAC, each at its smallest.
const minRawLen = 3 + MACLen

// minEntryLen is the smallest encoded entry: three one-byte fields (a
// Version entry whose slice follows the one before).
const minEntryLen = 3

// followsFlag, in an entry's slice byte, says its slice starts where the
// previous entry's ends (the first entry's: at 0), so no start is written.
// Entries of a topic's ranges in id order mostly tile the keyspace in
// order, so most entries are a source delta, this byte and an offset.
const followsFlag = 0x80

// ErrInvalid is wrapped by every error Decode returns. Its text is the wire
// reason.
var ErrInvalid = errors.New("invalid_cursor")

var b64 = base64.RawURLEncoding.Strict()

// Entry says that the records of range Source whose key position lies in
// [SliceStart, SliceStart+2^SliceBits) and whose offset is below Offset have
// been delivered.
type Entry struct {
	Source     uint64
	SliceStart uint64
	SliceBits  uint8
	Offset     uint64
}

// Cursor is a topic id and the entries of that topic's consumption.
type Cursor struct {
	TopicID uint64
	Entries []Entry
	// Resume, when not 0, is the range a reader's next page starts at:
	// the broker's turn over the ranges, carried from page to page. It
	// says nothing of what was delivered.
	Resume uint64
}

// compareEntries orders entries canonically: Source, SliceStart, SliceBits.
func compareEntries(a, b Entry) int {
	if c := cmp.Compare(a.Source, b.Source); c != 0 {
		return c
	}
	if c := cmp.Compare(a.SliceStart, b.SliceStart); c != 0 {
		return c
	}
	return cmp.Compare(a.SliceBits, b.SliceBits)
}

// Compare orders entries canonically: by Source, then SliceStart, then
// SliceBits; Offset is not compared.
func Compare(a, b Entry) int { return compareEntries(a, b) }

// Canonical returns a new slice holding entries sorted by (Source,
// SliceStart, SliceBits), with entries equal in those three fields merged into
// one carrying their highest Offset. The input is not modified.
func Canonical(entries []Entry) []Entry {
	out := slices.Clone(entries)
	if isCanonical(out) {
		// The usual input (a decoded cursor, a page's entries): a
		// reader's cursor holds an entry per range, and sorting a
		// thousand sorted entries on every page cost more than the
		// check.
		return out
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := compareEntries(a, b); c != 0 {
			return c
		}
		return cmp.Compare(b.Offset, a.Offset) // highest Offset first survives
	})
	return slices.CompactFunc(out, func(a, b Entry) bool { return compareEntries(a, b) == 0 })
}

// isCanonical says entries are strictly increasing in canonical order:
// sorted, with no two equal in (Source, SliceStart, SliceBits).
func isCanonical(entries []Entry) bool {
	for i := 1; i < len(entries); i++ {
		if compareEntries(entries[i-1], entries[i]) >= 0 {
			return false
		}
	}
	return true
}

// Encode returns the canonical, authenticated text form of c. It does not
// enforce the limits Decode checks; use Validate first when the entries may
// exceed them.
func Encode(key []byte, c Cursor) string {
	entries := c.Entries
	if !isCanonical(entries) {
		// Only read below: a canonical input (the usual one, a page's
		// entries) is encoded as it is, not copied.
		entries = Canonical(entries)
	}
	buf := make([]byte, 0, rawLen(c.TopicID, entries, c.Resume))
	if c.Resume != 0 {
		buf = append(buf, VersionResume)
	} else {
		buf = append(buf, Version)
	}
	buf = binary.AppendUvarint(buf, c.TopicID)
	buf = binary.AppendUvarint(buf, uint64(len(entries)))
	var prev Entry
	for i, e := range entries {
		buf = binary.AppendUvarint(buf, e.Source-prev.Source)
		if follows(i, prev, e) {
			buf = append(buf, e.SliceBits|followsFlag)
		} else {
			buf = append(buf, e.SliceBits)
			buf = binary.AppendUvarint(buf, e.SliceStart>>e.SliceBits)
		}
		buf = binary.AppendUvarint(buf, e.Offset)
		prev = e
	}
	if c.Resume != 0 {
		buf = binary.AppendUvarint(buf, c.Resume)
	}
	buf = append(buf, mac(key, buf)...)
	// Into the string's own memory: EncodeToString encodes into a buffer
	// and copies that, twice the bytes of a cursor of a thousand ranges
	// on every page.
	var out strings.Builder
	out.Grow(b64.EncodedLen(len(buf)))
	w := base64.NewEncoder(b64, &out)
	_, _ = w.Write(buf) // a strings.Builder does not fail
	_ = w.Close()
	return out.String()
}

// follows says entry i's slice starts where the previous entry's ends.
func follows(i int, prev, e Entry) bool {
	if i == 0 {
		return e.SliceStart == 0
	}
	return e.SliceStart == sliceEnd(prev.SliceStart, prev.SliceBits)
}

// Validate reports, wrapping ErrInvalid, whether the canonical encoding of c
// would be accepted by Decode: entry count, encoded length and every entry's
// slice.
func (c Cursor) Validate() error {
	entries := Canonical(c.Entries)
	if len(entries) > MaxEntries {
		return invalid("%d entries, limit %d", len(entries), MaxEntries)
	}
	for _, e := range entries {
		if err := checkSlice(e); err != nil {
			return err
		}
	}
	if n := b64.EncodedLen(rawLen(c.TopicID, entries, c.Resume)); n > MaxEncodedLen {
		return invalid("encoded length %d, limit %d", n, MaxEncodedLen)
	}
	return nil
}

// Decode authenticates and parses s, which must be a cursor for topicID made
// with key. Every failure wraps ErrInvalid.
func Decode(key []byte, topicID uint64, s string) (Cursor, error) {
	if len(s) > MaxEncodedLen {
		return Cursor{}, invalid("length %d, limit %d", len(s), MaxEncodedLen)
	}
	// The base64 decoder skips line breaks; a cursor never has any.
	if strings.ContainsAny(s, "\r\n") {
		return Cursor{}, invalid("line break")
	}
	raw, err := b64.DecodeString(s)
	if err != nil {
		return Cursor{}, invalid("base64: %v", err)
	}
	if len(raw) < minRawLen {
		return Cursor{}, invalid("%d bytes, too short", len(raw))
	}
	body, tag := raw[:len(raw)-MACLen], raw[len(raw)-MACLen:]
	if !hmac.Equal(tag, mac(key, body)) {
		return Cursor{}, invalid("authentication failed")
	}
	c, err := parse(body)
	if err != nil {
		return Cursor{}, err
	}
	if c.TopicID != topicID {
		return Cursor{}, invalid("cursor of topic %d, not %d", c.TopicID, topicID)
	}
	return c, nil
}

// parse decodes an authenticated body (everything but the MAC).
func parse(body []byte) (Cursor, error) {
	r := reader{b: body}
	v := r.u8()
	if r.err == nil && v != Version && v != VersionResume && v != VersionSparse {
		return Cursor{}, invalid("version %d", v)
	}
	c := Cursor{TopicID: r.uvarint()}
	n := r.uvarint()
	if r.err != nil {
		return Cursor{}, r.err
	}
	if n > MaxEntries {
		return Cursor{}, invalid("%d entries, limit %d", n, MaxEntries)
	}
	if n > uint64(len(r.b)/minEntryLen) {
		return Cursor{}, invalid("%d entries in %d bytes", n, len(r.b))
	}
	if n > 0 {
		c.Entries = make([]Entry, 0, n)
	}
	for i := range int(n) {
		var e Entry
		if v == VersionSparse {
			e = Entry{Source: r.uvarint(), SliceBits: r.u8(), SliceStart: r.uvarint(), Offset: r.uvarint()}
		} else {
			e = r.entry(i, c.Entries)
		}
		if r.err != nil {
			return Cursor{}, r.err
		}
		if err := checkSlice(e); err != nil {
			return Cursor{}, err
		}
		if k := len(c.Entries); k > 0 && compareEntries(c.Entries[k-1], e) >= 0 {
			return Cursor{}, invalid("entries duplicated or out of order")
		}
		c.Entries = append(c.Entries, e)
	}
	if v == VersionResume {
		// A cursor has one encoding: one without a Resume is Version.
		if c.Resume = r.uvarint(); r.err == nil && c.Resume == 0 {
			r.fail(invalid("resume 0 written out"))
		}
		if r.err != nil {
			return Cursor{}, r.err
		}
	}
	if len(r.b) != 0 {
		return Cursor{}, invalid("%d trailing bytes", len(r.b))
	}
	return c, nil
}

// entry reads entry i of a Version cursor, after the entries before it.
// A start that could have been left out (the slice follows the previous
// one) is refused, so one cursor has one encoding.
func (r *reader) entry(i int, before []Entry) Entry {
	var prev Entry
	if i > 0 {
		prev = before[i-1]
	}
	delta := r.uvarint()
	e := Entry{Source: prev.Source + delta}
	if e.Source < prev.Source {
		r.fail(invalid("source overflow"))
	}
	tag := r.u8()
	e.SliceBits = tag &^ followsFlag
	switch {
	case r.err != nil:
	case e.SliceBits > MaxSliceBits:
		r.fail(invalid("slice bits %d", e.SliceBits))
	case tag&followsFlag != 0 && i == 0:
		e.SliceStart = 0
	case tag&followsFlag != 0:
		e.SliceStart = sliceEnd(prev.SliceStart, prev.SliceBits)
	default:
		block := r.uvarint()
		if block >= 1<<(MaxSliceBits-e.SliceBits) {
			r.fail(invalid("slice start past the keyspace"))
		}
		e.SliceStart = block << e.SliceBits
		if r.err == nil && follows(i, prev, e) {
			r.fail(invalid("slice start written out where it follows"))
		}
	}
	e.Offset = r.uvarint()
	return e
}

// checkSlice rejects slices that cannot be buddy blocks of any keyspace.
func checkSlice(e Entry) error {
	if e.SliceBits > MaxSliceBits {
		return invalid("slice bits %d", e.SliceBits)
	}
	size := uint64(1) << e.SliceBits
	if e.SliceStart&(size-1) != 0 {
		return invalid("slice start %d not aligned to 2^%d", e.SliceStart, e.SliceBits)
	}
	if e.SliceStart > (1<<MaxSliceBits)-size {
		return invalid("slice start %d past the keyspace", e.SliceStart)
	}
	return nil
}

func mac(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return h.Sum(nil)[:MACLen]
}

// rawLen is the length of the binary form of a cursor with these entries,
// which are in canonical order.
func rawLen(topicID uint64, entries []Entry, resume uint64) int {
	n := 1 + uvarintLen(topicID) + uvarintLen(uint64(len(entries))) + MACLen
	if resume != 0 {
		n += uvarintLen(resume)
	}
	var prev Entry
	for i, e := range entries {
		n += uvarintLen(e.Source-prev.Source) + 1 + uvarintLen(e.Offset)
		if !follows(i, prev, e) {
			n += uvarintLen(e.SliceStart >> e.SliceBits)
		}
		prev = e
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// reader consumes a byte slice; the first error sticks and later reads
// return zero.
type reader struct {
	b   []byte
	err error
}

// fail records err unless an error is already recorded.
func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) u8() uint8 {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = invalid("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// uvarint reads a varint in its shortest form: any other form is a second
// encoding of the same value and is refused.
func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n == 0:
		r.err = invalid("truncated")
		return 0
	case n < 0:
		r.err = invalid("varint overflow")
		return 0
	case n != uvarintLen(v):
		r.err = invalid("non-minimal varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}
