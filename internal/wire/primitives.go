package wire

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// Tags of the str primitive.
const (
	strAbsent  = 0x00
	strPresent = 0x01
)

// Smallest encodings, used to reject a list count before allocating for it:
// a count is accepted only if count*min fits in the bytes that remain.
const (
	minStrLen    = 1             // absent str
	minPresent   = 1 + 4         // present empty str
	minHeaderLen = 2             // two absent strs
	minRecordLen = 1 + 4 + 8 + 4 // key:str(absent) value_len:u32 timestamp:u64 header_count:u32
	minU64Len    = 8
)

// decoder reads primitives from a payload front to back. The first failure
// sticks: it empties the input, later reads return zero values, and finish
// reports it. Each message's Decode is therefore a plain list of reads with
// one error check at the end.
//
// Byte slices it returns alias the input, capped at their own length so an
// append by the caller cannot overwrite the bytes that follow.
type decoder struct {
	b   []byte
	err error
}

// fail records the first failure and stops all further reads.
func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
	d.b = nil
}

// take returns the next n bytes, or nil after recording a failure.
func (d *decoder) take(n uint64, what string) []byte {
	if n > uint64(len(d.b)) {
		d.fail("%s needs %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() uint8 {
	if b := d.take(1, "u8"); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4, "u32"); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8, "u64"); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// boolean reads a u8 that must be 0 or 1, so every value has one encoding.
func (d *decoder) boolean() bool {
	switch v := d.u8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bool byte 0x%02x", v)
		return false
	}
}

// bytes reads a str as bytes: nil when absent, a non-nil slice (possibly
// empty) aliasing the input when present.
func (d *decoder) bytes() []byte {
	switch tag := d.u8(); tag {
	case strAbsent:
		return nil
	case strPresent:
		n := d.u32()
		if d.err != nil {
			return nil
		}
		return d.take(uint64(n), "str")
	default:
		d.fail("str tag 0x%02x", tag)
		return nil
	}
}

// nstr reads a nullable str.
func (d *decoder) nstr() *string {
	b := d.bytes()
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// str reads a str that must be present.
func (d *decoder) str() string {
	if len(d.b) > 0 && d.b[0] == strAbsent {
		d.fail("absent str where a value is required")
		return ""
	}
	return string(d.bytes())
}

// value reads a record value: value_len:u32 bytes. It is never nil.
func (d *decoder) value() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if v := d.take(uint64(n), "value"); v != nil {
		return v
	}
	return []byte{}
}

// count reads a list count and rejects it unless count items of at least
// minItem bytes each fit in what is left. This bounds every allocation
// made for the list by the size of the input.
func (d *decoder) count(minItem int) int {
	n := d.u32()
	if d.err != nil {
		return 0
	}
	if uint64(n)*uint64(minItem) > uint64(len(d.b)) {
		d.fail("list count %d cannot fit in %d bytes", n, len(d.b))
		return 0
	}
	return int(n)
}

// list reads list(x), calling item for each of its count items. The
// count has passed the minimum-size check, but an item in memory is
// larger than its smallest encoding (a *string is 8 bytes, an absent str
// 1), so the result is preallocated only for as many items as the
// remaining bytes could back and grows as items actually decode. It stops
// at the first failure, so a bad item early in a long list costs nothing
// more. An empty list decodes as nil.
func list[T any](d *decoder, minItem int, item func() T) []T {
	n := d.count(minItem)
	if n == 0 {
		return nil
	}
	out := make([]T, 0, room[T](d, n))
	for range n {
		v := item()
		if d.err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// room is how many of n items of type T to preallocate: n, or as many as
// the remaining bytes could back if that is fewer, so no allocation made
// before the items decode is larger than the input left.
func room[T any](d *decoder, n int) int {
	var zero T
	return min(n, len(d.b)/max(int(unsafe.Sizeof(zero)), 1))
}

// strs reads list(str) with every item present.
func (d *decoder) strs() []string { return list(d, minPresent, d.str) }

// nstrs reads list(str) with absent items allowed.
func (d *decoder) nstrs() []*string { return list(d, minStrLen, d.nstr) }

// u64s reads list(u64).
func (d *decoder) u64s() []uint64 { return list(d, minU64Len, d.u64) }

// finish reports the first failure, or trailing bytes, naming the message.
func (d *decoder) finish(what string) error {
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%s: %w", what, d.err)
	}
	return nil
}

func appendU8(dst []byte, v uint8) []byte   { return append(dst, v) }
func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }
func appendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// appendBytes appends b as a str: absent when nil.
func appendBytes(dst []byte, b []byte) []byte {
	if b == nil {
		return append(dst, strAbsent)
	}
	dst = append(dst, strPresent)
	dst = appendU32(dst, uint32(len(b)))
	return append(dst, b...)
}

// appendNStr appends a nullable str: absent when nil.
func appendNStr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, strAbsent)
	}
	return appendString(dst, *s)
}

// appendString appends a present str.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, strPresent)
	dst = appendU32(dst, uint32(len(s)))
	return append(dst, s...)
}

func appendStrings(dst []byte, list []string) []byte {
	dst = appendU32(dst, uint32(len(list)))
	for _, s := range list {
		dst = appendString(dst, s)
	}
	return dst
}

func appendNStrs(dst []byte, list []*string) []byte {
	dst = appendU32(dst, uint32(len(list)))
	for _, s := range list {
		dst = appendNStr(dst, s)
	}
	return dst
}

func appendU64s(dst []byte, list []uint64) []byte {
	dst = appendU32(dst, uint32(len(list)))
	for _, v := range list {
		dst = appendU64(dst, v)
	}
	return dst
}

// strSize is the encoded size of a present str of n bytes.
func strSize(n int) int { return 1 + 4 + n }

// bytesSize is the encoded size of b as a str.
func bytesSize(b []byte) int {
	if b == nil {
		return 1
	}
	return strSize(len(b))
}
