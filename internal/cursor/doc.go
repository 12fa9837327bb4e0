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
//	| u8 = 1  | uvarint      | uvarint      | (see below)         | 8 bytes     |
//	+---------+--------------+--------------+---------------------+-------------+
//
//	entry:
//	+--------------+-------------+--------------+--------------+
//	| source       | slice bits  | slice start  | offset       |
//	| uvarint      | u8 (0..32)  | uvarint      | uvarint      |
//	+--------------+-------------+--------------+--------------+
//
// The MAC is HMAC-SHA256, keyed with the caller's secret (the cluster
// secret), over every preceding byte, truncated to its first 8 bytes. It makes
// the cursor tamper-evident: a client cannot point a cursor at data of
// another topic or forge positions, and the broker never parses
// unauthenticated bytes. 64 bits of MAC are plenty for a token that is
// checked online and rejected on the first mismatch.
//
// Encode writes entries in canonical order (Source, SliceStart, SliceBits
// ascending) with duplicates merged by keeping the highest Offset, and every
// varint in its shortest form, so one cursor value has exactly one encoding.
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
//   - entries out of canonical order, which includes duplicates;
//   - a topic id other than the one the caller expects (a foreign cursor).
//
// The MAC is checked first, in constant time, so parse errors on forged input
// are indistinguishable from MAC errors.
package cursor
