package broker

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/cursor"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// TestLockstepReadersEachSeeEveryRange: where a page starts must come
// from the reader's own position. Were it shared by every reader of a
// topic, two readers fetching in turn (two independent consumers) would
// move it for each other: with 32 busy ranges and pages of 16 shares, one
// would read ranges 0..15 and the other 16..31, page after page. Over 20
// pages (10 windows of 32 ranges) the second reader must have been served
// every range.
func TestLockstepReadersEachSeeEveryRange(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	const ranges = 32
	if err := b.CreateTopic(ctx, "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, owner := keysPerRange(t, b, "t")
	produceEach(t, b, "t", keys, 100)

	var curA, curB *string
	servedB := map[uint64]int{}
	for range 20 {
		pa, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: curA, Max: 32})
		if err != nil {
			t.Fatal(err)
		}
		curA = pa.Cursor
		pb, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: curB, Max: 32})
		if err != nil {
			t.Fatal(err)
		}
		curB = pb.Cursor
		for _, r := range pb.Records {
			servedB[owner[string(r.Key)]]++
		}
	}
	if len(servedB) != ranges {
		t.Fatalf("reader B was served %d of %d ranges over 20 pages, all with records waiting: %v", len(servedB), ranges, servedB)
	}
}

// TestLockstepReadersEachSeeEveryRangeV2 is the same for wire v2
// fetch_batches.
func TestLockstepReadersEachSeeEveryRangeV2(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	const ranges = 32
	if err := b.CreateTopic(ctx, "t", 8, ranges); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	for range 50 {
		produceEach(t, b, "t", keys, 10)
	}
	var curA, curB *string
	servedB := map[uint64]int{}
	for range 20 {
		pa, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: curA, Max: 32 * 10}})
		if err != nil {
			t.Fatal(err)
		}
		curA = pa.Cursor
		pb, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: curB, Max: 32 * 10}})
		if err != nil {
			t.Fatal(err)
		}
		curB = pb.Cursor
		for _, rb := range pb.Batches {
			servedB[rb.Range]++
		}
	}
	if len(servedB) != ranges {
		t.Fatalf("reader B was served %d of %d ranges over 20 pages, all with records waiting: %v", len(servedB), ranges, servedB)
	}
}

// liveReader follows its own cursor while everything else goes on, and
// keeps per-key order and exactly-once as it reads.
type liveReader struct {
	name   string
	b      *Broker
	topic  string
	v2     bool
	max    int
	wait   time.Duration
	cursor *string
	mu     sync.Mutex
	seen   map[string][]int
	err    error
}

func (r *liveReader) fail(format string, args ...any) {
	r.mu.Lock()
	if r.err == nil {
		r.err = fmt.Errorf(r.name+": "+format, args...)
	}
	r.mu.Unlock()
}

func (r *liveReader) take(key string, value []byte) bool {
	seq, err := strconv.Atoi(string(value))
	if err != nil {
		r.fail("bad value %q", value)
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.seen[key]; len(s) > 0 && s[len(s)-1] >= seq {
		if r.err == nil {
			r.err = fmt.Errorf("%s: key %s: %d delivered after %d", r.name, key, seq, s[len(s)-1])
		}
		return false
	}
	r.seen[key] = append(r.seen[key], seq)
	return true
}

// page reads one page and says how many records it held.
func (r *liveReader) page(ctx context.Context) (int, error) {
	if !r.v2 {
		p, err := r.b.Fetch(ctx, FetchRequest{Topic: r.topic, Cursor: r.cursor, Max: r.max, Wait: r.wait})
		if err != nil {
			return 0, err
		}
		r.cursor = p.Cursor
		for _, rec := range p.Records {
			if !r.take(string(rec.Key), rec.Value) {
				return 0, r.err
			}
		}
		return len(p.Records), nil
	}
	p, err := r.b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: r.topic, Cursor: r.cursor, Max: r.max, Wait: r.wait}, MaxBytes: 1 << 10})
	if err != nil {
		return 0, err
	}
	r.cursor = p.Cursor
	n := 0
	for _, rb := range p.Batches {
		recs, err := segment.DecodeRecords(rb.Batch, nil)
		if err != nil {
			return 0, err
		}
		for _, rec := range recs {
			if !r.take(string(rec.Key), rec.Value) {
				return 0, r.err
			}
			n++
		}
	}
	return n, nil
}

// TestLiveReadersExactlyOnceUnderReshards: producers write keyed
// records without pause while ranges split and merge, and readers of
// wire v1 and v2, short and long polling, with small pages, follow their
// cursors the whole time (sharing the topic's read state). When producers
// stop, every reader drains to an empty page: each must have read every
// acknowledged record once, every key in order.
func TestLiveReadersExactlyOnceUnderReshards(t *testing.T) {
	b, err := Open(context.Background(), Config{DataDir: t.TempDir(), SegmentMaxBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const topic = "live"
	if err := b.CreateTopic(ctx, topic, 8, 2); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	stop := make(chan struct{})
	var prod sync.WaitGroup
	for p := range 4 {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("p%d-k%d", p, seq%11)
				n, err := b.Produce(ctx, topic, []Record{{Key: []byte(key), Value: []byte(strconv.Itoa(seq))}})
				if err != nil || n != 1 {
					if err == ErrRetry {
						seq-- // not written: the same value again keeps the key's sequence dense
						continue
					}
					t.Errorf("produce: %v", err)
					return
				}
				acked.add(key, []int{seq})
			}
		}()
	}
	var readers []*liveReader
	for i, cfg := range []struct {
		v2   bool
		max  int
		wait time.Duration
	}{{false, 3, 0}, {false, 7, 20 * time.Millisecond}, {true, 5, 0}, {true, 9, 20 * time.Millisecond}, {false, 1, 0}, {true, 1, 5 * time.Millisecond}} {
		readers = append(readers, &liveReader{name: fmt.Sprintf("reader %d", i), b: b, topic: topic, v2: cfg.v2, max: cfg.max, wait: cfg.wait, seen: map[string][]int{}})
	}
	var live atomic.Bool
	live.Store(true)
	var rd sync.WaitGroup
	for _, r := range readers {
		rd.Add(1)
		go func() {
			defer rd.Done()
			for live.Load() {
				if _, err := r.page(ctx); err != nil {
					r.fail("%v", err)
					return
				}
			}
		}()
	}
	for i := range 24 {
		var err error
		if i%3 == 2 {
			err = mergeAny(b, topic)
		} else {
			_, err = b.SplitRange(ctx, topic, 0)
		}
		if err != nil {
			t.Logf("reshard %d: %v", i, err)
		}
		// Let the producers land some records on the new layout before
		// the next reshard.
		waitAcked(t, acked, 20)
	}
	close(stop)
	prod.Wait()
	live.Store(false)
	rd.Wait()
	for _, r := range readers {
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.wait = 0
		for {
			n, err := r.page(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		acked.mu.Lock()
		for k, want := range acked.byKey {
			if got := r.seen[k]; fmt.Sprint(got) != fmt.Sprint(want) {
				acked.mu.Unlock()
				t.Fatalf("%s: key %s read %v, acked %v", r.name, k, got, want)
			}
		}
		for k := range r.seen {
			if _, ok := acked.byKey[k]; !ok {
				acked.mu.Unlock()
				t.Fatalf("%s: read unknown key %s", r.name, k)
			}
		}
		acked.mu.Unlock()
	}
	if acked.total == 0 {
		t.Fatal("nothing was produced")
	}
	t.Logf("%d records acknowledged", acked.total)
}

// TestGroupCommitsCursorOfLargeTopic: cursors take up to
// cursor.MaxEntries (131,072) entries so that a topic of many thousand
// ranges can be read, and a group's stored position must hold as many: a
// group reading a topic of 4,200 ranges, one record in each, commits the
// cursor the node gave it.
func TestGroupCommitsCursorOfLargeTopic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a topic of 4,200 ranges")
	}
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 16, 1024); err != nil {
		t.Fatal(err)
	}
	for n := 1024; n < 4200; {
		_, routes, err := b.Routes("t")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if n >= 4200 {
				break
			}
			if _, err := b.SplitRange(ctx, "t", r.Range); err != nil {
				t.Fatalf("split %d: %v", r.Range, err)
			}
			n++
		}
	}
	keys, _ := keysPerRange(t, b, "t")
	produceEach(t, b, "t", keys, 1)
	var cur *string
	read := 0
	for {
		p, err := b.Fetch(ctx, FetchRequest{Topic: "t", Cursor: cur, Max: 10000})
		if err != nil {
			t.Fatal(err)
		}
		cur = p.Cursor
		if len(p.Records) == 0 {
			break
		}
		read += len(p.Records)
	}
	if read != len(keys) {
		t.Fatalf("read %d of %d records", read, len(keys))
	}
	if err := b.Commit(ctx, "t", "g", *cur); err != nil {
		t.Fatalf("committing the node's own cursor of a %d-range topic: %v", len(keys), err)
	}
}

// TestDeletedTopicLeavesNoWatch: a reader that resolved the topic before
// it was deleted takes the watch afterwards and reads under it (the read
// state is hung on it); neither may stay in the node's table, since
// nothing deletes a topic twice.
func TestDeletedTopicLeavesNoWatch(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	keys, _ := keysPerRange(t, b, "t")
	produceEach(t, b, "t", keys, 3)
	s, err := b.Subscribe("t", nil, nil, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	topicID := s.pos.topicID
	if err := b.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_ = s.Run(runCtx, func(Page) error { return nil })
	b.mu.Lock()
	w, kept := b.mu.watches[topicID]
	b.mu.Unlock()
	if kept {
		t.Fatalf("deleted topic %d still has a watch (read state %v) after its only reader ended", topicID, w.reads != nil)
	}
}

// A group stores what a cursor holds: the two bounds must agree, or a
// group could not commit the node's own cursor of a large topic.
func TestGroupEntriesBoundMatchesCursor(t *testing.T) {
	if metadata.MaxGroupEntries != cursor.MaxEntries {
		t.Fatalf("metadata.MaxGroupEntries %d, cursor.MaxEntries %d", metadata.MaxGroupEntries, cursor.MaxEntries)
	}
}

// waitAcked waits until n more records have been acknowledged into a.
func waitAcked(t *testing.T, a *ackLog, n int) {
	t.Helper()
	a.mu.Lock()
	want := a.total + n
	a.mu.Unlock()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		a.mu.Lock()
		got := a.total
		a.mu.Unlock()
		if got >= want {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("only %d of %d records acknowledged after 30 s", got, want)
		}
	}
}
