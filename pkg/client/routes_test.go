package client

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/wire"
)

// TestRouteTableMatchesSpans: over tables made by random splits of the
// keyspace (uneven: some parts split deep, others not at all), of 1 to
// about 3,000 ranges and keyspaces of 1 to 20 bits, answered in any
// order, a key's range is the one whose span holds the key's position,
// as the broker routes it.
func TestRouteTableMatchesSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		bits := uint8(1 + rng.IntN(20))
		want := 1 + rng.IntN(3000)
		spans := []keyspace.Span{keyspace.Root(bits)}
		for try := 0; len(spans) < want && try < 4*want; try++ {
			i := rng.IntN(len(spans))
			if round%3 == 0 && try%2 == 0 {
				i = rng.IntN(min(len(spans), 4)) // split one corner deep
			}
			lo, hi, ok := spans[i].Split()
			if !ok {
				continue
			}
			spans[i] = lo
			spans = append(spans, hi)
		}
		resp := &wire.TopicRoutesResponse{Bits: bits}
		for i, s := range spans {
			resp.Ranges = append(resp.Ranges, wire.RouteRange{Range: uint64(i + 1), Start: s.Start, End: s.End})
		}
		rng.Shuffle(len(resp.Ranges), func(i, j int) { resp.Ranges[i], resp.Ranges[j] = resp.Ranges[j], resp.Ranges[i] })
		table, err := newRouteTable(resp)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 2000 {
			key := []byte(strconv.FormatUint(rng.Uint64(), 36))
			if k == 0 {
				key = []byte{}
			}
			pos := keyspace.Position(key, bits)
			r := table.ranges[table.index(key)]
			got := keyspace.Span{Start: r.Start, End: r.End}
			if !got.Contains(pos) {
				t.Fatalf("round %d (%d ranges, %d bits): key %q at %d routed to [%d, %d)", round, len(spans), bits, key, pos, r.Start, r.End)
			}
		}
		// Every range's first and last positions, where a slot's bounds
		// fall.
		for _, r := range table.ranges {
			for _, pos := range []uint64{r.Start, r.End - 1} {
				if got := table.ranges[table.indexPos(pos)]; pos < got.Start || pos >= got.End {
					t.Fatalf("round %d: position %d routed to [%d, %d)", round, pos, got.Start, got.End)
				}
			}
		}
	}
}

// BenchmarkRouteTableIndex: a key's range in a table of 1,024 ranges, with
// the slot index and with a binary search over every range.
func BenchmarkRouteTableIndex(b *testing.B) {
	resp := &wire.TopicRoutesResponse{Bits: 16}
	for i := range 1024 {
		resp.Ranges = append(resp.Ranges, wire.RouteRange{Range: uint64(i + 1), Start: uint64(i) << 6, End: uint64(i+1) << 6})
	}
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = []byte("key-" + strconv.Itoa(i))
	}
	for _, slots := range []bool{true, false} {
		b.Run("slots="+strconv.FormatBool(slots), func(b *testing.B) {
			table, err := newRouteTable(resp)
			if err != nil {
				b.Fatal(err)
			}
			if !slots {
				table.first = nil
			}
			sum := 0
			for i := 0; b.Loop(); i++ {
				sum += table.index(keys[i%len(keys)])
			}
			if sum < 0 {
				b.Fatal(sum)
			}
		})
	}
}
