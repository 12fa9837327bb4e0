// Benchmarks for the hot paths: produce requests of many records in, fetch
// responses out. Run with -bench . -benchmem; decoding a produce should
// cost a handful of allocations regardless of the record count.
package wire

import (
	"fmt"
	"testing"
)

func benchRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Key:       fmt.Appendf(nil, "user-%d", i),
			Value:     make([]byte, 100),
			Timestamp: 1700000000000 + uint64(i),
			Headers:   []Header{{Key: []byte("source"), Value: []byte("api")}},
		}
	}
	return recs
}

func BenchmarkDecodeProduce(b *testing.B) {
	payload := ProduceRequest{Topic: new("orders"), Records: benchRecords(1000)}.AppendPayload(nil)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	var p ProduceRequest
	for b.Loop() {
		if err := p.Decode(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequestProduce(b *testing.B) {
	payload := ProduceRequest{Topic: new("orders"), Records: benchRecords(1000)}.AppendPayload(nil)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(KeyProduce, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeFetchResponse(b *testing.B) {
	resp := FetchResponse{Records: benchRecords(1000), NextCursor: new("Q1VSU09S")}
	buf := AppendOKFrame(nil, 1, resp)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendOKFrame(buf[:0], 1, resp)
	}
}

// Allocation budget of the produce fast path, checked in plain go test.
func TestProduceDecodeAllocs(t *testing.T) {
	payload := ProduceRequest{Topic: new("orders"), Records: benchRecords(1000)}.AppendPayload(nil)
	var p ProduceRequest
	if err := p.Decode(payload); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := p.Decode(payload); err != nil {
			t.Fatal(err)
		}
	})
	// The topic string, its pointer, and the shared header array grown by
	// doubling: about log2(1000) allocations, never one per record.
	if allocs > 20 {
		t.Fatalf("decoding 1000 records allocates %.0f times", allocs)
	}
}
