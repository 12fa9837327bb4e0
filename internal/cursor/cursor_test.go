package cursor

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var testKey = []byte("cluster-secret-for-tests")

func sample() Cursor {
	return Cursor{TopicID: 7, Entries: []Entry{
		{Source: 3, SliceStart: 0, SliceBits: 15, Offset: 1000},
		{Source: 3, SliceStart: 1 << 15, SliceBits: 15, Offset: 12},
		{Source: 9, SliceStart: 1 << 14, SliceBits: 14, Offset: 0},
	}}
}

// rawOf builds an authenticated cursor from arbitrary body bytes, so tests
// can reach the parser with inputs Encode would never produce.
func rawOf(key, body []byte) string {
	return b64.EncodeToString(append(append([]byte(nil), body...), mac(key, body)...))
}

func mustInvalid(t *testing.T, name string, _ Cursor, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: decoded, want an error", name)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%s: error %v does not wrap ErrInvalid", name, err)
	}
}

func TestErrInvalidText(t *testing.T) {
	if ErrInvalid.Error() != "invalid_cursor" {
		t.Fatalf("ErrInvalid = %q", ErrInvalid)
	}
}

func TestRoundTrip(t *testing.T) {
	c := sample()
	s := Encode(testKey, c)
	got, err := Decode(testKey, 7, s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("got %+v, want %+v", got, c)
	}
	if strings.ContainsAny(s, "+/=") {
		t.Fatalf("%q is not unpadded base64url", s)
	}
}

func TestEmptyCursor(t *testing.T) {
	s := Encode(testKey, Cursor{TopicID: 1})
	got, err := Decode(testKey, 1, s)
	if err != nil || got.TopicID != 1 || len(got.Entries) != 0 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestEncodeCanonical(t *testing.T) {
	a := Cursor{TopicID: 1, Entries: []Entry{
		{Source: 2, SliceStart: 4, SliceBits: 2, Offset: 5},
		{Source: 1, SliceStart: 8, SliceBits: 3, Offset: 1},
		{Source: 2, SliceStart: 4, SliceBits: 2, Offset: 9},
		{Source: 1, SliceStart: 0, SliceBits: 3, Offset: 4},
		{Source: 2, SliceStart: 4, SliceBits: 1, Offset: 3},
	}}
	b := Cursor{TopicID: 1, Entries: []Entry{
		{Source: 2, SliceStart: 4, SliceBits: 2, Offset: 9},
		{Source: 1, SliceStart: 0, SliceBits: 3, Offset: 4},
		{Source: 2, SliceStart: 4, SliceBits: 1, Offset: 3},
		{Source: 1, SliceStart: 8, SliceBits: 3, Offset: 1},
	}}
	if Encode(testKey, a) != Encode(testKey, b) {
		t.Fatal("equal cursors encode differently")
	}
	got, err := Decode(testKey, 1, Encode(testKey, a))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Source: 1, SliceStart: 0, SliceBits: 3, Offset: 4},
		{Source: 1, SliceStart: 8, SliceBits: 3, Offset: 1},
		{Source: 2, SliceStart: 4, SliceBits: 1, Offset: 3},
		{Source: 2, SliceStart: 4, SliceBits: 2, Offset: 9},
	}
	if !reflect.DeepEqual(got.Entries, want) {
		t.Fatalf("got %+v, want %+v", got.Entries, want)
	}
	if len(a.Entries) != 5 || a.Entries[0].Source != 2 {
		t.Fatal("Encode modified its input")
	}
}

func TestForgedEveryBit(t *testing.T) {
	s := Encode(testKey, sample())
	raw, _ := b64.DecodeString(s)
	for i := range raw {
		for bit := range 8 {
			forged := append([]byte(nil), raw...)
			forged[i] ^= 1 << bit
			c, err := Decode(testKey, 7, b64.EncodeToString(forged))
			mustInvalid(t, "flipped bit", c, err)
		}
	}
}

func TestForgedEveryCharacter(t *testing.T) {
	s := Encode(testKey, sample())
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range s {
		for _, r := range []byte{alphabet[(strings.IndexByte(alphabet, s[i])+1)%64], '=', '+', '/', '\n', '.'} {
			forged := s[:i] + string(r) + s[i+1:]
			c, err := Decode(testKey, 7, forged)
			mustInvalid(t, "replaced character", c, err)
		}
	}
}

func TestTruncatedEveryLength(t *testing.T) {
	s := Encode(testKey, sample())
	for n := range len(s) {
		c, err := Decode(testKey, 7, s[:n])
		mustInvalid(t, "truncated text", c, err)
	}
	raw, _ := b64.DecodeString(s)
	for n := range len(raw) {
		c, err := Decode(testKey, 7, b64.EncodeToString(raw[:n]))
		mustInvalid(t, "truncated bytes", c, err)
	}
}

func TestForeignAndWrongKey(t *testing.T) {
	s := Encode(testKey, sample())
	c, err := Decode(testKey, 8, s)
	mustInvalid(t, "foreign topic", c, err)
	c, err = Decode([]byte("another secret"), 7, s)
	mustInvalid(t, "wrong key", c, err)
	c, err = Decode(nil, 7, s)
	mustInvalid(t, "no key", c, err)
}

func TestOverLimit(t *testing.T) {
	c, err := Decode(testKey, 7, strings.Repeat("A", MaxEncodedLen+1))
	mustInvalid(t, "too long", c, err)

	big := Cursor{TopicID: 7}
	for i := range MaxEntries + 1 {
		big.Entries = append(big.Entries, Entry{Source: uint64(i), SliceBits: 32})
	}
	if err := big.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate of %d entries: %v", len(big.Entries), err)
	}
	c, err = Decode(testKey, 7, Encode(testKey, big))
	mustInvalid(t, "too many entries", c, err)

	big.Entries = big.Entries[:MaxEntries]
	if err := big.Validate(); err != nil {
		t.Fatalf("Validate at the limit: %v", err)
	}
	if _, err := Decode(testKey, 7, Encode(testKey, big)); err != nil {
		t.Fatalf("decode at the limit: %v", err)
	}

	long := Cursor{TopicID: 7}
	for i := range MaxEntries {
		// Slices that do not follow each other: every start is written.
		long.Entries = append(long.Entries, Entry{Source: 1 << 62, SliceStart: 2 * uint64(i), Offset: 1 << 62})
	}
	if err := long.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate of an over-long cursor: %v", err)
	}
	c, err = Decode(testKey, 7, Encode(testKey, long))
	mustInvalid(t, "encoded too long", c, err)
}

// TestParserRejects feeds authenticated bodies, so each case reaches the
// check it names rather than the MAC.
func TestParserRejects(t *testing.T) {
	entry := func(b []byte, src uint64, bits uint8, start, off uint64) []byte {
		b = binary.AppendUvarint(b, src)
		b = append(b, bits)
		b = binary.AppendUvarint(b, start)
		return binary.AppendUvarint(b, off)
	}
	head := func(n uint64) []byte { return binary.AppendUvarint([]byte{VersionSparse, 7}, n) }
	tests := []struct {
		name string
		body []byte
	}{
		{"version 0", []byte{0, 7, 0}},
		{"version 4", []byte{4, 7, 0}},
		{"resume missing", []byte{VersionResume, 7, 0}},
		{"resume 0 written out", []byte{VersionResume, 7, 0, 0}},
		{"resume non-minimal", []byte{VersionResume, 7, 0, 0x85, 0x00}},
		{"trailing bytes after resume", []byte{VersionResume, 7, 0, 5, 0}},
		{"trailing bytes", append(head(0), 0)},
		{"count past the bytes", head(3)},
		{"count over the limit", append(head(MaxEntries+1), make([]byte, 4*(MaxEntries+1))...)},
		{"truncated entry", append(head(1), 1, 0)},
		{"slice bits 33", entry(head(1), 1, 33, 0, 0)},
		{"slice bits 255", entry(head(1), 1, 255, 0, 0)},
		{"unaligned start", entry(head(1), 1, 4, 8, 0)},
		{"start past keyspace", entry(head(1), 1, 0, 1<<32, 0)},
		{"slice reaches past keyspace", entry(head(1), 1, 31, 1<<32, 0)},
		{"duplicate", entry(entry(head(2), 1, 2, 4, 5), 1, 2, 4, 6)},
		{"out of order", entry(entry(head(2), 2, 2, 4, 5), 1, 2, 4, 6)},
		{"non-minimal varint", []byte{Version, 0x87, 0x00, 0}},
		{"varint overflow", append([]byte{Version}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0)},
	}
	for _, tt := range tests {
		c, err := Decode(testKey, 7, rawOf(testKey, tt.body))
		mustInvalid(t, tt.name, c, err)
	}
	// The builders above are right: a well-formed body decodes.
	if _, err := Decode(testKey, 7, rawOf(testKey, entry(entry(head(2), 1, 3, 0, 6), 1, 2, 4, 5))); err != nil {
		t.Fatalf("well-formed body: %v", err)
	}
}

func TestBase64Strictness(t *testing.T) {
	s := Encode(testKey, sample())
	for name, bad := range map[string]string{
		"padding":        s + "==",
		"std alphabet":   strings.NewReplacer("-", "+", "_", "/").Replace(s) + "+",
		"line break":     s[:4] + "\n" + s[4:],
		"carriage ret":   s[:4] + "\r" + s[4:],
		"space":          " " + s,
		"padded decoder": base64.URLEncoding.EncodeToString([]byte{1, 2, 3, 4}),
	} {
		c, err := Decode(testKey, 7, bad)
		mustInvalid(t, name, c, err)
	}
}

func TestPropRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Cursor{TopicID: rapid.Uint64().Draw(t, "topic")}
		if rapid.Bool().Draw(t, "resumes") {
			c.Resume = rapid.Uint64Range(1, 1<<63).Draw(t, "resume")
		}
		n := rapid.IntRange(0, 20).Draw(t, "n")
		for range n {
			bits := rapid.Uint8Range(0, MaxSliceBits).Draw(t, "bits")
			idx := rapid.Uint64Range(0, (1<<MaxSliceBits>>bits)-1).Draw(t, "idx")
			c.Entries = append(c.Entries, Entry{
				Source:     rapid.Uint64Range(0, 5).Draw(t, "source"),
				SliceStart: idx << bits,
				SliceBits:  bits,
				Offset:     rapid.Uint64().Draw(t, "offset"),
			})
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		s := Encode(testKey, c)
		got, err := Decode(testKey, c.TopicID, s)
		if err != nil {
			t.Fatal(err)
		}
		want := Canonical(c.Entries)
		if len(want) == 0 {
			want = nil
		}
		if got.TopicID != c.TopicID || got.Resume != c.Resume || !reflect.DeepEqual(got.Entries, want) {
			t.Fatalf("got %+v, want %+v", got.Entries, want)
		}
		if Encode(testKey, got) != s {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(testKey, sample()))
	f.Add(Encode(testKey, Cursor{TopicID: 7}))
	f.Add(Encode(testKey, Cursor{TopicID: 7, Entries: sample().Entries, Resume: 9}))
	f.Add(Encode(testKey, Cursor{TopicID: 8}))
	f.Add("")
	f.Add("AQcA")
	f.Add(rawOf(testKey, []byte{Version, 7, 1, 1, 33, 0, 0}))
	f.Add(rawOf(testKey, []byte{Version, 7, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}))
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Decode(testKey, 7, s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if c.TopicID != 7 || len(c.Entries) > MaxEntries || c.Validate() != nil {
			t.Fatalf("accepted an invalid cursor %+v", c)
		}
		if Encode(testKey, c) != s {
			t.Fatalf("accepted a non-canonical encoding %q", s)
		}
	})
}

// TestResumeRoundTrip: a cursor with a Resume is written in
// VersionResume, one without in Version, byte for byte as before Resume
// existed, and each decodes to what was encoded.
func TestResumeRoundTrip(t *testing.T) {
	c := sample()
	plain := Encode(testKey, c)
	c.Resume = 300
	resumed := Encode(testKey, c)
	for _, tc := range []struct {
		s       string
		version byte
		resume  uint64
	}{{plain, Version, 0}, {resumed, VersionResume, 300}} {
		raw, err := b64.DecodeString(tc.s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(testKey, 7, tc.s)
		if err != nil || raw[0] != tc.version || got.Resume != tc.resume || !slices.Equal(got.Entries, c.Entries) {
			t.Fatalf("version %d, got %+v, %v; want version %d, resume %d", raw[0], got, err, tc.version, tc.resume)
		}
	}
	// The resume is the last field before the MAC: the plain body and two
	// bytes of uvarint 300.
	pr, _ := b64.DecodeString(plain)
	rr, _ := b64.DecodeString(resumed)
	if !slices.Equal(rr[1:len(rr)-MACLen], append(slices.Clone(pr[1:len(pr)-MACLen]), 0xac, 0x02)) {
		t.Fatalf("resumed body %x, plain %x", rr, pr)
	}
}

// TestCompactRejects: the Version layout's own checks, on authenticated
// bodies. An entry is a source delta, a slice byte (bits, and whether the
// slice follows the one before), the slice's block number unless it
// follows, and the offset.
func TestCompactRejects(t *testing.T) {
	head := func(n uint64) []byte { return binary.AppendUvarint([]byte{Version, 7}, n) }
	tests := []struct {
		name string
		body []byte
	}{
		{"slice bits 33", append(head(1), 1, 33|followsFlag, 0)},
		{"unknown flag", append(head(1), 1, 0x40|4, 0, 0)},
		{"start written where it follows", append(head(1), 1, 4, 0, 0)},
		{"start past keyspace", append(binary.AppendUvarint(append(head(1), 1, 4), 1<<28), 0)},
		{"block overflowing the shift", append(binary.AppendUvarint(append(head(1), 1, 31), 1<<40), 0)},
		{"source overflow", append(append(binary.AppendUvarint(append(head(2), 1, 2|followsFlag, 0), ^uint64(0)), 2|followsFlag), 0)},
		{"duplicate", append(head(2), 1, 2|followsFlag, 5, 0, 2, 0, 6)},
		{"truncated", append(head(1), 1, 2)},
	}
	for _, tt := range tests {
		c, err := Decode(testKey, 7, rawOf(testKey, tt.body))
		mustInvalid(t, tt.name, c, err)
	}
	// Two entries: one from 0, one written out after a gap.
	ok := append(head(2), 1, 2|followsFlag, 5, 1, 2, 2, 6)
	c, err := Decode(testKey, 7, rawOf(testKey, ok))
	want := []Entry{{Source: 1, SliceBits: 2, Offset: 5}, {Source: 2, SliceStart: 8, SliceBits: 2, Offset: 6}}
	if err != nil || !slices.Equal(c.Entries, want) {
		t.Fatalf("well-formed body: %v %v", c.Entries, err)
	}
}

// TestSparseCursorsStillDecode: cursors minted in the first layout, by
// an earlier release, keep working.
func TestSparseCursorsStillDecode(t *testing.T) {
	c := sample()
	body := binary.AppendUvarint([]byte{VersionSparse}, c.TopicID)
	entries := Canonical(c.Entries)
	body = binary.AppendUvarint(body, uint64(len(entries)))
	for _, e := range entries {
		body = binary.AppendUvarint(body, e.Source)
		body = append(body, e.SliceBits)
		body = binary.AppendUvarint(body, e.SliceStart)
		body = binary.AppendUvarint(body, e.Offset)
	}
	got, err := Decode(testKey, c.TopicID, rawOf(testKey, body))
	if err != nil || !slices.Equal(got.Entries, entries) {
		t.Fatalf("sparse cursor: %v %v", got.Entries, err)
	}
}

// TestCursorSizeWithManyRanges: a topic's cursor holds one entry per
// range; with ranges tiling the keyspace in id order, as a topic's first
// ranges do, an entry costs a few bytes, and 10,000 ranges still decode.
func TestCursorSizeWithManyRanges(t *testing.T) {
	for _, tc := range []struct {
		ranges, bits int
		max          int // bytes of the encoded cursor
	}{{1024, 10, 1024 * 7}, {10_000, 14, 10_000 * 7}, {16_384, 14, 16_384 * 7}} {
		c := Cursor{TopicID: 7}
		slice := uint8(16 - tc.bits)
		for i := range tc.ranges {
			c.Entries = append(c.Entries, Entry{Source: uint64(i + 1), SliceStart: uint64(i) << slice, SliceBits: slice, Offset: 1_000_000})
		}
		s := Encode(testKey, c)
		t.Logf("%d ranges: cursor of %d bytes", tc.ranges, len(s))
		if len(s) > tc.max {
			t.Errorf("%d ranges: cursor of %d bytes, want at most %d", tc.ranges, len(s), tc.max)
		}
		got, err := Decode(testKey, 7, s)
		if err != nil || len(got.Entries) != tc.ranges {
			t.Fatalf("%d ranges: decode: %d entries, %v", tc.ranges, len(got.Entries), err)
		}
	}
}

// TestPropCanonical checks Canonical against its definition (sort by
// source, slice start and slice bits; of entries equal in those, keep the
// highest offset), on entries drawn in any order and on entries already
// sorted, with and without duplicates: the sorted input takes a shortcut
// that must give the same answer, never a slice that shares the input.
func TestPropCanonical(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 30).Draw(t, "n")
		in := make([]Entry, 0, n)
		for range n {
			in = append(in, e(rapid.Uint64Range(0, 4).Draw(t, "source"), rapid.Uint64Range(0, 3).Draw(t, "idx")<<2,
				2, rapid.Uint64Range(0, 9).Draw(t, "offset")))
		}
		if rapid.Bool().Draw(t, "presorted") {
			slices.SortFunc(in, Compare)
		}
		orig := slices.Clone(in)
		want := slices.Clone(in)
		slices.SortStableFunc(want, func(a, b Entry) int {
			if c := Compare(a, b); c != 0 {
				return c
			}
			return cmp.Compare(b.Offset, a.Offset)
		})
		want = slices.CompactFunc(want, func(a, b Entry) bool { return Compare(a, b) == 0 })
		got := Canonical(in)
		if !slices.Equal(got, want) {
			t.Fatalf("Canonical(%v) = %v, want %v", orig, got, want)
		}
		if !slices.Equal(in, orig) {
			t.Fatalf("Canonical modified its input: %v, was %v", in, orig)
		}
		if len(got) > 0 {
			got[0].Offset++
			if in[0] == got[0] {
				t.Fatal("Canonical's answer shares the input's array")
			}
		}
	})
}
