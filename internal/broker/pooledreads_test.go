package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/malachi-log/malachi/internal/storage/segment"
	"github.com/malachi-log/malachi/internal/vfs"
)

func openDisk(t *testing.T) *Broker {
	t.Helper()
	b, err := Open(context.Background(), Config{DataDir: t.TempDir(), FS: vfs.OS()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// pooledValue is record i's value: its bytes say which record it is.
func pooledValue(i, n int) []byte {
	v := bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(i * 7)}, n/3+1)
	return v[:n]
}

// checkPooledPage checks that every batch of a page passes its CRC and
// holds the records the test produced (each record's key is its number,
// which its value repeats), and returns how many records it holds.
func checkPooledPage(bs []RangeBatch, size int) (int, error) {
	n := 0
	for _, rb := range bs {
		if err := segment.Verify(rb.Batch); err != nil {
			return n, fmt.Errorf("a batch fails its check: %w", err)
		}
		recs, err := segment.DecodeRecords(rb.Batch, nil)
		if err != nil {
			return n, err
		}
		for _, r := range recs {
			i, err := strconv.Atoi(string(r.Key))
			if err != nil || !bytes.Equal(r.Value, pooledValue(i, size)) {
				return n, fmt.Errorf("record %d of range %d holds another record's bytes (key %q)", r.Offset, rb.Range, r.Key)
			}
			n++
		}
	}
	return n, nil
}

func mustCheckPooledPage(t *testing.T, what string, bs []RangeBatch, size int) int {
	t.Helper()
	n, err := checkPooledPage(bs, size)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return n
}

func pooledRecords(from, n, size int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: []byte(strconv.Itoa(from + i)), Value: pooledValue(from+i, size)}
	}
	return recs
}

// Long polls woken by one append share the page the first of them read,
// which lies in a pooled buffer: each holds it until it releases its own
// page, and the buffer serves no other read before the last has. After all
// but one reader released the page, and many other reads have taken
// buffers from the pool and given them back, the last reader's page is
// still the bytes that were read for it.
func TestWokenPollsHoldTheSharedPageUntilTheLastReleases(t *testing.T) {
	b := openDisk(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	const size = 900
	produce := func(from, n int) {
		t.Helper()
		if _, err := b.Produce(ctx, "t", pooledRecords(from, n, size)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		produce(i*40, 40)
	}
	end, err := b.EndCursor("t")
	if err != nil {
		t.Fatal(err)
	}
	const polls = 6
	pages := make([]BatchPage, polls)
	errs := make([]error, polls)
	var wg sync.WaitGroup
	for i := range polls {
		wg.Go(func() {
			pages[i], errs[i] = b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: &end, Wait: time.Minute}})
		})
	}
	waitAsleep(t, b, polls)
	produce(800, 40) // one batch of 36 KB: a page small enough to share
	wg.Wait()
	first := map[*byte]int{}
	for i, p := range pages {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got := mustCheckPooledPage(t, fmt.Sprintf("poll %d", i), p.Batches, size); got != 40 {
			t.Fatalf("poll %d read %d records, want 40", i, got)
		}
		first[unsafe.SliceData(p.Batches[0].Batch)]++
	}
	shared := 0
	for _, n := range first {
		shared = max(shared, n)
	}
	if shared < 2 {
		t.Fatalf("no two woken polls shared a page (%d distinct pages): nothing here tests its holders", len(first))
	}
	for _, p := range pages[:polls-1] {
		p.Release()
		p.Release() // a page's second release gives nothing back twice
	}
	for i := range 60 { // other reads take buffers from the pool and give them back
		p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t"}, MaxBytes: 1 + i*997})
		if err != nil {
			t.Fatal(err)
		}
		mustCheckPooledPage(t, "another read", p.Batches, size)
		p.Release()
	}
	mustCheckPooledPage(t, "the last woken poll, after the others released", pages[polls-1].Batches, size)
	pages[polls-1].Release()
	if n, bytes := sharedState(t, b, "t"); n != 0 || bytes != 0 {
		t.Fatalf("the shared pages outlived their readers: %d pages, %d bytes", n, bytes)
	}
}

// A subscription's pages go to send, which releases them: pushes checked
// while later pages are read into the pool hold the right bytes.
func TestSubscriptionPagesHoldTheirBuffersUntilReleased(t *testing.T) {
	b := openDisk(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.CreateTopic(ctx, "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	const size, total = 3000, 2000
	for from := 0; from < total; from += 100 {
		if _, err := b.Produce(ctx, "t", pooledRecords(from, 100, size)); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := b.SubscribeBatchesAs(Identity{}, "t", nil, nil, 1<<20, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	// Pages are kept a while before their release, so that later reads
	// run while earlier pages are held.
	var (
		held             []Page
		pushed, verified int
		bad              error
	)
	release := func(p Page) {
		n, err := checkPooledPage(p.Batches, size)
		verified += n
		if bad == nil {
			bad = err
		}
		p.Release()
	}
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(p Page) error {
			for _, rb := range p.Batches {
				h, err := segment.ParseHeader(rb.Batch)
				if err != nil {
					return err
				}
				pushed += int(h.RecordCount)
			}
			held = append(held, p)
			if len(held) > 4 {
				release(held[0])
				held = held[1:]
			}
			if pushed >= total {
				cancel()
			}
			return nil
		})
	}()
	if err := <-done; err != context.Canceled {
		t.Fatalf("the subscription ended with %v", err)
	}
	for _, p := range held {
		release(p)
	}
	if bad != nil {
		t.Fatal(bad)
	}
	if verified != total {
		t.Fatalf("the subscription pushed %d records of %d", verified, total)
	}
}
