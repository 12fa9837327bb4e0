package broker

// These tests check the promise ranges exist for: while producers write
// keyed records continuously, ranges split and merge (a split of a split,
// and merges back to the root), and readers — one from the start, one
// holding a cursor taken midway, one in a group committing as it goes —
// each read every acknowledged record exactly once, every key in order.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
)

func openTestBroker(t *testing.T, dir string) *Broker {
	t.Helper()
	b, err := Open(context.Background(), Config{DataDir: dir, SegmentMaxBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ackLog records what producers had acknowledged, per key, in order.
type ackLog struct {
	mu    sync.Mutex
	byKey map[string][]int
	total int
}

func (a *ackLog) add(key string, seqs []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byKey[key] = append(a.byKey[key], seqs...)
	a.total += len(seqs)
}

// reader reads a topic page by page and checks per-key order as it goes.
type reader struct {
	t      *testing.T
	b      *Broker
	topic  string
	cursor *string
	group  *string
	commit bool
	seen   map[string][]int
}

func newReader(t *testing.T, b *Broker, topic string) *reader {
	return &reader{t: t, b: b, topic: topic, seen: map[string][]int{}}
}

// drain reads until a page comes back empty.
func (r *reader) drain() {
	r.t.Helper()
	for {
		req := FetchRequest{Topic: r.topic, Cursor: r.cursor, Max: 500}
		if r.group != nil && r.cursor == nil {
			req = FetchRequest{Topic: r.topic, Group: r.group, Max: 500}
		}
		p, err := r.b.Fetch(context.Background(), req)
		if err != nil {
			r.t.Fatalf("fetch: %v", err)
		}
		r.cursor = p.Cursor
		for _, rec := range p.Records {
			seq, err := strconv.Atoi(string(rec.Value))
			if err != nil {
				r.t.Fatalf("bad value %q", rec.Value)
			}
			k := string(rec.Key)
			if s := r.seen[k]; len(s) > 0 && s[len(s)-1] >= seq {
				r.t.Fatalf("key %s: %d delivered after %d", k, seq, s[len(s)-1])
			}
			r.seen[k] = append(r.seen[k], seq)
		}
		if r.commit && r.group != nil && p.Cursor != nil {
			if err := r.b.Commit(context.Background(), r.topic, *r.group, *p.Cursor); err != nil {
				r.t.Fatalf("commit: %v", err)
			}
			r.cursor = nil // resume from the group's committed position
		}
		if len(p.Records) == 0 {
			return
		}
	}
}

// check asserts the reader saw exactly the acknowledged records.
func (r *reader) check(name string, acked *ackLog) {
	r.t.Helper()
	acked.mu.Lock()
	defer acked.mu.Unlock()
	for k, want := range acked.byKey {
		got := r.seen[k]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			r.t.Fatalf("%s: key %s read %v, acked %v", name, k, got, want)
		}
	}
	for k := range r.seen {
		if _, ok := acked.byKey[k]; !ok {
			r.t.Fatalf("%s: read unknown key %s", name, k)
		}
	}
}

// produceRound writes n records per key for keys, one produce per key
// batch, and logs what was acknowledged.
func produceRound(t *testing.T, b *Broker, topic string, keys int, next map[string]int, acked *ackLog) {
	t.Helper()
	var recs []Record
	perKey := map[string][]int{}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("key-%d", k)
		for i := 0; i < 3; i++ {
			seq := next[key]
			next[key]++
			recs = append(recs, Record{Key: []byte(key), Value: []byte(strconv.Itoa(seq))})
			perKey[key] = append(perKey[key], seq)
		}
	}
	n, err := b.Produce(context.Background(), topic, recs)
	if err != nil || n != len(recs) {
		t.Fatalf("produce: %d, %v", n, err)
	}
	for k, s := range perKey {
		acked.add(k, s)
	}
}

func TestSplitMergeKeepsEveryKeyInOrder(t *testing.T) {
	dir := t.TempDir()
	b := openTestBroker(t, dir)
	defer func() { b.Close() }()
	ctx := context.Background()
	const topic, keys = "orders", 40
	if err := b.CreateTopic(ctx, topic, 8, 1); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	fromStart := newReader(t, b, topic)
	group := "billing"
	grouped := newReader(t, b, topic)
	grouped.group, grouped.commit = &group, true

	produceRound(t, b, topic, keys, next, acked)
	midway := newReader(t, b, topic)
	midway.drain() // takes its cursor before any split
	grouped.drain()

	steps := []func() error{
		func() error { _, err := b.SplitRange(ctx, topic, 0); return err }, // root -> 2
		func() error { _, err := b.SplitRange(ctx, topic, 0); return err }, // split of a split -> 3
		func() error { _, err := b.SplitRange(ctx, topic, 0); return err }, // -> 4
		func() error { return mergeAny(b, topic) },                         // -> 3
		func() error { return mergeAny(b, topic) },                         // -> 2
		func() error { return mergeAny(b, topic) },                         // -> 1: back to the root's span
		func() error { _, err := b.SplitRange(ctx, topic, 0); return err },
	}
	for i, step := range steps {
		produceRound(t, b, topic, keys, next, acked)
		if i%2 == 0 {
			grouped.drain()
		}
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		produceRound(t, b, topic, keys, next, acked)
	}
	fromStart.drain()
	midway.drain()
	grouped.drain()
	fromStart.check("from start", acked)
	midway.check("midway", acked)
	grouped.check("group", acked)

	// Across a restart, a fresh reader and the group still agree.
	b.Close()
	b = openTestBroker(t, dir)
	again := newReader(t, b, topic)
	again.drain()
	again.check("after restart", acked)
	grouped.b = b
	produceRound(t, b, topic, keys, next, acked)
	grouped.drain()
	grouped.check("group after restart", acked)
}

// mergeAny merges the first pair of active buddies it finds.
func mergeAny(b *Broker, topic string) error {
	d, err := b.DescribeTopic(topic)
	if err != nil {
		return err
	}
	var active []RangeDescription
	for _, r := range d.Ranges {
		if r.Active {
			active = append(active, r)
		}
	}
	for i := range active {
		for j := range active {
			size := active[i].End - active[i].Start
			if i != j && active[j].End-active[j].Start == size && active[i].Start^size == active[j].Start {
				_, err := b.MergeRanges(context.Background(), topic, active[i].ID, active[j].ID)
				return err
			}
		}
	}
	return errors.New("no buddies to merge")
}

func TestSplitMergeRefusals(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "one", 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic(ctx, "other", 8, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic(ctx, "four", 8, 4); err != nil {
		t.Fatal(err)
	}
	kids, err := b.SplitRange(ctx, "one", 0)
	if err != nil {
		t.Fatal(err)
	}
	// A range of one position cannot split.
	if _, err := b.SplitRange(ctx, "one", kids[0]); !errors.Is(err, metadata.ErrCannotSplit) {
		t.Fatalf("split of a single position: %v", err)
	}
	d, _ := b.DescribeTopic("one")
	root := d.Ranges[0].ID
	if _, err := b.SplitRange(ctx, "one", root); !errors.Is(err, metadata.ErrSealed) {
		t.Fatalf("split of a sealed range: %v", err)
	}
	f, _ := b.DescribeTopic("four")
	if _, err := b.MergeRanges(ctx, "four", f.Ranges[1].ID, f.Ranges[2].ID); !errors.Is(err, metadata.ErrNotBuddies) {
		t.Fatalf("merge of non-buddies: %v", err)
	}
	o, _ := b.DescribeTopic("other")
	if _, err := b.MergeRanges(ctx, "four", f.Ranges[0].ID, o.Ranges[1].ID); !errors.Is(err, metadata.ErrDifferentTopic) {
		t.Fatalf("merge across topics: %v", err)
	}
	// The refusals changed nothing: all four ranges still take writes.
	if _, err := b.Produce(ctx, "four", []Record{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	f2, _ := b.DescribeTopic("four")
	if len(f2.Ranges) != 4 {
		t.Fatalf("refused merge left %d ranges", len(f2.Ranges))
	}
}

// TestSplitMergeUnderConcurrentProduce runs the resharding while producers
// write continuously from several goroutines, each owning its keys, and a
// grouped reader commits as it goes.
func TestSplitMergeUnderConcurrentProduce(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	const topic = "live"
	if err := b.CreateTopic(ctx, topic, 8, 1); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			seq := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("p%d-k%d", p, seq%7)
				n, err := b.Produce(ctx, topic, []Record{{Key: []byte(key), Value: []byte(strconv.Itoa(seq))}})
				if err != nil || n != 1 {
					t.Errorf("produce: %v", err)
					return
				}
				acked.add(key, []int{seq})
				seq++
			}
		}(p)
	}
	group := "g"
	grouped := newReader(t, b, topic)
	grouped.group, grouped.commit = &group, true
	fromStart := newReader(t, b, topic)
	for i := 0; i < 12; i++ {
		var err error
		if i%4 == 3 {
			err = mergeAny(b, topic)
		} else {
			_, err = b.SplitRange(ctx, topic, 0)
		}
		if err != nil {
			t.Fatalf("reshard %d: %v", i, err)
		}
		grouped.drain()
	}
	close(stop)
	wg.Wait()
	fromStart.drain()
	grouped.drain()
	fromStart.check("from start", acked)
	grouped.check("group", acked)
	if acked.total == 0 {
		t.Fatal("nothing was produced")
	}
	t.Logf("%d records acknowledged across 12 reshards", acked.total)
}

func TestDataDirIsLocked(t *testing.T) {
	dir := t.TempDir()
	b := openTestBroker(t, dir)
	if _, err := Open(context.Background(), Config{DataDir: dir}); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second open of a served directory: %v", err)
	}
	b.Close()
	b2 := openTestBroker(t, dir) // released on close
	b2.Close()
}

func TestEndCursorSkipsHistoryAcrossSplits(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "tail", 8, 2); err != nil {
		t.Fatal(err)
	}
	old := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	produceRound(t, b, "tail", 20, next, old)
	if _, err := b.SplitRange(ctx, "tail", 0); err != nil {
		t.Fatal(err)
	}
	produceRound(t, b, "tail", 20, next, old)
	end, err := b.EndCursor("tail")
	if err != nil {
		t.Fatal(err)
	}
	fresh := &ackLog{byKey: map[string][]int{}}
	produceRound(t, b, "tail", 20, next, fresh)
	r := newReader(t, b, "tail")
	r.cursor = &end
	r.drain()
	r.check("from the end cursor", fresh)
	if _, err := b.EndCursor("missing"); !errors.Is(err, metadata.ErrNoSuchTopic) {
		t.Fatalf("end cursor of a missing topic: %v", err)
	}
}
