package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

var produceLimits = ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1000, MaxHeaders: 4}

// produceRecords is what a producer may send: timestamps >= 0, no expiry,
// nil and empty keys and values, headers, tombstones.
func produceRecords() []Record {
	return []Record{
		{Timestamp: 1_700_000_000_000, Key: []byte("k1"), Value: []byte("v1")},
		{Timestamp: 1_699_999_999_000, Key: nil, Value: []byte{}},
		{Timestamp: 1_700_000_000_500, Key: []byte{}, Value: nil},
		{Timestamp: 0, Key: []byte("h"), Value: bytes.Repeat([]byte("x"), 3000),
			Headers: []Header{{Key: nil, Value: []byte{}}, {Key: []byte{}, Value: nil}, {Key: []byte("a"), Value: []byte("b")}}},
		{Timestamp: math.MaxInt64, Key: []byte("last"), Value: []byte("last")},
	}
}

func mustEncode(t testing.TB, base uint64, recs []Record, codec Codec) []byte {
	t.Helper()
	b, err := EncodeBatch(nil, base, recs, codec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawRecord encodes one record of a records section as it stands, so tests
// can build sections EncodeBatch would refuse to.
func rawRecord(delta uint64, tsDelta int64, expiry uint64, key, value []byte, headers ...Header) []byte {
	b := binary.AppendUvarint(nil, delta)
	b = binary.AppendVarint(b, tsDelta)
	b = binary.AppendUvarint(b, expiry)
	b = appendBytes(b, key)
	b = appendBytes(b, value)
	b = binary.AppendUvarint(b, uint64(len(headers)))
	for _, h := range headers {
		b = appendBytes(b, h.Key)
		b = appendBytes(b, h.Value)
	}
	return b
}

// assemble builds a batch around a records section (compressed with codec)
// with the header fields given, and a correct CRC.
func assemble(t testing.TB, raw []byte, codec Codec, count uint32, s summary) []byte {
	t.Helper()
	b := make([]byte, HeaderSize)
	if codec == CodecNone {
		b = append(b, raw...)
	} else {
		var err error
		if b, err = compress(b, raw, codec); err != nil {
			t.Fatal(err)
		}
	}
	s.flags |= uint16(codec)
	putHeader(b, 0, len(b), len(raw), count, s)
	return b
}

// withHeader returns a copy of b with f applied to it and the CRC fixed.
func withHeader(b []byte, f func(b []byte)) []byte {
	c := append([]byte(nil), b...)
	f(c)
	return fixCRC(c)
}

func putU32(off int, v uint32) func([]byte) {
	return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
}

func putU64(off int, v uint64) func([]byte) {
	return func(b []byte) { binary.LittleEndian.PutUint64(b[off:], v) }
}

func allInside([]byte) bool { return true }

func TestCheckProduceAccepts(t *testing.T) {
	sets := map[string][]Record{
		"sample": produceRecords(),
		"one":    {{Value: []byte("v")}},
		"tombstones only": {
			{Key: []byte("a")}, {Key: []byte("b"), Timestamp: 5},
		},
		"empty everything": {{Key: []byte{}, Value: []byte{}, Headers: []Header{{}, {Key: []byte{}, Value: []byte{}}}}},
		"many": func() []Record {
			recs := make([]Record, 300)
			for i := range recs {
				recs[i] = Record{Timestamp: int64(i * 7 % 50), Key: []byte(fmt.Sprint("key", i)), Value: bytes.Repeat([]byte{byte(i)}, i)}
			}
			return recs
		}(),
	}
	for name, recs := range sets {
		for _, codec := range allCodecs {
			t.Run(fmt.Sprintf("%s/%v", name, codec), func(t *testing.T) {
				b := mustEncode(t, 12345, recs, codec)
				var keys [][]byte
				h, in, err := CheckProduce(b, produceLimits, func(k []byte) bool {
					keys = append(keys, k)
					return true
				})
				if err != nil || !in {
					t.Fatalf("refused: in=%v err=%v", in, err)
				}
				want, _ := ParseHeader(b)
				if h != want {
					t.Fatalf("header\n got %+v\nwant %+v", h, want)
				}
				if err := Verify(b); err != nil {
					t.Fatal(err)
				}
				got, err := DecodeRecords(b, nil)
				if err != nil || len(got) != int(h.RecordCount) {
					t.Fatalf("decode: %d records, %v", len(got), err)
				}
				var wantKeys [][]byte
				for _, r := range recs {
					if r.Key != nil {
						wantKeys = append(wantKeys, r.Key)
					}
				}
				if len(keys) != len(wantKeys) {
					t.Fatalf("inside called for %d keys, want %d", len(keys), len(wantKeys))
				}
				for i := range keys {
					if !bytes.Equal(keys[i], wantKeys[i]) {
						t.Fatalf("key %d: %q, want %q", i, keys[i], wantKeys[i])
					}
				}
				// A nil inside accepts every key.
				if _, in, err := CheckProduce(b, produceLimits, nil); err != nil || !in {
					t.Fatalf("nil inside: %v %v", in, err)
				}
			})
		}
	}
}

func TestCheckProduceKeysOutside(t *testing.T) {
	for _, codec := range allCodecs {
		b := mustEncode(t, 0, produceRecords(), codec)
		calls := 0
		h, in, err := CheckProduce(b, produceLimits, func(k []byte) bool {
			calls++
			return string(k) != "h"
		})
		if err != nil || in || h.RecordCount != 5 {
			t.Fatalf("%v: in=%v err=%v h=%+v; want a valid batch with keys outside", codec, in, err, h)
		}
		if calls != 4 { // every non-nil key, also after the one outside
			t.Fatalf("%v: inside called %d times, want 4", codec, calls)
		}
	}
}

func TestCheckProduceRefuses(t *testing.T) {
	good := mustEncode(t, 100, produceRecords(), CodecNone)
	goodZstd := mustEncode(t, 100, produceRecords(), CodecZstd)
	one := rawRecord(0, 0, 0, []byte("k"), []byte("v"))
	ts := summary{firstTS: 10, maxTS: 10}

	tests := []struct {
		name string
		b    []byte
		lim  ProduceLimits
		want string
	}{
		{"short", good[:HeaderSize-1], produceLimits, "shorter than"},
		{"unknown version", withHeader(good, func(b []byte) { b[offVersion] = 2 }), produceLimits, "version 2"},
		{"unknown flag", withHeader(good, func(b []byte) { b[offFlags+1] = 0x40 }), produceLimits, "unknown flags"},
		{"wrong crc", withHeader(good, func(b []byte) {}) /* copy */, produceLimits, "crc mismatch"},
		{"wrong crc zstd", append([]byte(nil), goodZstd...), produceLimits, "crc mismatch"},
		{"count above span", withHeader(good, putU32(offCount, 6)), produceLimits, "record count 6 but offsets span 5"},
		{"count below span", withHeader(good, putU32(offLastDelta, 6)), produceLimits, "record count 5 but offsets span 7"},
		{"holes", func() []byte {
			b, err := EncodeBatchAt(nil, withOffsets(produceRecords()[:3], 10, 12, 13), CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}(), produceLimits, "record count 3 but offsets span 4"},
		{"length field above slice", withHeader(good, putU32(offLength, uint32(len(good)+1))), produceLimits,
			fmt.Sprintf("length field says %d bytes but %d were sent", len(good)+1, len(good))},
		{"slice longer than length field", append(append([]byte(nil), good...), 0), produceLimits,
			fmt.Sprintf("length field says %d bytes but %d were sent", len(good), len(good)+1)},
		{"two batches", append(append([]byte(nil), good...), good...), produceLimits, "length field says"},
		{"trailing bytes", assemble(t, append(append([]byte(nil), one...), 0, 0, 0), CodecNone, 1, ts), produceLimits,
			"3 trailing bytes after 1 records"},
		{"trailing bytes s2", assemble(t, append(append([]byte(nil), one...), 0, 0, 0), CodecS2, 1, ts), produceLimits,
			"3 trailing bytes after 1 records"},
		{"offset delta repeated", assemble(t, append(append(append([]byte(nil), one...), rawRecord(1, 0, 0, nil, []byte("v"))...),
			rawRecord(1, 0, 0, nil, []byte("v"))...), CodecNone, 3, summary{lastDelta: 2, firstTS: 10, maxTS: 10}), produceLimits,
			"record 2 offset delta 1 not increasing"},
		{"offset delta decreasing", assemble(t, append(append(append([]byte(nil), one...), rawRecord(2, 0, 0, nil, []byte("v"))...),
			rawRecord(1, 0, 0, nil, []byte("v"))...), CodecZstd, 3, summary{lastDelta: 2, firstTS: 10, maxTS: 10}), produceLimits,
			"record 2 offset delta 1 not increasing"},
		{"first timestamp negative", mustEncode(t, 0, []Record{{Timestamp: -1, Value: []byte("v")}}, CodecNone), produceLimits,
			"first timestamp -1 is negative"},
		{"record timestamp negative", assemble(t, append(append([]byte(nil), one...), rawRecord(1, -20, 0, nil, []byte("v"))...),
			CodecNone, 2, summary{lastDelta: 1, firstTS: 10, maxTS: 10}), produceLimits, "record 1 timestamp -10 is negative"},
		{"record timestamp negative by wrapping", assemble(t, append(append([]byte(nil), one...), rawRecord(1, math.MaxInt64, 0, nil, []byte("v"))...),
			CodecNone, 2, summary{lastDelta: 1, firstTS: 10, maxTS: 10}), produceLimits, "record 1 timestamp"},
		{"max timestamp above records", withHeader(good, putU64(offMaxTS, math.MaxInt64-1)), produceLimits,
			fmt.Sprintf("max timestamp %d, header says %d", int64(math.MaxInt64), int64(math.MaxInt64-1))},
		{"max timestamp below records", assemble(t, append(append([]byte(nil), one...), rawRecord(1, 5, 0, nil, []byte("v"))...),
			CodecS2, 2, summary{lastDelta: 1, firstTS: 10, maxTS: 12}), produceLimits, "max timestamp 15, header says 12"},
		{"raw length above limit", good, ProduceLimits{MaxRawBytes: 1024, MaxRecords: 1000, MaxHeaders: 4},
			fmt.Sprintf("raw length %d above limit 1024", len(good)-HeaderSize)},
		{"raw length above limit zstd", goodZstd, ProduceLimits{MaxRawBytes: 1024, MaxRecords: 1000, MaxHeaders: 4},
			fmt.Sprintf("raw length %d above limit 1024", len(good)-HeaderSize)},
		{"raw length disagrees", withHeader(good, putU32(offRawLength, uint32(len(good)-HeaderSize-1))), produceLimits,
			"raw length says"},
		{"too many records", good, ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 4, MaxHeaders: 4}, "record count 5 above limit 4"},
		{"too many headers", good, ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1000, MaxHeaders: 2},
			"record 3 has 3 headers, above limit 2"},
		{"zero limits", good, ProduceLimits{}, "above limit 0"},
		{"expiry flag", mustEncode(t, 0, []Record{{Value: []byte("a"), Expiry: 5}, {Value: []byte("b")}}, CodecNone), produceLimits,
			"expiry is not accepted"},
		{"record expiry without flag", assemble(t, rawRecord(0, 0, 99, nil, []byte("v")), CodecNone, 1, ts), produceLimits,
			"record 0 has an expiry"},
		{"tombstone flag missing", withHeader(good, func(b []byte) { b[offFlags] &^= FlagTombstones }), produceLimits,
			"disagree with records"},
		{"truncated record", assemble(t, one[:len(one)-1], CodecNone, 1, ts), produceLimits, "record 0 truncated"},
		{"count cannot fit raw", withHeader(assemble(t, one, CodecS2, 1, ts), func(b []byte) {
			putU32(offCount, 2)(b)
			putU32(offLastDelta, 1)(b)
		}), produceLimits, "2 records cannot fit in raw length"},
		{"s2 block larger than raw length", func() []byte {
			b := assemble(t, one, CodecS2, 1, ts)
			b = append(b[:HeaderSize], s2.Encode(nil, make([]byte, 1<<20))...)
			return withHeader(b, putU32(offLength, uint32(len(b))))
		}(), produceLimits, fmt.Sprintf("s2 block claims %d bytes, raw length is %d", 1<<20, len(one))},
		{"lz4 block larger than raw length", func() []byte {
			b := assemble(t, one, CodecLZ4, 1, ts)
			big, err := compress(nil, make([]byte, 1<<20), CodecLZ4)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b[:HeaderSize], big...)
			return withHeader(b, putU32(offLength, uint32(len(b))))
		}(), produceLimits, "lz4"},
		{"lz4 shorter than raw length", func() []byte {
			b := assemble(t, one, CodecLZ4, 1, ts)
			return withHeader(b, putU32(offRawLength, uint32(len(one)+7)))
		}(), produceLimits, "lz4 produced"},
		{"unknown codec", withHeader(good, func(b []byte) { b[offFlags] |= 4 }), produceLimits, "flags"},
		{"zstd shorter than raw length", func() []byte {
			b := assemble(t, one, CodecZstd, 1, ts)
			return withHeader(b, putU32(offRawLength, uint32(len(one)+7)))
		}(), produceLimits, "zstd"},
		{"zstd garbage", func() []byte {
			b := append(make([]byte, HeaderSize), 1, 2, 3, 4, 5, 6, 7, 8)
			putHeader(b, 0, len(b), len(one), 1, summary{firstTS: 10, maxTS: 10, flags: uint16(CodecZstd)})
			return b
		}(), produceLimits, "zstd"},
	}
	// The wrong crc cases flip one bit of the stored CRC.
	for i := range tests {
		if strings.HasPrefix(tests[i].name, "wrong crc") {
			tests[i].b[offCRC] ^= 1
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			h, in, err := CheckProduce(tc.b, tc.lim, func([]byte) bool { called = true; return true })
			if err == nil {
				t.Fatalf("accepted (inside called: %v)", called)
			}
			if !errors.Is(err, ErrBadBatch) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v: want ErrBadBatch and not ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q, want it to say %q", err, tc.want)
			}
			if h != (BatchHeader{}) || in {
				t.Fatalf("refusal returned header %+v, keysInside %v", h, in)
			}
		})
	}
}

func TestCheckProduceVersionError(t *testing.T) {
	b := mustEncode(t, 0, produceRecords(), CodecNone)
	b[offMagic] = 0
	_, _, err := CheckProduce(b, produceLimits, nil)
	if !errors.Is(err, ErrBadBatch) || !errors.Is(err, ErrBadVersion) {
		t.Fatalf("err %v: want ErrBadBatch and ErrBadVersion", err)
	}
}

func TestCheckProduceExpiryAllowed(t *testing.T) {
	recs := []Record{{Value: []byte("a"), Expiry: 5}, {Key: []byte("k"), Expiry: 1_800_000_000_000}}
	lim := produceLimits
	lim.AllowExpiry = true
	for _, codec := range allCodecs {
		b := mustEncode(t, 0, recs, codec)
		if _, _, err := CheckProduce(b, produceLimits, allInside); err == nil {
			t.Fatalf("%v: expiry accepted though not allowed", codec)
		}
		h, in, err := CheckProduce(b, lim, allInside)
		if err != nil || !in || !h.HasExpiry() || h.MaxExpiry != 1_800_000_000_000 {
			t.Fatalf("%v: %+v %v %v", codec, h, in, err)
		}
	}
}

// The base offset's value does not matter, only that the span fits after it.
func TestCheckProduceBaseOffset(t *testing.T) {
	b := mustEncode(t, 0, produceRecords(), CodecNone)
	high := withHeader(b, putU64(offBase, math.MaxUint64-5))
	if h, _, err := CheckProduce(high, produceLimits, nil); err != nil || h.BaseOffset != math.MaxUint64-5 {
		t.Fatalf("base just below the limit: %v", err)
	}
	over := withHeader(b, putU64(offBase, math.MaxUint64-4))
	if _, _, err := CheckProduce(over, produceLimits, nil); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("overflowing base: %v", err)
	}
}

// heapAllocBytes reports the bytes f allocates (Mallocs may also count
// other goroutines, so callers bound it loosely).
func heapAllocBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestCheckProduceZstdBomb(t *testing.T) {
	const inflated = 64 << 20
	zeros := make([]byte, inflated)
	one := rawRecord(0, 0, 0, []byte("k"), []byte("v"))

	// EncodeAll declares the frame's content size; a stream written
	// through the Writer does not, so the decoder only learns the size by
	// producing it.
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	declared := enc.EncodeAll(zeros, nil)
	var buf bytes.Buffer
	enc.Reset(&buf)
	for i := 0; i < inflated; i += 1 << 20 {
		if _, err := enc.Write(zeros[i : i+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	undeclared := buf.Bytes()
	zeros = nil

	for name, frame := range map[string][]byte{"content size declared": declared, "content size unknown": undeclared} {
		t.Run(name, func(t *testing.T) {
			if len(frame) > 64<<10 {
				t.Fatalf("bomb is %d bytes; not much of a bomb", len(frame))
			}
			b := append(make([]byte, HeaderSize), frame...)
			putHeader(b, 0, len(b), len(one), 1, summary{flags: uint16(CodecZstd)})
			if err := Verify(b); err != nil {
				t.Fatal(err)
			}
			var cerr error
			alloc := heapAllocBytes(func() {
				for i := 0; i < 4; i++ {
					_, _, cerr = CheckProduce(b, produceLimits, nil)
				}
			})
			if !errors.Is(cerr, ErrBadBatch) || !strings.Contains(cerr.Error(), "zstd") {
				t.Fatalf("bomb: %v", cerr)
			}
			// Four checks of a 64 MiB bomb: a full inflation would cost 256 MiB.
			if alloc > 4<<20 {
				t.Fatalf("four checks allocated %d bytes", alloc)
			}
			// The CRC matches, so a reader decoding it (a replica's copy,
			// a damaged disk) must stop as early.
			var derr error
			alloc = heapAllocBytes(func() {
				for i := 0; i < 4; i++ {
					_, derr = DecodeRecords(b, nil)
				}
			})
			if !errors.Is(derr, ErrCorrupt) || alloc > 4<<20 {
				t.Fatalf("decode of the bomb: %v after allocating %d bytes", derr, alloc)
			}
			t.Logf("%s: %d-byte frame refused (%v); four checks allocated %d bytes", name, len(frame), cerr, alloc)
		})
	}
}

// An s2 block claiming more than raw length is refused before it is decoded.
func TestCheckProduceS2ClaimNotAllocated(t *testing.T) {
	one := rawRecord(0, 0, 0, []byte("k"), []byte("v"))
	body := s2.Encode(nil, make([]byte, 16<<20))
	b := append(make([]byte, HeaderSize), body...)
	putHeader(b, 0, len(b), len(one), 1, summary{flags: uint16(CodecS2)})
	lim := produceLimits
	lim.MaxRawBytes = 32 << 20
	var err error
	alloc := heapAllocBytes(func() { _, _, err = CheckProduce(b, lim, nil) })
	if !errors.Is(err, ErrBadBatch) || alloc > 1<<20 {
		t.Fatalf("err %v, %d bytes allocated", err, alloc)
	}
}

func hundredRecords() []Record {
	recs := make([]Record, 100)
	for i := range recs {
		recs[i] = Record{Timestamp: 1_700_000_000_000 + int64(i), Key: []byte(fmt.Sprint("key-", i)), Value: bytes.Repeat([]byte("v"), 50)}
		if i%10 == 0 {
			recs[i].Headers = []Header{{Key: []byte("h"), Value: []byte("x")}}
		}
	}
	return recs
}

func TestCheckProduceAllocs(t *testing.T) {
	b := mustEncode(t, 0, hundredRecords(), CodecNone)
	keys := 0
	inside := func(k []byte) bool { keys++; return len(k) > 0 }
	allocs := testing.AllocsPerRun(100, func() {
		if _, in, err := CheckProduce(b, produceLimits, inside); err != nil || !in {
			t.Fatal(in, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("uncompressed 100-record batch: %v allocations per check, want 0", allocs)
	}
	// Compressed batches allocate, but not per record.
	for _, codec := range []Codec{CodecZstd, CodecS2, CodecLZ4} {
		b := mustEncode(t, 0, hundredRecords(), codec)
		allocs := testing.AllocsPerRun(100, func() {
			if _, _, err := CheckProduce(b, produceLimits, inside); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 10 {
			t.Fatalf("%v 100-record batch: %v allocations per check", codec, allocs)
		}
	}
}

func BenchmarkCheckProduce(b *testing.B) {
	recs := make([]Record, 512)
	for i := range recs {
		recs[i] = Record{Timestamp: 1_700_000_000_000 + int64(i), Key: []byte(fmt.Sprintf("key-%06d", i)), Value: bytes.Repeat([]byte{byte(i)}, 128)}
	}
	for _, codec := range allCodecs {
		batch := mustEncode(b, 0, recs, codec)
		lim := ProduceLimits{MaxRawBytes: MaxBatchSize, MaxRecords: 1 << 20, MaxHeaders: 16}
		h, _ := ParseHeader(batch)
		b.Run(codec.String(), func(b *testing.B) {
			// Throughput is of the batch as uncompressed, so codecs compare.
			b.SetBytes(int64(HeaderSize + h.RawLength))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := CheckProduce(batch, lim, allInside); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzCheckProduce checks that CheckProduce never panics, that whatever it
// accepts decodes and keeps the producer rules, and (differentially) that it
// accepts every batch DecodeRecords accepts that keeps those rules.
func FuzzCheckProduce(f *testing.F) {
	expiring := []Record{{Value: []byte("a"), Expiry: 5}, {Key: []byte("xk"), Expiry: 9, Headers: []Header{{}, {}, {}}}}
	for i, codec := range allCodecs {
		for _, recs := range [][]Record{produceRecords(), hundredRecords()[:20], expiring} {
			f.Add(mustEncode(f, uint64(i), recs, codec))
		}
		b, _ := EncodeBatchAt(nil, withOffsets(produceRecords()[:2], 3, 70), codec)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	strict := ProduceLimits{MaxRawBytes: 4096, MaxRecords: 16, MaxHeaders: 2}
	loose := ProduceLimits{MaxRawBytes: MaxBatchSize, MaxRecords: math.MaxInt, MaxHeaders: math.MaxInt, AllowExpiry: true}
	inside := func(k []byte) bool { return len(k) == 0 || k[0] != 'x' }
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, fixCRC(b)} {
			for _, lim := range []ProduceLimits{strict, loose} {
				h, keysInside, err := CheckProduce(in, lim, inside)
				if err != nil {
					if !errors.Is(err, ErrBadBatch) || errors.Is(err, ErrCorrupt) || keysInside || h != (BatchHeader{}) {
						t.Fatalf("refusal: %v, keysInside %v, header %+v", err, keysInside, h)
					}
					continue
				}
				checkAccepted(t, in, lim, h, keysInside, inside)
			}
			// Differential: a batch that decodes and keeps the producer
			// rules must be accepted under limits that bound nothing.
			recs, err := DecodeRecords(in, nil)
			if err != nil {
				continue
			}
			h, _ := ParseHeader(in)
			ok := h.Length == len(in) && uint64(h.RecordCount) == uint64(h.LastOffsetDelta)+1
			for _, r := range recs {
				ok = ok && r.Timestamp >= 0
			}
			if _, _, err := CheckProduce(in, loose, inside); ok != (err == nil) {
				t.Fatalf("DecodeRecords accepts, producer rules kept: %v, CheckProduce: %v", ok, err)
			}
		}
	})
}

func checkAccepted(t *testing.T, b []byte, lim ProduceLimits, h BatchHeader, keysInside bool, inside func([]byte) bool) {
	t.Helper()
	if ph, err := ParseHeader(b); err != nil || ph != h || h.Length != len(b) {
		t.Fatalf("accepted header %+v, ParseHeader %+v %v, %d bytes", h, ph, err, len(b))
	}
	if err := Verify(b); err != nil {
		t.Fatalf("accepted batch fails Verify: %v", err)
	}
	recs, err := DecodeRecords(b, nil)
	if err != nil || len(recs) != int(h.RecordCount) {
		t.Fatalf("accepted batch decodes to %d records (header %d): %v", len(recs), h.RecordCount, err)
	}
	if h.RawLength > lim.MaxRawBytes || len(recs) > lim.MaxRecords || h.FirstTimestamp < 0 {
		t.Fatalf("accepted header breaks the limits: %+v", h)
	}
	allInside := true
	for i, r := range recs {
		switch {
		case r.Offset != h.BaseOffset+uint64(i):
			t.Fatalf("record %d at offset %d, base %d", i, r.Offset, h.BaseOffset)
		case r.Timestamp < 0:
			t.Fatalf("record %d timestamp %d", i, r.Timestamp)
		case len(r.Headers) > lim.MaxHeaders:
			t.Fatalf("record %d has %d headers", i, len(r.Headers))
		case r.Expiry != 0 && !lim.AllowExpiry:
			t.Fatalf("record %d has expiry %d", i, r.Expiry)
		}
		if r.Key != nil && !inside(r.Key) {
			allInside = false
		}
	}
	if allInside != keysInside {
		t.Fatalf("keysInside %v, records say %v", keysInside, allInside)
	}
	// The broker's path: rebase a copy, then it must still decode.
	c := append([]byte(nil), b...)
	if err := Rebase(c, 1000); err != nil {
		t.Fatalf("rebase: %v", err)
	}
	if again, err := DecodeRecords(c, nil); err != nil || len(again) != len(recs) || again[0].Offset != 1000 {
		t.Fatalf("rebased batch: %v", err)
	}
}
