package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Breaks, if it fails: opens of many ranges run ahead of a request's
// appends and in parallel, while other requests (wire v1 and v2) open the
// same heads, ranges are split under them, and every head is rolled at
// once again and again. Every acknowledged record must be read back once,
// in order per key, and no range may be left with two active segments.
func TestParallelOpensUnderSplitsAndRolls(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	const ranges, keysPer, rounds = 16, 64, 6
	if err := b.CreateTopic(ctx, "t", 12, ranges); err != nil {
		t.Fatal(err)
	}
	records := func(first, round int) []Record {
		recs := make([]Record, 0, keysPer)
		for k := first; k < first+keysPer; k++ {
			recs = append(recs, Record{Key: []byte("k" + strconv.Itoa(k)), Value: []byte(strconv.Itoa(round)), Timestamp: int64(1000 + round)})
		}
		return recs
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := 0; p < 3; p++ {
		wg.Go(func() {
			for round := 0; round < rounds; round++ {
				recs := records(p*keysPer, round)
				if p == 2 {
					if n, err := b.Produce(ctx, "t", recs); err != nil || n != len(recs) {
						errs <- err
						return
					}
					continue
				}
				res, err := produceBatches(t, b, "t", routeBatches(t, b, "t", recs, segment.CodecNone))
				if err != nil || res.n != len(recs) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 3; i++ {
			_, rs, err := b.Routes("t")
			if err != nil {
				errs <- err
				return
			}
			if _, err := b.SplitRange(ctx, "t", rs[i*3%len(rs)].Range); err != nil {
				t.Logf("split %d: %v", i, err)
			}
			b.rollHeads("roll failed", func(*head) bool { return true })
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a produce failed: %v", err)
	}
	seen, _ := drainBatches(t, b, "t", nil, 0)
	requireExactly(t, seen, 3*keysPer, rounds)
	active := map[uint64]int{}
	for _, in := range b.store.List() {
		if !in.Sealed {
			active[uint64(in.Owner)]++
		}
	}
	for owner, n := range active {
		if n > 1 {
			t.Fatalf("owner tag %d has %d active segments", owner, n)
		}
	}
}
