package heal_test

// Verify against copies built in memory with internal/batch: a whole
// copy passes, and each way a copy can differ from its seal (a flipped
// byte, a gap, an overlap, a batch past the end, extra or missing
// batches, a wrong content hash, a torn page, a failing reader) is
// reported with the offset where the good part ends and the reason.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/heal"
)

// copyOf encodes one batch per size in sizes, consecutive from base.
func copyOf(t *testing.T, base uint64, sizes ...int) [][]byte {
	t.Helper()
	var out [][]byte
	next := base
	for i, n := range sizes {
		recs := make([]batch.Record, n)
		for j := range recs {
			recs[j] = batch.Record{Timestamp: int64(1000 + i), Key: []byte{byte(j)}, Value: bytes.Repeat([]byte{byte(i)}, 40)}
		}
		b, err := batch.EncodeBatch(nil, next, recs, batch.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		next += uint64(n)
	}
	return out
}

// sealOf is the seal a whole copy of batches gets.
func sealOf(t *testing.T, id, base uint64, batches [][]byte) heal.Seal {
	t.Helper()
	s := heal.Seal{Segment: id, Base: base, End: base}
	h := xxhash.New()
	for _, b := range batches {
		bh, err := batch.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		s.End = bh.LastOffset() + 1
		s.Records += uint64(bh.RecordCount)
		s.Bytes += int64(len(b))
		_, _ = h.Write(b)
	}
	s.ContentHash = h.Sum64()
	return s
}

// memReader serves batches as storage does: whole batches from the one
// holding from, the first always, then while they fit in maxBytes.
func memReader(batches [][]byte) heal.Reader {
	return func(from uint64, maxBytes int) ([]byte, error) {
		var out []byte
		for _, b := range batches {
			h, err := batch.ParseHeader(b)
			if err == nil && h.LastOffset() < from {
				continue
			}
			if len(out) > 0 && len(out)+len(b) > maxBytes {
				break
			}
			out = append(out, b...)
		}
		return out, nil
	}
}

func TestVerifyWholeCopy(t *testing.T) {
	batches := copyOf(t, 100, 3, 1, 5, 2)
	seal := sealOf(t, 7, 100, batches)
	for _, page := range []int{1, 200, 0, 1 << 20} {
		v := heal.Verify(seal, memReader(batches), page)
		if !v.Whole() || v.Records != 11 || v.At != seal.End {
			t.Fatalf("page %d: %v", page, v)
		}
	}
}

func TestVerifyEmptySegment(t *testing.T) {
	seal := heal.Seal{Segment: 1, Base: 50, End: 50}
	if v := heal.Verify(seal, memReader(nil), 0); !v.Whole() {
		t.Fatalf("an empty copy of an empty seal: %v", v)
	}
	batches := copyOf(t, 50, 1)
	if v := heal.Verify(seal, memReader(batches), 0); v.Outcome != heal.Damaged {
		t.Fatalf("a batch in a copy sealed empty: %v", v)
	}
}

// A seal may record an end past its last batch; a copy holding every
// batch and byte is whole.
func TestVerifyPaddedSeal(t *testing.T) {
	batches := copyOf(t, 0, 4)
	seal := sealOf(t, 1, 0, batches)
	seal.End = 10
	if v := heal.Verify(seal, memReader(batches), 0); !v.Whole() {
		t.Fatalf("padded seal: %v", v)
	}
}

func TestVerifyFindsDamage(t *testing.T) {
	cases := []struct {
		name    string
		change  func(t *testing.T, batches [][]byte, seal *heal.Seal) [][]byte
		outcome heal.Outcome
		at      uint64
		reason  string
	}{
		{"flipped byte in a middle batch", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			b[2] = bytes.Clone(b[2])
			b[2][len(b[2])/2] ^= 0x10
			return b
		}, heal.Damaged, 14, "crc"},
		{"missing middle batch", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			return append(b[:1:1], b[2:]...)
		}, heal.Damaged, 13, "gap"},
		{"repeated batch", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			return append(b[:2:2], b[1:]...)
		}, heal.Damaged, 14, "overlaps"},
		{"lost tail", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			return b[:3]
		}, heal.Short, 19, "records"},
		{"extra batch past the end", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			return append(b, copyOf(t, 21, 1)...)
		}, heal.Damaged, 21, "past the seal's end"},
		{"wrong content hash", func(t *testing.T, b [][]byte, s *heal.Seal) [][]byte {
			s.ContentHash ^= 1
			return b
		}, heal.Damaged, 10, "content hash"},
		{"seal counts fewer records", func(t *testing.T, b [][]byte, s *heal.Seal) [][]byte {
			s.Records -= 2
			return b
		}, heal.Damaged, 19, "records"},
		{"seal counts fewer bytes", func(t *testing.T, b [][]byte, s *heal.Seal) [][]byte {
			s.Bytes -= 1
			return b
		}, heal.Damaged, 19, "bytes"},
		{"torn last batch", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			b[3] = b[3][:len(b[3])-5]
			return b
		}, heal.Damaged, 19, "short batch"},
		{"zeroed batch", func(t *testing.T, b [][]byte, _ *heal.Seal) [][]byte {
			b[1] = make([]byte, len(b[1]))
			return b
		}, heal.Damaged, 13, "magic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			batches := copyOf(t, 10, 3, 1, 5, 2)
			seal := sealOf(t, 3, 10, batches)
			v := heal.Verify(seal, memReader(c.change(t, batches, &seal)), 0)
			if v.Outcome != c.outcome || v.At != c.at || !strings.Contains(v.Reason, c.reason) {
				t.Fatalf("%v; want %v at %d with %q", v, c.outcome, c.at, c.reason)
			}
		})
	}
}

// A compacted generation may leave gaps between its batches; generation
// 0 may not.
func TestVerifyGapsOnlyInCompactedGenerations(t *testing.T) {
	batches := append(copyOf(t, 0, 2), copyOf(t, 5, 3)...)
	seal := sealOf(t, 1, 0, batches)
	if v := heal.Verify(seal, memReader(batches), 0); v.Outcome != heal.Damaged || v.At != 2 {
		t.Fatalf("generation 0 with a gap: %v", v)
	}
	seal.Generation = 1
	if v := heal.Verify(seal, memReader(batches), 0); !v.Whole() {
		t.Fatalf("generation 1 with a gap: %v", v)
	}
}

func TestVerifyReaderErrors(t *testing.T) {
	batches := copyOf(t, 0, 2, 2, 2)
	seal := sealOf(t, 1, 0, batches)
	failAt := func(err error) heal.Reader {
		good := memReader(batches)
		return func(from uint64, max int) ([]byte, error) {
			if from >= 2 {
				return nil, err
			}
			return good(from, max)
		}
	}
	corrupt := fmt.Errorf("segment 1: %w: crc mismatch", batch.ErrCorrupt)
	if v := heal.Verify(seal, failAt(corrupt), 1); v.Outcome != heal.Damaged || v.At != 2 || !strings.Contains(v.Reason, "crc") {
		t.Fatalf("the reader found damage: %v", v)
	}
	if v := heal.Verify(seal, failAt(io.ErrUnexpectedEOF), 1); v.Outcome != heal.Unreadable || v.At != 2 {
		t.Fatalf("the reader failed: %v", v)
	}
	if v := heal.Verify(seal, failAt(errors.New("connection reset")), 1); v.Whole() || v.Outcome == heal.Damaged {
		t.Fatalf("a transport error is not damage: %v", v)
	}
}

// A reader that keeps answering the same page cannot loop Verify: the
// second answer overlaps the first.
func TestVerifyStuckReaderEnds(t *testing.T) {
	batches := copyOf(t, 0, 2, 2)
	seal := sealOf(t, 1, 0, batches)
	stuck := func(uint64, int) ([]byte, error) { return batches[0], nil }
	if v := heal.Verify(seal, stuck, 0); v.Outcome != heal.Damaged || v.At != 2 {
		t.Fatalf("stuck reader: %v", v)
	}
}

// A failover seal records only its end: a copy reaching exactly that end
// is whole, one stopping below it short, one reaching past it damaged.
func TestVerifyUncountedSeal(t *testing.T) {
	batches := copyOf(t, 40, 2, 3, 4)
	seal := heal.Seal{Segment: 2, Base: 40, End: 49}
	if seal.Counted() {
		t.Fatal("a seal with no bytes for offsets [40, 49) is counted")
	}
	if v := heal.Verify(seal, memReader(batches), 0); !v.Whole() || v.Records != 9 {
		t.Fatalf("the whole copy: %v", v)
	}
	if v := heal.Verify(seal, memReader(batches[:2]), 0); v.Outcome != heal.Short || v.At != 45 {
		t.Fatalf("a copy short of the end: %v", v)
	}
	seal.End = 47
	if v := heal.Verify(seal, memReader(batches), 0); v.Outcome != heal.Damaged || v.At != 45 {
		t.Fatalf("a copy past the end: %v", v)
	}
}
