package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestProducerRangeBatchesAcrossSplits produces into a topic of 16
// ranges, with one request in flight at a time and a linger long enough
// for ranges' batches to grow across requests, while ranges split: batches
// built for the routes before a split reach the node after it (which
// re-routes them). Every record is stored once and each key's in order,
// and every promise reports success.
func TestProducerRangeBatchesAcrossSplits(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "acc", client.WithRanges(16))
	p := client.NewProducer(c, client.ProducerOptions{Linger: 20 * time.Millisecond, MaxInFlight: 1, RangeBatchBytes: 2 << 10})
	const keys, perRound = 500, 5000
	var (
		mu       sync.Mutex
		failures []error
	)
	want := map[string]int{}
	produce := func(n int) {
		for i := range n {
			key := fmt.Sprintf("key-%d", i%keys)
			p.Produce(t.Context(), "acc", client.Record{Key: []byte(key), Value: seqValue(want[key], 32)}, func(_ client.Record, err error) {
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			})
			want[key]++
		}
	}
	produce(perRound)
	for range 3 {
		// The split races the records still accumulating or in flight.
		if _, err := c.SplitRange(t.Context(), "acc", 0); err != nil {
			t.Fatal(err)
		}
		produce(perRound)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(failures) > 0 {
		t.Fatalf("%d records failed, first: %v", len(failures), failures[0])
	}
	recs, _ := fetchAllV2(t, c, "acc", "", 0)
	checkPerKeyOrder(t, recs, want)
}
