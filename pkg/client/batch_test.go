package client

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	batchfmt "github.com/malachi-log/malachi/internal/batch"
)

// The batch format is internal/batch's, for the node and the client alike;
// these tests check the client's side of it: how its Records map to the
// format's, and what it makes of compression.

// testRecords are client records covering the mapping's corners: nil and
// empty keys, values and header values, empty header keys, large fields,
// timestamps out of order and zero.
func testRecords(n int) []Record {
	fields := [][]byte{nil, {}, []byte("k"), bytes.Repeat([]byte{'z'}, 300), []byte("\x00\xff binary \x01")}
	base := time.UnixMilli(1_700_000_000_000)
	recs := make([]Record, n)
	for i := range recs {
		r := Record{Key: fields[i%5], Value: fields[i/5%5], Timestamp: base.Add(time.Duration(i*37%2000-1000) * time.Millisecond)}
		if i%7 == 3 {
			r.Timestamp = time.Time{}
		}
		for j := range i % 3 {
			r.Headers = append(r.Headers, Header{Key: string(fields[(i+j)%5]), Value: fields[(i+2*j)%5]})
		}
		recs[i] = r
	}
	return recs
}

// toFormat is how the format sees recs as the client sends them: nil
// values as empty, header keys present, timestamps in unix ms, >= 0.
func toFormat(recs []Record) []batchfmt.Record {
	out := make([]batchfmt.Record, len(recs))
	for i, r := range recs {
		v := r.Value
		if v == nil {
			v = []byte{}
		}
		out[i] = batchfmt.Record{Key: r.Key, Value: v, Timestamp: max(r.Timestamp.UnixMilli(), 0)}
		for _, h := range r.Headers {
			out[i].Headers = append(out[i].Headers, batchfmt.Header{Key: []byte(h.Key), Value: h.Value})
		}
	}
	return out
}

func buildBatch(t testing.TB, recs []Record, codec Codec) []byte {
	t.Helper()
	var b batchfmt.Builder
	for i := range recs {
		before := b.RawLen()
		addRecord(&b, &recs[i], max(recs[i].Timestamp.UnixMilli(), 0))
		if grew, bound := b.RawLen()-before, recordSize(&recs[i]); grew > bound {
			t.Fatalf("record %d took %d bytes, recordSize said at most %d", i, grew, bound)
		}
	}
	out, err := finishBatch(&b, codec)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func batchCodec(t testing.TB, b []byte) Codec {
	t.Helper()
	h, err := batchfmt.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return Codec(h.Codec())
}

// TestBatchRoundTrip: what the client builds is what the format encodes
// for its records, the node accepts it as a producer's batch, and the
// client reads back what the node stores.
func TestBatchRoundTrip(t *testing.T) {
	lim := batchfmt.ProduceLimits{MaxRawBytes: 1 << 20, MaxRecords: 1 << 16, MaxHeaders: 1024}
	for _, codec := range []Codec{CompressionNone, CompressionZstd, CompressionS2, CompressionLZ4} {
		for _, n := range []int{1, 2, 17, 500} {
			t.Run(fmt.Sprintf("%v/%d", codec, n), func(t *testing.T) {
				recs := testRecords(n)
				got := buildBatch(t, recs, codec)
				want, err := batchfmt.EncodeBatch(nil, 0, toFormat(recs), batchfmt.Codec(batchCodec(t, got)))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("client batch of %d bytes differs from EncodeBatch's %d bytes", len(got), len(want))
				}
				if _, _, err := batchfmt.CheckProduce(got, lim, nil); err != nil {
					t.Fatalf("CheckProduce: %v", err)
				}
				stored := bytes.Clone(got)
				if err := batchfmt.Rebase(stored, 12345); err != nil {
					t.Fatal(err)
				}
				back, err := decodeBatch(stored, 7, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(back) != n {
					t.Fatalf("decoded %d records, want %d", len(back), n)
				}
				for i := range back {
					wantRec := recs[i]
					if wantRec.Value == nil {
						wantRec.Value = []byte{}
					}
					if wantRec.Timestamp.IsZero() || wantRec.Timestamp.UnixMilli() <= 0 {
						wantRec.Timestamp = time.Time{} // sent as 0, read back as zero
					}
					if err := sameRecord(back[i], wantRec); err != nil {
						t.Fatalf("record %d: %v", i, err)
					}
					if back[i].Range != 7 {
						t.Fatalf("record %d: range %d, want 7", i, back[i].Range)
					}
				}
			})
		}
	}
}

// TestDecodeStoredBatches decodes batches the node's encoder wrote at
// offsets with holes (as a filtered fetch re-encodes them), with
// tombstones and expiries, which the client never writes itself.
func TestDecodeStoredBatches(t *testing.T) {
	recs := []batchfmt.Record{
		{Offset: 10, Timestamp: 5, Key: []byte("a"), Value: nil},
		{Offset: 13, Timestamp: 3, Key: nil, Value: []byte("v"), Expiry: 99},
		{Offset: 20, Timestamp: 0, Key: []byte{}, Value: []byte{}, Headers: []batchfmt.Header{{Key: nil, Value: []byte("x")}}},
	}
	want := []Record{
		{Key: []byte("a"), Value: []byte{}, Timestamp: time.UnixMilli(5)},
		{Key: nil, Value: []byte("v"), Timestamp: time.UnixMilli(3)},
		{Key: []byte{}, Value: []byte{}, Headers: []Header{{Key: "", Value: []byte("x")}}},
	}
	for _, codec := range []batchfmt.Codec{batchfmt.CodecNone, batchfmt.CodecZstd, batchfmt.CodecS2, batchfmt.CodecLZ4} {
		b, err := batchfmt.EncodeBatchAt(nil, recs, codec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeBatch(b, 1, []Record{{}})
		if err != nil {
			t.Fatalf("%v: %v", codec, err)
		}
		if len(got) != 1+len(want) {
			t.Fatalf("%v: %d records, want %d after the one given", codec, len(got), 1+len(want))
		}
		for i := range want {
			if err := sameRecord(got[1+i], want[i]); err != nil {
				t.Fatalf("%v: record %d: %v", codec, i, err)
			}
		}
	}
}

// TestDecodeBatchRefusesDamage flips every byte of a batch in turn (and
// truncates it, and appends to it): the client refuses each, with an
// error wrapping errBadBatch, and leaves dst as it was.
func TestDecodeBatchRefusesDamage(t *testing.T) {
	for _, codec := range []Codec{CompressionNone, CompressionZstd, CompressionS2, CompressionLZ4} {
		good := buildBatch(t, testRecords(5), codec)
		refuse := func(what string, b []byte) {
			t.Helper()
			dst := []Record{{}}
			got, err := decodeBatch(b, 0, dst)
			if !errors.Is(err, errBadBatch) || len(got) != 1 {
				t.Fatalf("%v: %s: %d records, %v", codec, what, len(got), err)
			}
		}
		for i := range good {
			bad := bytes.Clone(good)
			bad[i] ^= 0x5a
			refuse(fmt.Sprintf("byte %d flipped", i), bad)
		}
		for n := range len(good) {
			refuse(fmt.Sprintf("cut to %d bytes", n), good[:n])
		}
		refuse("with a byte after it", append(bytes.Clone(good), 0))
	}
}

// FuzzDecodeBatch: whatever the bytes, the client's decoder does not
// panic, and it accepts exactly the single batches the format accepts.
func FuzzDecodeBatch(f *testing.F) {
	for _, codec := range []Codec{CompressionNone, CompressionZstd, CompressionS2, CompressionLZ4} {
		f.Add(buildBatch(f, testRecords(3), codec))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeBatch(b, 0, nil)
		h, herr := batchfmt.ParseHeader(b)
		single := herr == nil && h.Length == len(b)
		want, werr := batchfmt.DecodeRecords(b, nil)
		if (err == nil) != (single && werr == nil) {
			t.Fatalf("client: %v, format: %v (single batch %v)", err, werr, single)
		}
		if err == nil && len(got) != len(want) {
			t.Fatalf("client decoded %d records, format %d", len(got), len(want))
		}
	})
}

// TestCompressionWithinNodeRatio: the client asks for compression only
// where a node accepts it. 200 KiB of zeros would shrink more than the
// 1024 times a node allows with zstd and go uncompressed; text goes
// compressed. (internal/batch tests the Builder's choice in full.)
func TestCompressionWithinNodeRatio(t *testing.T) {
	zeros := make([]byte, 200<<10)
	if got := batchCodec(t, buildBatch(t, []Record{{Value: zeros}}, CompressionZstd)); got != CompressionNone {
		t.Errorf("zeros sent as %v, want none", got)
	}
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog "), 100)
	if got := batchCodec(t, buildBatch(t, []Record{{Value: text}}, CompressionZstd)); got != CompressionZstd {
		t.Errorf("text sent as %v, want zstd", got)
	}
}

// BenchmarkEncode compares encoding 128-byte records as they are produced
// (addRecord into a batch.Builder, what the Producer does with wire v2)
// with keeping copies and encoding at send time with EncodeBatch.
func BenchmarkEncode(b *testing.B) {
	const n = 1000
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: fmt.Appendf(nil, "key-%d", i%100), Value: bytes.Repeat([]byte{'x'}, 128), Timestamp: time.UnixMilli(1_700_000_000_000)}
	}
	b.Run("incremental", func(b *testing.B) {
		b.SetBytes(n * 128)
		b.ReportAllocs()
		for b.Loop() {
			var bb batchfmt.Builder
			for i := range recs {
				addRecord(&bb, &recs[i], recs[i].Timestamp.UnixMilli())
			}
			out, err := finishBatch(&bb, CompressionNone)
			if err != nil {
				b.Fatal(err)
			}
			batchfmt.Release(out)
		}
	})
	b.Run("at-send", func(b *testing.B) {
		b.SetBytes(n * 128)
		b.ReportAllocs()
		for b.Loop() {
			seg := make([]batchfmt.Record, 0, n)
			for i := range recs {
				seg = append(seg, batchfmt.Record{
					Key: bytes.Clone(recs[i].Key), Value: bytes.Clone(recs[i].Value),
					Timestamp: recs[i].Timestamp.UnixMilli(),
				})
			}
			if _, err := batchfmt.EncodeBatch(nil, 0, seg, batchfmt.CodecNone); err != nil {
				b.Fatal(err)
			}
		}
	})
}
