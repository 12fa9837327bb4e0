package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// sharedState returns the shared pages a topic's watch holds now and the
// bytes they are charged to the node-wide budget.
func sharedState(t *testing.T, b *Broker, topic string) (pages int, bytes int64) {
	t.Helper()
	id, err := b.topicID(topic)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	w := b.mu.watches[id]
	b.mu.Unlock()
	if w == nil {
		return 0, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.shared.pages), w.shared.bytes
}

// Shared pages are kept for the long polls one append woke, and only until
// the last of them has read: then they are dropped and their bytes given
// back to the node-wide budget (sharedBudget). A subscription asleep on the
// same topic is counted among those the append woke, but it never reads
// through the shared pages nor says it has read, so the pages stay, and
// stay charged, until the topic's next append. A topic that goes quiet
// keeps them for good; a few hundred such topics use up the node's budget
// and no woken reader shares a read again.
func TestSharedPagesAreDroppedOnceTheWokenPollsHaveRead(t *testing.T) {
	for _, withSub := range []bool{false, true} {
		name := "long polls only"
		if withSub {
			name = "with a subscription asleep on the topic"
		}
		t.Run(name, func(t *testing.T) {
			b := openMem(t)
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
				t.Fatal(err)
			}
			sleepers := 0
			if withSub {
				sub, err := b.Subscribe("t", nil, nil, 100, 100)
				if err != nil {
					t.Fatal(err)
				}
				subCtx, cancel := context.WithCancel(ctx)
				ran := make(chan struct{})
				go func() {
					defer close(ran)
					sub.Run(subCtx, func(Page) error { return nil })
				}()
				t.Cleanup(func() { cancel(); <-ran })
				sleepers++
			}
			const polls = 6
			var wg sync.WaitGroup
			got := make([]int, polls)
			errs := make([]error, polls)
			for i := range polls {
				wg.Go(func() {
					p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Max: 100, Wait: time.Minute})
					got[i], errs[i] = len(p.Records), err
				})
			}
			waitAsleep(t, b, polls+sleepers)
			if _, err := b.Produce(ctx, "t", []Record{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i := range polls {
				if errs[i] != nil || got[i] != 1 {
					t.Fatalf("poll %d: %d records, %v", i, got[i], errs[i])
				}
			}
			if pages, bytes := sharedState(t, b, "t"); pages != 0 || bytes != 0 {
				t.Fatalf("every woken long poll has read, yet the topic keeps %d shared pages charged %d bytes", pages, bytes)
			}
		})
	}
}

// A shared page is handed only to a reader that asked for the very same
// page: the key must tell apart every pair of positions that read
// differently. A group member assigned no range (only is empty: it reads
// nothing) and a cursor reader of every range (only is nil) must never
// share, yet the marker that tells nil from empty (0xff) is also the first
// byte of a range id of 255, 383, ... written as a uvarint, so the two keys
// can be equal and the cursor reader be handed the member's empty page and
// the member's group position as its cursor.
func TestPageKeysOfDifferentPositionsDiffer(t *testing.T) {
	e := func(src uint64) []cursor.Entry {
		return []cursor.Entry{{Source: src, SliceStart: 7, SliceBits: 3, Offset: 42}}
	}
	everyRange := position{topicID: 1, only: nil, entries: e(1)}
	noRange := position{topicID: 1, only: []uint64{}, entries: e(255)}
	if pageKey(pageRecords, everyRange, 100, 0) == pageKey(pageRecords, noRange, 100, 0) {
		t.Fatalf("a reader of every range at %+v and a reader of no range at %+v share a page key",
			everyRange.entries, noRange.entries)
	}
}

// A fire's herd is the long polls asleep when it came, and each of them
// must say once that it has read: then the fire's pages are dropped. A
// poll that wakes with no fire since it went to sleep (its timer, its
// context) is in no herd and must not count itself out of one, or the
// pages are dropped while the herd still reads and it reads alone; a poll
// that slept through several fires is in the last one's herd only.
func TestOnlyPollsAFireWokeAreInItsHerd(t *testing.T) {
	b := openMem(t)
	if err := b.CreateTopic(context.Background(), "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	id, err := b.topicID("t")
	if err != nil {
		t.Fatal(err)
	}
	w := b.watchFor(id)
	herdOf := func() (uint64, int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.shared.gen, w.shared.herd
	}

	timedOut := b.pollSleeping(w, id)
	if _, in := timedOut.wake(); in {
		t.Fatal("a poll woken with no fire since it slept says it is in a herd")
	}

	slept := b.pollSleeping(w, id)
	other := b.pollSleeping(w, id)
	sub := b.sleeping(w, id) // a subscription: asleep, never reads a shared page
	w.fire()
	w.fire()
	gen, herd := herdOf()
	if herd != 2 {
		t.Fatalf("a fire with two polls and a subscription asleep has a herd of %d, want 2", herd)
	}
	if g, in := slept.wake(); !in || g != gen {
		t.Fatalf("a poll that slept through two fires says it is in the herd of fire %d (%v), want fire %d", g, in, gen)
	}
	w.herdRead(gen)
	late := b.pollSleeping(w, id) // asleep after the fire: in no herd of it
	if _, in := late.wake(); in {
		t.Fatal("a poll that slept after the last fire says it is in its herd")
	}
	if _, herd := herdOf(); herd != 1 {
		t.Fatalf("herd %d after one of two polls read, want 1", herd)
	}
	g, in := other.wake()
	if !in {
		t.Fatal("the second poll is not in the herd")
	}
	w.herdRead(g)
	sub()
	if _, herd := herdOf(); herd != 0 {
		t.Fatalf("herd %d after every poll read, want 0", herd)
	}
}

// A shared page stays in memory until the last of its herd has read, and
// sharedBudget bounds those bytes over the node. The page must hold only
// what it is charged: the page a read returns points into the store's read
// buffers, and kept as is, a page of one small record decoded from a large
// stored batch would keep the whole buffer alive while charged a few
// hundred bytes. A kept page is therefore memory of its own, never the
// reader's page, and is charged at least every byte it holds.
func TestSharedPagesAreChargedWhatTheyKeep(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, 40)
	for i := range recs {
		recs[i] = Record{Key: []byte("k"), Value: make([]byte, 500), Headers: []segment.Header{{Key: []byte("h"), Value: []byte("v")}}}
	}
	if _, err := b.Produce(ctx, "t", recs); err != nil { // one stored batch of 20 KB
		t.Fatal(err)
	}
	pos, err := b.startPosition(FetchRequest{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	w := b.watchFor(pos.topicID)
	for range 3 {
		b.pollSleeping(w, pos.topicID)
	}
	w.fire()
	_, at := w.waitGen()
	at.woke = true
	read := map[byte]any{}
	for _, kind := range []byte{pageRecords, pageBatches} {
		page, _, err := w.readShared(at, pageKey(kind, pos, 1, 1<<20), func() (any, position, int, error) {
			if kind == pageBatches {
				out, after, _, _, err := b.readBatchPage(ctx, pos, budget{records: 1 << 30, bytes: 1 << 20}, at)
				return out, after, batchesSize(out), err
			}
			out, after, _, err := b.readPage(ctx, pos, 1, at)
			return out, after, recordsSize(out), err
		})
		if err != nil {
			t.Fatal(err)
		}
		read[kind] = page
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	held := 0
	for _, kind := range []byte{pageRecords, pageBatches} {
		p := w.shared.pages[pageKey(kind, pos, 1, 1<<20)]
		if p == nil {
			t.Fatalf("no page of kind %d kept", kind)
		}
		switch page := p.page.(type) {
		case []Record:
			first := read[kind].([]Record)
			if len(page) != 1 || len(first) != 1 || &page[0].Value[0] == &first[0].Value[0] {
				t.Fatalf("the kept page of %d records is the reader's page of %d, in the store's read buffer", len(page), len(first))
			}
			for _, r := range page {
				held += len(r.Key) + len(r.Value)
				for _, h := range r.Headers {
					held += len(h.Key) + len(h.Value)
				}
			}
		case []RangeBatch:
			first := read[kind].([]RangeBatch)
			if len(page) != 1 || len(first) != 1 || &page[0].Batch[0] == &first[0].Batch[0] {
				t.Fatalf("the kept page of %d batches is the reader's page of %d, in the store's read buffer", len(page), len(first))
			}
			for _, rb := range page {
				held += len(rb.Batch)
			}
		default:
			t.Fatalf("a page of %T", p.page)
		}
	}
	if w.shared.bytes < int64(held) {
		t.Fatalf("the shared pages are charged %d bytes, yet hold %d", w.shared.bytes, held)
	}
	if used := sharedBudgetUsed.Load(); used < w.shared.bytes {
		t.Fatalf("the node-wide budget counts %d bytes, fewer than the %d the pages are charged", used, w.shared.bytes)
	}
}
