// Package cursor encodes, authenticates and validates the opaque cursors
// handed to clients, and holds the pure arithmetic the broker uses to decide,
// from a cursor, which records of a range and its lineage are already
// delivered.
//
// # Meaning
//
// A cursor is a topic id and a list of entries. An Entry
// {Source, SliceStart, SliceBits, Offset} says: the records of range Source
// whose key position lies in [SliceStart, SliceStart+2^SliceBits) and whose
// offset is below Offset have been delivered. Slices are aligned buddy blocks
// of the keyspace (see package keyspace), so any two slices either nest or
// are disjoint. An entry for a range also implies that every record of each
// of its ancestors (ranges it was split or merged from) at the positions of
// the slice has been delivered: lineage reads drain an ancestor's slice
// before they move to the child. Consumed, Start and Advance implement that
// rule; the broker owns everything else (which ranges exist, their lineage,
// their first offsets).
//
// # Encoding
//
// Cursors are bytes, then base64url without padding (RawURLEncoding):
//
//	+---------+--------------+--------------+---------------------+-------------+
//	| version | topic id     | entry count  | entry × count       | MAC         |
//	| u8 = 2  | uvarint      | uvarint      | (see below)         | 8 bytes     |
//	+---------+--------------+--------------+---------------------+-------------+
//
//	entry (version 2):
//	+--------------+----------------------+-------------------+--------------+
//	| source delta | slice byte           | slice block       | offset       |
//	| uvarint      | u8: bits (0..32),    | uvarint, only     | uvarint      |
//	|              | 0x80 = follows       | without 0x80      |              |
//	+--------------+----------------------+-------------------+--------------+
//
// The source is written as its difference from the previous entry's (from
// 0 for the first); entries are sorted by source, so it is never negative.
// A slice that starts where the previous entry's ends (the first entry's:
// at 0) sets 0x80 and writes no start; otherwise the start is written as
// its block number, SliceStart >> SliceBits. A topic's ranges in id order
// mostly tile the keyspace in order, so most entries cost three to five
// bytes, and a cursor over 10,000 ranges stays near 50 KB.
//
// Version 3 is version 2 with one more uvarint after the entries, before
// the MAC: Resume, not 0, the range the reader's next page starts at. The
// broker serves a page's ranges in turns (each a share of the page), and
// carries where the turn stopped from page to page, so that every range
// gets its turn whatever the pages hold. A cursor without a Resume is
// written in version 2, as before version 3 existed.
//
// Version 1, written by earlier releases and still read, has entries of
// source, slice bits (u8), slice start and offset, each in full.
//
// The MAC is HMAC-SHA256, keyed with the caller's secret (the cluster
// secret), over every preceding byte, truncated to its first 8 bytes. It makes
// the cursor tamper-evident: a client cannot point a cursor at data of
// another topic or forge positions, and the broker never parses
// unauthenticated bytes. 64 bits of MAC are plenty for a token that is
// checked online and rejected on the first mismatch.
//
// Encode writes entries in canonical order (Source, SliceStart, SliceBits
// ascending) with duplicates merged by keeping the highest Offset, every
// varint in its shortest form, and the follows flag wherever it applies, so
// one cursor value has exactly one encoding: version 2 without a Resume,
// version 3 with one.
//
// # Decoding untrusted input
//
// Decode is strict and bounded. It rejects, with an error wrapping ErrInvalid
// (whose text "invalid_cursor" is the wire reason):
//   - a string longer than MaxEncodedLen, checked before any decoding;
//   - bad base64url, padding, line breaks or non-zero trailing bits;
//   - input shorter than the smallest cursor, or a MAC mismatch (forged,
//     truncated, or made with another key);
//   - an unknown version, truncated or over-long varints, non-minimal
//     varints, trailing bytes after the last entry;
//   - an entry count above MaxEntries or above what the bytes can hold;
//   - SliceBits above MaxSliceBits, a SliceStart not aligned to 2^SliceBits,
//     or a slice reaching past 2^MaxSliceBits;
//   - in versions 2 and 3, a slice byte with bits other than 0x80 set above
//     the slice bits, a start written out where the follows flag applies, or
//     a source delta that overflows;
//   - in version 3, a Resume of 0 or missing;
//   - entries out of canonical order, which includes duplicates;
//   - a topic id other than the one the caller expects (a foreign cursor).
//
// The MAC is checked first, in constant time, so parse errors on forged input
// are indistinguishable from MAC errors.
package cursor
