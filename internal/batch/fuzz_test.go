package batch

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// fixCRC rewrites the CRC of the batch at the start of b (when its header
// parses and it is whole) so the fuzzer reaches the record decoder instead
// of stopping at the checksum.
func fixCRC(b []byte) []byte {
	h, err := ParseHeader(b)
	if err != nil || len(b) < h.Length {
		return b
	}
	c := append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(c[offCRC:], crc32.Checksum(c[crcStart:h.Length], castagnoli))
	return c
}

func FuzzDecodeBatch(f *testing.F) {
	for i, codec := range allCodecs {
		b, _ := EncodeBatch(nil, uint64(i), sampleRecords(), codec)
		f.Add(b)
		b, _ = EncodeBatchAt(nil, withOffsets(sampleRecords()[:2], 3, 70), codec)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, fixCRC(b)} {
			recs, err := DecodeRecords(in, nil)
			// Scan accepts what DecodeRecords accepts, record for record.
			i := 0
			serr := Scan(in, func(r *Record) {
				if err == nil && (i >= len(recs) || !sameRecord(*r, recs[i])) {
					t.Fatalf("Scan record %d differs from DecodeRecords'", i)
				}
				i++
			})
			if (serr == nil) != (err == nil) || err == nil && i != len(recs) {
				t.Fatalf("Scan: %v after %d records; DecodeRecords: %v, %d records", serr, i, err, len(recs))
			}
			if err != nil {
				continue
			}
			h, _ := ParseHeader(in)
			if len(recs) != int(h.RecordCount) {
				t.Fatalf("%d records, header says %d", len(recs), h.RecordCount)
			}
			// Whatever decodes must re-encode to a batch that decodes the same.
			again, err := EncodeBatchAt(nil, recs, h.Codec())
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			recs2, err := DecodeRecords(again, nil)
			if err != nil || len(recs2) != len(recs) {
				t.Fatalf("re-decode: %v", err)
			}
			for i := range recs {
				if !sameRecord(recs[i], recs2[i]) {
					t.Fatalf("record %d changed on re-encode", i)
				}
			}
			// The Builder encodes them, at consecutive offsets, as
			// EncodeBatch does.
			var bb Builder
			for i := range recs {
				bb.AddRecord(&recs[i])
			}
			built, err := bb.Finish(CodecNone, 0)
			if err != nil {
				t.Fatalf("Builder: %v", err)
			}
			want, err := EncodeBatch(nil, 0, recs, CodecNone)
			if err != nil || !bytes.Equal(built, want) {
				t.Fatalf("Builder and EncodeBatch differ (%v)", err)
			}
		}
		_, _ = SplitBatches(b)
	})
}
