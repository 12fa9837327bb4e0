package batch

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// randomRecords covers the encoding's corners: nil and empty keys, values
// and header parts, tombstones, expiries, large fields, timestamps out of
// order.
func randomRecords(rng *rand.Rand, n int) []Record {
	pick := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		case 2:
			return bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(300))
		}
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	recs := make([]Record, n)
	for i := range recs {
		r := Record{Key: pick(), Value: pick(), Timestamp: 1_700_000_000_000 + rng.Int64N(2000) - 1000}
		if rng.IntN(3) == 0 {
			r.Expiry = 1_700_000_000_000 + rng.Int64N(1<<40)
		}
		for range rng.IntN(3) {
			r.Headers = append(r.Headers, Header{Key: pick(), Value: pick()})
		}
		recs[i] = r
	}
	return recs
}

func build(t testing.TB, recs []Record, codec Codec, maxRatio int) []byte {
	t.Helper()
	var b Builder
	for i := range recs {
		before := b.RawLen()
		b.AddRecord(&recs[i])
		fields := FieldSize(len(recs[i].Key)) + FieldSize(len(recs[i].Value))
		for _, h := range recs[i].Headers {
			fields += FieldSize(len(h.Key)) + FieldSize(len(h.Value))
		}
		if grew, bound := b.RawLen()-before, RecordSize(recs[i].Expiry, len(recs[i].Headers), fields); grew > bound {
			t.Fatalf("record %d took %d bytes, RecordSize said at most %d", i, grew, bound)
		}
		if b.Len() != i+1 {
			t.Fatalf("Len %d after %d records", b.Len(), i+1)
		}
	}
	out, err := b.Finish(codec, maxRatio)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 || b.RawLen() != 0 {
		t.Fatalf("Finish left %d records, %d bytes", b.Len(), b.RawLen())
	}
	return out
}

// TestBuilderMatchesEncodeBatch: the Builder writes the bytes EncodeBatch
// writes at base 0, with the codec asked for when it pays.
func TestBuilderMatchesEncodeBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, codec := range allCodecs {
		for _, n := range []int{1, 2, 17, 500} {
			t.Run(fmt.Sprintf("%v/%d", codec, n), func(t *testing.T) {
				recs := randomRecords(rng, n)
				got := build(t, recs, codec, 0)
				h, err := ParseHeader(got)
				if err != nil {
					t.Fatal(err)
				}
				want, err := EncodeBatch(nil, 0, recs, h.Codec())
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("builder batch of %d bytes differs from EncodeBatch's %d bytes", len(got), len(want))
				}
				if h.Codec() != codec && n > 2 {
					t.Fatalf("sent as %v, want %v", h.Codec(), codec)
				}
				Release(got)
			})
		}
	}
}

// TestBuilderCompressionThatDoesNotPay: a records section that does not
// shrink (random bytes), or shrinks more than maxRatio times (zeros, with
// zstd and s2), goes uncompressed; one that shrinks reasonably goes
// compressed.
func TestBuilderCompressionThatDoesNotPay(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	random := make([]byte, 4000)
	for i := range random {
		random[i] = byte(rng.IntN(256))
	}
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog "), 100)
	zeros := make([]byte, 200<<10)
	const ratio = 1024
	// lz4 never shrinks anything past about 255 times.
	zerosCodec := map[Codec]Codec{CodecZstd: CodecNone, CodecS2: CodecNone, CodecLZ4: CodecLZ4}
	for _, codec := range []Codec{CodecZstd, CodecS2, CodecLZ4} {
		for _, tc := range []struct {
			name  string
			value []byte
			want  Codec
		}{{"random", random, CodecNone}, {"text", text, codec}, {"zeros", zeros, zerosCodec[codec]}} {
			b := build(t, []Record{{Key: []byte("k"), Value: tc.value}}, codec, ratio)
			h, err := ParseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.Codec() != tc.want {
				t.Errorf("%v, %s: sent as %v, want %v", codec, tc.name, h.Codec(), tc.want)
			}
			if h.RawLength > ratio*(len(b)-HeaderSize) {
				t.Errorf("%v, %s: claims to inflate %d times", codec, tc.name, h.RawLength/(len(b)-HeaderSize))
			}
			if recs, err := DecodeRecords(b, nil); err != nil || len(recs) != 1 || !bytes.Equal(recs[0].Value, tc.value) {
				t.Errorf("%v, %s: decodes to %d records, %v", codec, tc.name, len(recs), err)
			}
		}
	}
	// Without a bound, zeros compress.
	if h, _ := ParseHeader(build(t, []Record{{Value: zeros}}, CodecZstd, 0)); h.Codec() != CodecZstd {
		t.Errorf("zeros without a ratio bound sent as %v", h.Codec())
	}
}

func TestBuilderErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec Codec
		add   func(b *Builder)
		want  error
	}{
		{"empty", CodecNone, func(*Builder) {}, ErrInvalid},
		{"missing header", CodecNone, func(b *Builder) { b.Add(0, 0, nil, nil, 2); b.AddHeader(nil, nil) }, ErrInvalid},
		{"missing header before next", CodecNone, func(b *Builder) { b.Add(0, 0, nil, nil, 1); b.Add(0, 0, nil, nil, 0) }, ErrInvalid},
		{"extra header", CodecNone, func(b *Builder) { b.Add(0, 0, nil, nil, 1); b.AddHeaderString("a", nil); b.AddHeaderString("b", nil) }, ErrInvalid},
		{"negative expiry", CodecNone, func(b *Builder) { b.Add(0, -1, nil, nil, 0) }, ErrInvalid},
		{"negative headers", CodecNone, func(b *Builder) { b.Add(0, 0, nil, nil, -1) }, ErrInvalid},
		{"codec", Codec(7), func(b *Builder) { b.Add(0, 0, nil, nil, 0) }, ErrInvalid},
		{"too large", CodecNone, func(b *Builder) { b.Add(0, 0, nil, make([]byte, MaxBatchSize), 0) }, ErrTooLarge},
	} {
		var b Builder
		tc.add(&b)
		out, err := b.Finish(tc.codec, 0)
		if !errors.Is(err, tc.want) || !errors.Is(err, ErrInvalid) || out != nil {
			t.Errorf("%s: %d bytes, %v; want %v", tc.name, len(out), err, tc.want)
		}
		// The builder is empty and usable again.
		b.Add(5, 0, []byte("k"), []byte("v"), 1)
		b.AddHeaderString("h", []byte("x"))
		out, err = b.Finish(CodecNone, 0)
		if err != nil {
			t.Fatalf("%s: after the error: %v", tc.name, err)
		}
		want, _ := EncodeBatch(nil, 0, []Record{{Timestamp: 5, Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: []byte("h"), Value: []byte("x")}}}}, CodecNone)
		if !bytes.Equal(out, want) {
			t.Fatalf("%s: after the error the builder encodes differently", tc.name)
		}
	}
}

// TestBuilderAllocs: adding records to a warm builder allocates nothing.
func TestBuilderAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	key, value := []byte("key"), bytes.Repeat([]byte{'v'}, 128)
	allocs := testing.AllocsPerRun(100, func() {
		var b Builder
		for range 100 {
			b.Add(1_700_000_000_000, 0, key, value, 1)
			b.AddHeaderString("trace", value[:8])
		}
		out, err := b.Finish(CodecNone, 0)
		if err != nil {
			t.Fatal(err)
		}
		Release(out)
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}

// TestScanMatchesDecodeRecords: Scan sees the records DecodeRecords
// returns, and refuses what it refuses.
func TestScanMatchesDecodeRecords(t *testing.T) {
	recs := sampleRecords()
	for _, codec := range allCodecs {
		good, err := EncodeBatchAt(nil, withOffsets(recs, 7, 9, 1000, 1001, 1<<31), codec)
		if err != nil {
			t.Fatal(err)
		}
		check := func(b []byte) {
			want, werr := DecodeRecords(b, nil)
			var got []Record
			err := Scan(b, func(r *Record) {
				c := *r
				c.Headers = append([]Header(nil), r.Headers...)
				got = append(got, c)
			})
			if (err == nil) != (werr == nil) {
				t.Fatalf("%v: Scan %v, DecodeRecords %v", codec, err, werr)
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrShortBatch) && !errors.Is(err, ErrBadVersion) {
					t.Fatalf("%v: Scan error %v wraps no sentinel", codec, err)
				}
				return
			}
			if len(got) != len(want) {
				t.Fatalf("%v: Scan saw %d records, DecodeRecords %d", codec, len(got), len(want))
			}
			for i := range got {
				if !sameRecord(got[i], want[i]) {
					t.Fatalf("%v: record %d: Scan %+v, DecodeRecords %+v", codec, i, got[i], want[i])
				}
			}
		}
		check(good)
		for i := range good {
			bad := bytes.Clone(good)
			bad[i] ^= 0x5a
			check(bad)
			check(fixCRC(bad))
		}
		for n := range len(good) {
			check(good[:n])
		}
	}
}

// BenchmarkEncode compares encoding 1000 128-byte records as they arrive
// (Builder, what a wire v2 producer does) with keeping copies of them and
// encoding at send time with EncodeBatch.
func BenchmarkEncode(b *testing.B) {
	const n = 1000
	keys := make([][]byte, n)
	value := bytes.Repeat([]byte{'x'}, 128)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i%100)
	}
	b.Run("builder", func(b *testing.B) {
		b.SetBytes(n * 128)
		b.ReportAllocs()
		for b.Loop() {
			var bb Builder
			for i := range n {
				bb.Add(1_700_000_000_000, 0, keys[i], value, 0)
			}
			out, err := bb.Finish(CodecNone, 0)
			if err != nil {
				b.Fatal(err)
			}
			Release(out)
		}
	})
	b.Run("at-send", func(b *testing.B) {
		b.SetBytes(n * 128)
		b.ReportAllocs()
		for b.Loop() {
			recs := make([]Record, 0, n)
			for i := range n {
				recs = append(recs, Record{Key: bytes.Clone(keys[i]), Value: bytes.Clone(value), Timestamp: 1_700_000_000_000})
			}
			if _, err := EncodeBatch(nil, 0, recs, CodecNone); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestScratchServesItsSize: a scratch buffer asked for n bytes holds n
// without growing, whatever n, and is empty.
func TestScratchServesItsSize(t *testing.T) {
	for _, n := range []int{0, 1, 1023, 1024, 1025, 5000, 1 << 20, 1<<22 - 1, 1 << 22, 1<<22 + 1} {
		b := getScratch(n)
		if cap(b) < n || len(b) != 0 {
			t.Fatalf("getScratch(%d): len %d cap %d", n, len(b), cap(b))
		}
		putScratch(b)
	}
}

// buildChunked adds recs to a chunked Builder, checking that its RawLen
// follows a contiguous one's, and finishes it with FinishTo after prefix
// (to, true) or with Finish.
func buildChunked(t testing.TB, recs []Record, codec Codec, maxRatio int, prefix []byte, to bool) []byte {
	t.Helper()
	var b, ref Builder
	b.Chunked()
	for i := range recs {
		b.AddRecord(&recs[i])
		ref.AddRecord(&recs[i])
		if b.RawLen() != ref.RawLen() || b.Len() != i+1 {
			t.Fatalf("after record %d: chunked RawLen %d Len %d, contiguous RawLen %d", i, b.RawLen(), b.Len(), ref.RawLen())
		}
	}
	ref.Reset()
	if !to {
		out, err := b.Finish(codec, maxRatio)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out, err := b.FinishTo(bytes.Clone(prefix), codec, maxRatio)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[:len(prefix)], prefix) {
		t.Fatal("FinishTo changed the bytes before the batch")
	}
	if b.Len() != 0 || b.RawLen() != 0 {
		t.Fatalf("FinishTo left %d records, %d bytes", b.Len(), b.RawLen())
	}
	return out[len(prefix):]
}

// TestChunkedMatchesContiguous: a chunked Builder, finished with Finish or
// FinishTo, writes the bytes a contiguous one's Finish writes, for random
// records (some larger than a chunk, some compressing past the ratio
// bound), every codec; so does a contiguous Builder's FinishTo.
func TestChunkedMatchesContiguous(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	prefix := []byte("earlier batches of the request")
	for _, codec := range allCodecs {
		for _, n := range []int{1, 2, 17, 500, 3000} {
			recs := randomRecords(rng, n)
			if n >= 17 {
				recs[n/2].Value = bytes.Repeat([]byte{'z'}, 40<<10) // compresses over 1024 times with zstd
				recs[n/3].Value = make([]byte, 5000)
				for i := range recs[n/3].Value {
					recs[n/3].Value[i] = byte(rng.IntN(256))
				}
			}
			for _, ratio := range []int{0, 1024} {
				t.Run(fmt.Sprintf("%v/%d/%d", codec, n, ratio), func(t *testing.T) {
					want := build(t, recs, codec, ratio)
					for _, to := range []bool{false, true} {
						if got := buildChunked(t, recs, codec, ratio, prefix, to); !bytes.Equal(got, want) {
							t.Fatalf("chunked (FinishTo %v): batch of %d bytes differs from the contiguous one of %d", to, len(got), len(want))
						}
					}
					var b Builder
					for i := range recs {
						b.AddRecord(&recs[i])
					}
					got, err := b.FinishTo(bytes.Clone(prefix), codec, ratio)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got[len(prefix):], want) {
						t.Fatalf("contiguous FinishTo: batch of %d bytes differs from Finish's %d", len(got)-len(prefix), len(want))
					}
					if codec == CodecNone {
						appendTwice(t, recs, want, prefix)
					}
					Release(want)
				})
			}
		}
	}
}

// appendTwice checks that AppendBatch writes want, the batch of recs,
// after prefix, from a chunked and from a contiguous Builder, and again,
// leaving the Builder as it was: Finish then writes want too.
func appendTwice(t *testing.T, recs []Record, want, prefix []byte) {
	t.Helper()
	for _, chunked := range []bool{true, false} {
		var b Builder
		if chunked {
			b.Chunked()
		}
		for i := range recs {
			b.AddRecord(&recs[i])
		}
		if err := b.Check(CodecNone); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			got := b.AppendBatch(bytes.Clone(prefix))
			if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], want) {
				t.Fatalf("chunked %v: AppendBatch wrote %d bytes, want %d after the prefix", chunked, len(got)-len(prefix), len(want))
			}
		}
		got, err := b.Finish(CodecNone, 0)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("chunked %v: Finish after AppendBatch: %v, or other bytes", chunked, err)
		}
	}
}

// TestChunkedHoldsLittle: a chunked Builder holds one FirstChunkSize chunk
// for a few records; as it fills, its chunks are at most maxChunkSize
// (unless a record needs more) and the room it holds unused stays within
// about what it has filled (plus a first chunk, and the ends of chunks a
// record did not fit in).
func TestChunkedHoldsLittle(t *testing.T) {
	var b Builder
	b.Chunked()
	value := bytes.Repeat([]byte{'v'}, 120)
	held := func() (int, int) {
		n, largest := cap(b.buf), cap(b.buf)
		for _, c := range b.chunks {
			n += cap(c)
			largest = max(largest, cap(c))
		}
		return n, largest
	}
	for i := range 5 {
		b.Add(int64(i), 0, []byte("key"), value, 0)
	}
	if n, _ := held(); n != FirstChunkSize {
		t.Fatalf("5 records hold %d bytes of chunks, want %d", n, FirstChunkSize)
	}
	for i := range 20_000 {
		b.Add(int64(i), 0, []byte("key"), value, 0)
		n, largest := held()
		if largest > maxChunkSize {
			t.Fatalf("a chunk of %d bytes, more than %d", largest, maxChunkSize)
		}
		if n > 2*(b.RawLen()+FirstChunkSize) {
			t.Fatalf("%d bytes of chunks hold %d bytes of records", n, b.RawLen())
		}
	}
	b.Add(0, 0, nil, make([]byte, 100<<10), 0)
	if _, largest := held(); largest > maxChunkSize {
		t.Fatalf("a record of 100 KiB, the largest chunk %d bytes", largest)
	}
	for i, c := range b.chunks {
		if len(c) != cap(c) {
			t.Fatalf("chunk %d of %d holds %d of its %d bytes: records span chunks", i, len(b.chunks), len(c), cap(c))
		}
	}
	// Records a little over half a chunk left each chunk half empty
	// when a record had to fit whole.
	b.Reset()
	for i := range 200 {
		b.Add(int64(i), 0, nil, make([]byte, 8300), 0)
		if n, _ := held(); n > b.RawLen()+maxChunkSize {
			t.Fatalf("%d bytes of chunks hold %d bytes of 8,300-byte records", n, b.RawLen())
		}
	}
	b.Reset()
	if b.RawLen() != 0 || !b.chunked {
		t.Fatalf("Reset left %d bytes, chunked %v", b.RawLen(), b.chunked)
	}
}

// TestFinishToErrors: FinishTo refuses what Finish refuses, leaves dst as
// it was, and leaves the Builder empty and usable; Check reports it first,
// and AppendBatch appends nothing.
func TestFinishToErrors(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		for _, tc := range []struct {
			name  string
			codec Codec
			add   func(b *Builder)
			want  error
		}{
			{"empty", CodecNone, func(*Builder) {}, ErrInvalid},
			{"missing header", CodecNone, func(b *Builder) { b.Add(0, 0, nil, nil, 2); b.AddHeader(nil, nil) }, ErrInvalid},
			{"codec", Codec(7), func(b *Builder) { b.Add(0, 0, nil, nil, 0) }, ErrInvalid},
			{"too large", CodecNone, func(b *Builder) { b.Add(0, 0, nil, make([]byte, MaxBatchSize), 0) }, ErrTooLarge},
		} {
			var b Builder
			if chunked {
				b.Chunked()
			}
			tc.add(&b)
			if err := b.Check(tc.codec); !errors.Is(err, tc.want) {
				t.Errorf("chunked %v, %s: Check %v, want %v", chunked, tc.name, err, tc.want)
			}
			if tc.codec == CodecNone {
				if out := b.AppendBatch([]byte("before")); string(out) != "before" {
					t.Errorf("chunked %v, %s: AppendBatch appended %d bytes", chunked, tc.name, len(out)-6)
				}
			}
			dst := []byte("before")
			out, err := b.FinishTo(dst, tc.codec, 0)
			if !errors.Is(err, tc.want) || string(out) != "before" {
				t.Errorf("chunked %v, %s: %q, %v; want %v", chunked, tc.name, out, err, tc.want)
			}
			b.Add(5, 0, []byte("k"), []byte("v"), 0)
			out, err = b.FinishTo(out, CodecNone, 0)
			want, _ := EncodeBatch([]byte("before"), 0, []Record{{Timestamp: 5, Key: []byte("k"), Value: []byte("v")}}, CodecNone)
			if err != nil || !bytes.Equal(out, want) {
				t.Fatalf("chunked %v, %s: after the error: %v, or the builder encodes differently", chunked, tc.name, err)
			}
		}
	}
	var b Builder
	b.Add(0, 0, nil, nil, 0)
	b.Chunked()
	if _, err := b.Finish(CodecNone, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Chunked after a record: Finish %v", err)
	}
}

// TestChunkedAllocs: adding records to a warm chunked builder and
// finishing it into a buffer of room enough allocates nothing.
func TestChunkedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	key, value := []byte("key"), bytes.Repeat([]byte{'v'}, 128)
	var b Builder
	b.Chunked()
	dst := make([]byte, 0, 64<<10)
	allocs := testing.AllocsPerRun(100, func() {
		for range 300 {
			b.Add(1_700_000_000_000, 0, key, value, 1)
			b.AddHeaderString("trace", value[:8])
		}
		out, err := b.FinishTo(dst[:0], CodecNone, 0)
		if err != nil || &out[0] != &dst[:1][0] {
			t.Fatalf("%v, or the batch left dst", err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}
