package broker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/storage/segment"
)

// waker is one long-polling reader of TestWokenReadersEachGetTheirRecords:
// a v1 fetch with its page size, or a v2 fetch_batches.
type waker struct {
	max     int
	batches bool
	cursor  *string
	got     []string
}

// fetch long-polls once from w's cursor and keeps what it got.
func (w *waker) fetch(ctx context.Context, b *Broker, wait time.Duration) error {
	req := FetchRequest{Topic: "t", Cursor: w.cursor, Max: w.max, Wait: wait}
	if !w.batches {
		p, err := b.Fetch(ctx, req)
		if err != nil {
			return err
		}
		for _, r := range p.Records {
			w.got = append(w.got, string(r.Value))
		}
		w.cursor = p.Cursor
		return nil
	}
	p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: req})
	if err != nil {
		return err
	}
	for _, rb := range p.Batches {
		recs, err := segment.DecodeRecords(rb.Batch, nil)
		if err != nil {
			return err
		}
		for _, r := range recs {
			w.got = append(w.got, string(r.Value))
		}
	}
	w.cursor = p.Cursor
	return nil
}

// Readers asleep at the same position are woken by one append, and those
// asking for the same page may be handed one read. Every reader must
// still get exactly its own records: each kind of page (v1 pages of 100
// and of 2 records, v2 batches) all of the new records in order per key,
// none twice, and after a second append only the records of that one,
// never a page kept from the first.
func TestWokenReadersEachGetTheirRecords(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	var readers []*waker
	for i := range 60 {
		readers = append(readers, &waker{max: []int{100, 2, 100}[i%3], batches: i%3 == 2})
	}
	for round, n := range []int{5, 3} {
		var wg sync.WaitGroup
		errs := make([]error, len(readers))
		for i, w := range readers {
			w.got = nil
			wg.Go(func() { errs[i] = w.fetch(ctx, b, time.Minute) })
		}
		waitAsleep(t, b, len(readers))
		var recs []Record
		for i := range n {
			k := keys[i%len(keys)]
			recs = append(recs, Record{Key: []byte(k), Value: fmt.Appendf(nil, "r%d-%s-%d", round, k, i)})
		}
		if _, err := b.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, w := range readers {
			if errs[i] != nil {
				t.Fatalf("round %d, reader %d: %v", round, i, errs[i])
			}
			// A page of 2, or one woken by the first of several appends,
			// leaves records for the next fetches.
			for len(w.got) < n {
				before := len(w.got)
				if err := w.fetch(ctx, b, 0); err != nil {
					t.Fatal(err)
				}
				if len(w.got) == before {
					break
				}
			}
			if want := values(recs); !samePerKey(w.got, want) {
				t.Fatalf("round %d, reader %d (max %d, batches %v) got %q, want %q", round, i, w.max, w.batches, w.got, want)
			}
		}
	}
}

func values(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// samePerKey reports whether got holds exactly want's values, in want's
// order among values of the same key (the key is the value's middle).
func samePerKey(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	a, b := append([]string(nil), got...), append([]string(nil), want...)
	sort.Strings(a)
	sort.Strings(b)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		return false
	}
	key := func(v string) string { return strings.Split(v, "-")[1] }
	order := map[string][]string{}
	for _, v := range want {
		order[key(v)] = append(order[key(v)], v)
	}
	for _, v := range got {
		k := key(v)
		if order[k][0] != v {
			return false
		}
		order[k] = order[k][1:]
	}
	return true
}

// waitAsleep waits until n readers sleep on the topic's watch.
func waitAsleep(t *testing.T, b *Broker, n int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		asleep := 0
		b.mu.Lock()
		for _, w := range b.mu.watches {
			w.mu.Lock()
			asleep += w.waiters
			w.mu.Unlock()
		}
		b.mu.Unlock()
		if asleep == n {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%d readers asleep, want %d", asleep, n)
		}
	}
}
