package wire

import (
	"bytes"
	"testing"
)

// A payload whose batches are appended in place is the request's own
// encoding, decodable as one, for no batches, one and several of
// different sizes.
func TestAppendProduceBatchesPayloadMatchesRequest(t *testing.T) {
	topic := "orders"
	for _, sizes := range [][]int{nil, {minBatchLen}, {minBatchLen, 300, minBatchLen + 1, 70000}} {
		req := ProduceBatchesRequest{Topic: &topic}
		for i, n := range sizes {
			req.Batches = append(req.Batches, RangeBatch{Range: uint64(100 + i*7), Batch: bytes.Repeat([]byte{byte(i + 1)}, n)})
		}
		prefix := []byte("frame header")
		got := AppendProduceBatchesPayload(append([]byte(nil), prefix...), &topic, len(req.Batches),
			func(i int) uint64 { return req.Batches[i].Range },
			func(i int, dst []byte) []byte { return append(dst, req.Batches[i].Batch...) })
		want := req.AppendPayload(append([]byte(nil), prefix...))
		if !bytes.Equal(got, want) {
			t.Fatalf("sizes %v: in place %d bytes, request %d bytes, differ", sizes, len(got), len(want))
		}
		var back ProduceBatchesRequest
		if err := back.Decode(got[len(prefix):]); err != nil || len(back.Batches) != len(sizes) {
			t.Fatalf("sizes %v: decoded %d batches, %v", sizes, len(back.Batches), err)
		}
	}
}
