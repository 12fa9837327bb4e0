package batch

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

var allCodecs = []Codec{CodecNone, CodecZstd, CodecS2, CodecLZ4}

// sampleRecords covers nil vs empty keys, values and header parts,
// tombstones, expiry and negative and large timestamps.
func sampleRecords() []Record {
	return []Record{
		{Timestamp: 1_700_000_000_000, Key: []byte("k1"), Value: []byte("v1")},
		{Timestamp: 1_699_999_999_000, Key: nil, Value: []byte{}},
		{Timestamp: 1_700_000_000_500, Key: []byte{}, Value: nil, Expiry: 1_700_000_100_000},
		{Timestamp: math.MinInt64, Key: []byte("h"), Value: bytes.Repeat([]byte("x"), 3000),
			Headers: []Header{{Key: nil, Value: []byte{}}, {Key: []byte{}, Value: nil}, {Key: []byte("a"), Value: []byte("b")}}},
		{Timestamp: math.MaxInt64, Expiry: 1, Value: []byte("last")},
	}
}

// sameRecord compares records keeping nil and empty distinct.
func sameRecord(a, b Record) bool {
	if a.Offset != b.Offset || a.Timestamp != b.Timestamp || a.Expiry != b.Expiry ||
		!sameBytes(a.Key, b.Key) || !sameBytes(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if !sameBytes(a.Headers[i].Key, b.Headers[i].Key) || !sameBytes(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func withOffsets(recs []Record, offs ...uint64) []Record {
	out := append([]Record(nil), recs...)
	for i := range out {
		out[i].Offset = offs[i]
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	recs := sampleRecords()
	for _, codec := range allCodecs {
		for _, holes := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/holes=%v", codec, holes), func(t *testing.T) {
				want := withOffsets(recs, 100, 101, 102, 103, 104)
				var b []byte
				var err error
				if holes {
					want = withOffsets(recs, 7, 9, 1000, 1001, 1<<31)
					b, err = EncodeBatchAt([]byte("prefix"), want, codec)
				} else {
					b, err = EncodeBatch([]byte("prefix"), 100, recs, codec)
				}
				if err != nil {
					t.Fatal(err)
				}
				if string(b[:6]) != "prefix" {
					t.Fatal("encode did not append to dst")
				}
				b = b[6:]
				got, err := DecodeRecords(b, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%d records, want %d", len(got), len(want))
				}
				for i := range want {
					if !sameRecord(got[i], want[i]) {
						t.Fatalf("record %d:\n got %+v\nwant %+v", i, got[i], want[i])
					}
				}
				checkHeader(t, b, want, codec)
			})
		}
	}
}

func checkHeader(t *testing.T, b []byte, recs []Record, codec Codec) {
	t.Helper()
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1].Offset
	want := BatchHeader{
		BaseOffset: recs[0].Offset, LastOffsetDelta: uint32(last - recs[0].Offset),
		RecordCount: uint32(len(recs)), FirstTimestamp: recs[0].Timestamp, MaxTimestamp: math.MaxInt64,
		MaxExpiry: 0, // records without expiry: the batch never fully expires
		Flags:     uint16(codec) | FlagTombstones | FlagExpiry, Length: len(b), RawLength: h.RawLength,
	}
	if h != want {
		t.Fatalf("header\n got %+v\nwant %+v", h, want)
	}
	if h.Codec() != codec || !h.HasTombstones() || !h.HasExpiry() || h.LastOffset() != last {
		t.Fatal("header accessors disagree")
	}
}

func TestHeaderSummaries(t *testing.T) {
	tests := []struct {
		name       string
		recs       []Record
		maxExpiry  int64
		tomb, expi bool
	}{
		{"no expiry", []Record{{Value: []byte("a")}}, 0, false, false},
		{"all expire", []Record{{Value: []byte("a"), Expiry: 5}, {Value: []byte("b"), Expiry: 9}}, 9, false, true},
		{"one never", []Record{{Value: []byte("a"), Expiry: 5}, {Value: []byte("b")}}, 0, false, true},
		{"tombstone only", []Record{{Key: []byte("k")}}, 0, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeBatch(nil, 0, tc.recs, CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := ParseHeader(b)
			if h.MaxExpiry != tc.maxExpiry || h.HasTombstones() != tc.tomb || h.HasExpiry() != tc.expi {
				t.Fatalf("header %+v", h)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	one := []Record{{Value: []byte("v")}}
	tests := []struct {
		name string
		enc  func() ([]byte, error)
	}{
		{"empty", func() ([]byte, error) { return EncodeBatch(nil, 0, nil, CodecNone) }},
		{"empty at", func() ([]byte, error) { return EncodeBatchAt(nil, nil, CodecNone) }},
		{"bad codec", func() ([]byte, error) { return EncodeBatch(nil, 0, one, Codec(7)) }},
		{"negative expiry", func() ([]byte, error) {
			return EncodeBatch(nil, 0, []Record{{Expiry: -1}}, CodecNone)
		}},
		{"not increasing", func() ([]byte, error) {
			return EncodeBatchAt(nil, []Record{{Offset: 5}, {Offset: 5}}, CodecNone)
		}},
		{"span too wide", func() ([]byte, error) {
			return EncodeBatchAt(nil, []Record{{Offset: 0}, {Offset: 1 << 32}}, CodecNone)
		}},
		{"last offset at max", func() ([]byte, error) { return EncodeBatch(nil, math.MaxUint64, one, CodecNone) }},
		{"too large", func() ([]byte, error) {
			return EncodeBatch(nil, 0, []Record{{Value: make([]byte, MaxBatchSize)}}, CodecNone)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.enc()
			if !errors.Is(err, ErrInvalid) || len(b) != 0 {
				t.Fatalf("got %d bytes, err %v; want ErrInvalid", len(b), err)
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	good, _ := EncodeBatch(nil, 10, []Record{{Value: []byte("v")}}, CodecNone)
	mutate := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:HeaderSize-1], ErrShortBatch},
		{"zeros", make([]byte, HeaderSize), ErrBadVersion},
		{"version 2", mutate(func(b []byte) { b[offVersion] = 2 }), ErrBadVersion},
		{"length below header", mutate(func(b []byte) { b[offLength], b[offLength+1] = 1, 0 }), ErrCorrupt},
		{"unknown flag", mutate(func(b []byte) { b[offFlags+1] = 0x80 }), ErrCorrupt},
		{"codec 5", mutate(func(b []byte) { b[offFlags] = 5 }), ErrCorrupt},
		{"zero records", mutate(func(b []byte) { b[offCount] = 0 }), ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseHeader(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// Every single-byte change anywhere in a batch is caught by Verify or
// ParseHeader.
func TestVerifyCatchesEveryByteFlip(t *testing.T) {
	for _, codec := range allCodecs {
		b, err := EncodeBatch(nil, 42, sampleRecords()[:3], codec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			c := append([]byte(nil), b...)
			c[i] ^= 0x40
			if Verify(c) == nil {
				t.Fatalf("%v: flip at byte %d not detected", codec, i)
			}
			if _, err := DecodeRecords(c, nil); err == nil {
				t.Fatalf("%v: decode accepted flip at byte %d", codec, i)
			}
		}
	}
}

func TestSplitBatches(t *testing.T) {
	var buf []byte
	var want [][]Record
	for i, codec := range allCodecs {
		recs := sampleRecords()[i : i+2]
		buf, _ = EncodeBatch(buf, uint64(10*i), recs, codec)
		want = append(want, recs)
	}
	parts, err := SplitBatches(buf)
	if err != nil || len(parts) != len(allCodecs) {
		t.Fatalf("split: %d parts, %v", len(parts), err)
	}
	for i, p := range parts {
		got, err := DecodeRecords(p, nil)
		if err != nil || len(got) != 2 || got[0].Offset != uint64(10*i) || !reflect.DeepEqual(got[1].Value, want[i][1].Value) {
			t.Fatalf("batch %d: %v %+v", i, err, got)
		}
	}
	if _, err := SplitBatches(buf[:len(buf)-1]); !errors.Is(err, ErrShortBatch) {
		t.Fatalf("truncated split: %v", err)
	}
}

func TestDecodeAppendsAndKeepsDstOnError(t *testing.T) {
	b, _ := EncodeBatch(nil, 0, []Record{{Value: []byte("a")}}, CodecNone)
	dst := []Record{{Offset: 99}}
	dst, err := DecodeRecords(b, dst)
	if err != nil || len(dst) != 2 || dst[0].Offset != 99 {
		t.Fatalf("append: %v %+v", err, dst)
	}
	dst, err = DecodeRecords(b[:len(b)-1], dst)
	if err == nil || len(dst) != 2 {
		t.Fatalf("error path changed dst: %v %d", err, len(dst))
	}
}

func TestRebase(t *testing.T) {
	b, _ := EncodeBatchAt(nil, withOffsets(sampleRecords()[:2], 10, 14), CodecS2)
	if err := Rebase(b, 1000); err != nil {
		t.Fatal(err)
	}
	recs, err := DecodeRecords(b, nil)
	if err != nil || recs[0].Offset != 1000 || recs[1].Offset != 1004 {
		t.Fatalf("rebased: %v %+v", err, recs)
	}
	if err := Rebase(b, math.MaxUint64-4); !errors.Is(err, ErrInvalid) {
		t.Fatalf("overflow: %v", err)
	}
	b[len(b)-1] ^= 1
	if err := Rebase(b, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt input: %v", err)
	}
}

// Restamp writes what Rebase writes, without checking the CRC first.
func TestRestampMatchesRebase(t *testing.T) {
	a, _ := EncodeBatchAt(nil, withOffsets(sampleRecords()[:2], 10, 14), CodecZstd)
	b := bytes.Clone(a)
	if err := Rebase(a, 77); err != nil {
		t.Fatal(err)
	}
	if err := Restamp(b, 77); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("Restamp wrote %x, Rebase %x", b, a)
	}
	if err := Restamp(b, math.MaxUint64-4); !errors.Is(err, ErrInvalid) {
		t.Fatalf("overflow: %v", err)
	}
	if err := Restamp(b[:len(b)-1], 0); !errors.Is(err, ErrShortBatch) {
		t.Fatalf("short: %v", err)
	}
}
