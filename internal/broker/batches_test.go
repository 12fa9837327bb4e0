package broker

// Wire v2 at the broker: producers' batches stored as received, fetches
// that hand stored batches back, and the paths where a batch cannot go as
// is (stale routes, another key slice, a position inside a batch).

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// routeBatches builds one batch per active range the way a v2 producer
// does, from records keyed "k<i>" with value "<seq>".
func routeBatches(t *testing.T, b *Broker, topic string, recs []Record, codec segment.Codec) []RangeBatch {
	t.Helper()
	bits, routes, err := b.Routes(topic)
	if err != nil {
		t.Fatal(err)
	}
	per := map[uint64][]Record{}
	var order []uint64
	for i, r := range recs {
		id := routes[i%len(routes)].Range // keyless: any range
		if r.Key != nil {
			pos := keyspace.Position(r.Key, bits)
			for _, rr := range routes {
				if pos >= rr.Start && pos < rr.End {
					id = rr.Range
				}
			}
		}
		if _, ok := per[id]; !ok {
			order = append(order, id)
		}
		per[id] = append(per[id], r)
	}
	var out []RangeBatch
	for _, id := range order {
		batch, err := segment.EncodeBatch(nil, 0, per[id], codec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, RangeBatch{Range: id, Batch: batch})
	}
	return out
}

type produceResult struct{ n, rerouted int }

func produceBatches(t *testing.T, b *Broker, topic string, batches []RangeBatch) (produceResult, error) {
	t.Helper()
	type res struct {
		r   produceResult
		err error
	}
	ch := make(chan res, 1)
	err := b.ProduceBatchesAsync(context.Background(), topic, batches, func(n, rerouted int, err error) {
		ch <- res{produceResult{n, rerouted}, err}
	})
	if err != nil {
		return produceResult{}, err
	}
	r := <-ch
	return r.r, r.err
}

func keyedRecords(keys, perKey, from int) []Record {
	var recs []Record
	for s := from; s < from+perKey; s++ {
		for k := 0; k < keys; k++ {
			recs = append(recs, Record{Key: []byte("k" + strconv.Itoa(k)), Value: []byte(strconv.Itoa(s)), Timestamp: int64(1000 + s)})
		}
	}
	return recs
}

// drainBatches reads a topic with FetchBatches until a page is empty and
// checks per-key order; it returns the values seen per key.
func drainBatches(t *testing.T, b *Broker, topic string, cursor *string, maxBytes int) (map[string][]int, *string) {
	t.Helper()
	seen := map[string][]int{}
	for {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{
			FetchRequest: FetchRequest{Topic: topic, Cursor: cursor}, MaxBytes: maxBytes,
		})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		if len(p.Batches) == 0 {
			return seen, cursor
		}
		for _, rb := range p.Batches {
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				t.Fatalf("range %d: %v", rb.Range, err)
			}
			for _, r := range recs {
				seq, _ := strconv.Atoi(string(r.Value))
				k := string(r.Key)
				if s := seen[k]; len(s) > 0 && s[len(s)-1] >= seq {
					t.Fatalf("key %s: %d after %d", k, seq, s[len(s)-1])
				}
				seen[k] = append(seen[k], seq)
			}
		}
	}
}

func requireExactly(t *testing.T, seen map[string][]int, keys, perKey int) {
	t.Helper()
	for k := 0; k < keys; k++ {
		got := seen["k"+strconv.Itoa(k)]
		if len(got) != perKey {
			t.Fatalf("key k%d: %d records, want %d (%v)", k, len(got), perKey, got)
		}
		for i, v := range got {
			if v != i {
				t.Fatalf("key k%d: record %d is %d", k, i, v)
			}
		}
	}
}

func TestProduceBatchesRoundTrip(t *testing.T) {
	for _, codec := range []segment.Codec{segment.CodecNone, segment.CodecZstd, segment.CodecS2, segment.CodecLZ4} {
		t.Run(codec.String(), func(t *testing.T) {
			b := openTestBroker(t, t.TempDir())
			defer b.Close()
			ctx := context.Background()
			if err := b.CreateTopic(ctx, "t", 8, 4); err != nil {
				t.Fatal(err)
			}
			const keys, perKey = 16, 40
			for round := 0; round < 4; round++ {
				batches := routeBatches(t, b, "t", keyedRecords(keys, perKey/4, round*perKey/4), codec)
				res, err := produceBatches(t, b, "t", batches)
				if err != nil || res.n != keys*perKey/4 || res.rerouted != 0 {
					t.Fatalf("round %d: %+v %v", round, res, err)
				}
			}
			seen, _ := drainBatches(t, b, "t", nil, 0)
			requireExactly(t, seen, keys, perKey)
			// A v1 reader sees the same records.
			r := newReader(t, b, "t")
			r.drain()
			requireExactly(t, r.seen, keys, perKey)
		})
	}
}

// A stored batch goes back to a v2 reader as the producer built it: only
// the base offset and the CRC differ.
func TestFetchBatchesServesStoredBytes(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	// Two batches: the second is stamped with base 15, not the 0 it was
	// built with.
	var sent [][]byte
	for round := 0; round < 2; round++ {
		batches := routeBatches(t, b, "t", keyedRecords(3, 5, round*5), segment.CodecZstd)
		sent = append(sent, bytes.Clone(batches[0].Batch)) // the broker stamps its own in place
		if _, err := produceBatches(t, b, "t", batches); err != nil {
			t.Fatal(err)
		}
	}
	p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t"}})
	if err != nil || len(p.Batches) != 2 {
		t.Fatalf("%d batches, %v", len(p.Batches), err)
	}
	if !bytes.Equal(p.Batches[0].Batch, sent[0]) {
		t.Fatal("first batch (base 0) not served byte for byte")
	}
	got, want := p.Batches[1].Batch, sent[1]
	if h, err := segment.ParseHeader(got); err != nil || h.BaseOffset != 15 {
		t.Fatalf("second batch header %+v, %v", h, err)
	}
	const crcEnd, baseEnd = 6, 14
	if !bytes.Equal(got[:2], want[:2]) || !bytes.Equal(got[baseEnd:], want[baseEnd:]) {
		t.Fatalf("stored batch differs beyond base offset and CRC:\n got %x\nwant %x", got, want)
	}
	if bytes.Equal(got[2:crcEnd], want[2:crcEnd]) {
		t.Fatal("CRC not recomputed after the base offset changed")
	}
}

func TestProduceBatchesStaleRoutesAreRerouted(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	const keys = 32
	stale := routeBatches(t, b, "t", keyedRecords(keys, 1, 0), segment.CodecNone)
	if _, err := produceBatches(t, b, "t", stale); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SplitRange(ctx, "t", stale[0].Range); err != nil {
		t.Fatal(err)
	}
	// Built against the routes before the split: the parent is sealed.
	again, err := segment.EncodeBatch(nil, 0, keyedRecords(keys, 1, 1), segment.CodecS2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := produceBatches(t, b, "t", []RangeBatch{{Range: stale[0].Range, Batch: again}})
	if err != nil || res.n != keys || res.rerouted != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// Every key to one child: the keys of the other are outside it.
	_, routes, _ := b.Routes("t")
	wrong, _ := segment.EncodeBatch(nil, 0, keyedRecords(keys, 1, 2), segment.CodecNone)
	res, err = produceBatches(t, b, "t", []RangeBatch{{Range: routes[0].Range, Batch: wrong}})
	if err != nil || res.n != keys || res.rerouted != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// Fresh routes go straight in.
	res, err = produceBatches(t, b, "t", routeBatches(t, b, "t", keyedRecords(keys, 1, 3), segment.CodecNone))
	if err != nil || res.n != keys || res.rerouted != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	seen, _ := drainBatches(t, b, "t", nil, 0)
	requireExactly(t, seen, keys, 4)
}

func TestProduceBatchesBadBatchStoresNothing(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 2); err != nil {
		t.Fatal(err)
	}
	good := routeBatches(t, b, "t", keyedRecords(8, 2, 0), segment.CodecNone)
	if len(good) != 2 {
		t.Fatalf("%d batches", len(good))
	}
	bad := append([]byte(nil), good[1].Batch...)
	bad[len(bad)-1] ^= 1 // the CRC no longer matches
	_, err := produceBatches(t, b, "t", []RangeBatch{good[0], {Range: good[1].Range, Batch: bad}})
	if !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("err = %v, want ErrInvalidBatch", err)
	}
	bomb := append([]byte(nil), good[0].Batch...)
	bomb = bomb[:len(bomb)-1] // shorter than its header says
	if _, err := produceBatches(t, b, "t", []RangeBatch{{Range: good[0].Range, Batch: bomb}}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("truncated: err = %v", err)
	}
	if _, err := produceBatches(t, b, "nope", good); !errors.Is(err, metadata.ErrNoSuchTopic) {
		t.Fatalf("unknown topic: err = %v", err)
	}
	if seen, _ := drainBatches(t, b, "t", nil, 0); len(seen) != 0 {
		t.Fatalf("refused produce stored %v", seen)
	}
	if _, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "nope"}}); !errors.Is(err, metadata.ErrNoSuchTopic) {
		t.Fatalf("fetch of unknown topic: err = %v", err)
	}
}

// After a split each child drains its slice of the sealed parent first:
// the parent's batches hold both slices, so they are filtered, and the
// two children together read every record once.
func TestFetchBatchesAfterSplitFiltersParent(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	const keys = 20
	first := routeBatches(t, b, "t", keyedRecords(keys, 3, 0), segment.CodecZstd)
	if _, err := produceBatches(t, b, "t", first); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SplitRange(ctx, "t", first[0].Range); err != nil {
		t.Fatal(err)
	}
	if _, err := produceBatches(t, b, "t", routeBatches(t, b, "t", keyedRecords(keys, 3, 3), segment.CodecNone)); err != nil {
		t.Fatal(err)
	}
	seen, _ := drainBatches(t, b, "t", nil, 300)
	requireExactly(t, seen, keys, 6)
}

// A v1 page can stop inside a stored batch; a v2 fetch from its cursor
// gets the rest of that batch and nothing twice.
func TestFetchBatchesFromInsideABatch(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := produceBatches(t, b, "t", routeBatches(t, b, "t", keyedRecords(10, 5, 0), segment.CodecNone)); err != nil {
		t.Fatal(err)
	}
	p, err := b.Fetch(context.Background(), FetchRequest{Topic: "t", Max: 7})
	if err != nil || len(p.Records) != 7 {
		t.Fatalf("%d records, %v", len(p.Records), err)
	}
	seen, _ := drainBatches(t, b, "t", p.Cursor, 0)
	total := 0
	for _, v := range seen {
		total += len(v)
	}
	if total != 50-7 {
		t.Fatalf("read %d after the v1 page, want %d", total, 43)
	}
}

// max_bytes bounds a page by whole batches; the pages together hold
// everything once.
func TestFetchBatchesPagesByBytes(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 2); err != nil {
		t.Fatal(err)
	}
	const keys, rounds = 6, 30
	for r := 0; r < rounds; r++ {
		if _, err := produceBatches(t, b, "t", routeBatches(t, b, "t", keyedRecords(keys, 1, r), segment.CodecNone)); err != nil {
			t.Fatal(err)
		}
	}
	pages := 0
	var cursor *string
	seen := map[string][]int{}
	for {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor}, MaxBytes: 200})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		if len(p.Batches) == 0 {
			break
		}
		size := 0
		for _, rb := range p.Batches {
			size += len(rb.Batch)
			recs, _ := segment.DecodeRecords(rb.Batch, nil)
			for _, r := range recs {
				v, _ := strconv.Atoi(string(r.Value))
				seen[string(r.Key)] = append(seen[string(r.Key)], v)
			}
		}
		if len(p.Batches) > 1 && size > 200 {
			t.Fatalf("page of %d batches holds %d bytes, over max_bytes 200", len(p.Batches), size)
		}
		pages++
	}
	requireExactly(t, seen, keys, rounds)
	if pages < rounds {
		t.Fatalf("%d pages for %d rounds of small batches: max_bytes not applied", pages, rounds)
	}
}

// v2reader is reader for FetchBatches.
type v2reader struct {
	t      *testing.T
	b      *Broker
	cursor *string
	seen   map[string][]int
}

func (r *v2reader) drain() {
	r.t.Helper()
	for {
		p, err := r.b.FetchBatches(context.Background(), FetchBatchesRequest{
			FetchRequest: FetchRequest{Topic: "t", Cursor: r.cursor}, MaxBytes: 2 << 10,
		})
		if err != nil {
			r.t.Fatal(err)
		}
		r.cursor = p.Cursor
		if len(p.Batches) == 0 {
			return
		}
		for _, rb := range p.Batches {
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				r.t.Fatal(err)
			}
			for _, rec := range recs {
				seq, _ := strconv.Atoi(string(rec.Value))
				k := string(rec.Key)
				if s := r.seen[k]; len(s) > 0 && s[len(s)-1] >= seq {
					r.t.Fatalf("key %s: %d after %d", k, seq, s[len(s)-1])
				}
				r.seen[k] = append(r.seen[k], seq)
			}
		}
	}
}

// Producers send v2 batches routed with routes refreshed only now and
// then, while ranges split and merge under them: every acknowledged record
// is read once, in order per key, by v2 readers (from the start and from
// a cursor taken midway) and by a v1 reader.
func TestProduceBatchesWhileRangesSplitAndMerge(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	const keys, rounds = 24, 60
	acked := &ackLog{byKey: map[string][]int{}}
	done := make(chan int, rounds)
	errs := make(chan error, 1)
	go func() {
		defer close(done)
		var stale []RangeBatch
		for round := 0; round < rounds; round++ {
			recs := keyedRecords(keys, 2, 2*round)
			if round%7 == 0 || stale == nil {
				stale = routeBatches(t, b, "t", recs, segment.CodecNone)
			}
			// Same ranges as the last refresh, whatever happened since.
			batches := make([]RangeBatch, 0, len(stale))
			per := map[uint64][]Record{}
			for _, r := range recs {
				id := stale[int(keyspace.Position(r.Key, 8))%len(stale)].Range
				per[id] = append(per[id], r)
			}
			for id, rs := range per {
				batch, _ := segment.EncodeBatch(nil, 0, rs, segment.CodecNone)
				batches = append(batches, RangeBatch{Range: id, Batch: batch})
			}
			if _, err := produceBatches(t, b, "t", batches); err != nil {
				errs <- err
				return
			}
			for k := 0; k < keys; k++ {
				acked.add("k"+strconv.Itoa(k), []int{2 * round, 2*round + 1})
			}
			done <- round
		}
	}()
	fromStart := &v2reader{t: t, b: b, seen: map[string][]int{}}
	midway := &v2reader{t: t, b: b, seen: map[string][]int{}}
	v1 := newReader(t, b, "t")
	steps := []func() error{
		func() error { _, err := b.SplitRange(ctx, "t", 0); return err },
		func() error { _, err := b.SplitRange(ctx, "t", 0); return err },
		func() error { return mergeAny(b, "t") },
		func() error { _, err := b.SplitRange(ctx, "t", 0); return err },
		func() error { return mergeAny(b, "t") },
		func() error { return mergeAny(b, "t") },
	}
	for i, step := range steps {
		for range 5 { // let the producer run a few rounds between changes
			if _, ok := <-done; !ok {
				break
			}
		}
		if i == 1 {
			midway.drain()
		}
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	for range done {
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	fromStart.drain()
	midway.drain()
	v1.drain()
	requireExactly(t, fromStart.seen, keys, 2*rounds)
	requireExactly(t, midway.seen, keys, 2*rounds)
	v1.check("v1 reader", acked)
}

// One page holds batches of every range that has some, whether the budget
// is records or bytes, and batches larger than a range's share of the
// bytes reach every range within a few pages.
func TestFetchBatchesSharesThePageAcrossRanges(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 4); err != nil {
		t.Fatal(err)
	}
	_, routes, _ := b.Routes("t")
	// Keyless records go wherever the producer puts them: five batches
	// of ten per range.
	for round := 0; round < 5; round++ {
		var batches []RangeBatch
		for _, rr := range routes {
			recs := make([]Record, 10)
			for i := range recs {
				recs[i] = Record{Value: []byte("v"), Timestamp: 1}
			}
			batch, _ := segment.EncodeBatch(nil, 0, recs, segment.CodecNone)
			batches = append(batches, RangeBatch{Range: rr.Range, Batch: batch})
		}
		if _, err := produceBatches(t, b, "t", batches); err != nil {
			t.Fatal(err)
		}
	}
	p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Max: 40}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rangesOf(p.Batches); len(got) != 4 {
		t.Fatalf("a page of 40 records from four ranges of 50 came from ranges %v", got)
	}

	// Big batches: each ~100 KiB, a page of 256 KiB (a share is 64 KiB).
	if err := b.CreateTopic(context.Background(), "big", 8, 4); err != nil {
		t.Fatal(err)
	}
	_, routes, _ = b.Routes("big")
	value := bytes.Repeat([]byte("x"), 100<<10)
	for round := 0; round < 3; round++ {
		var batches []RangeBatch
		for _, rr := range routes {
			batch, _ := segment.EncodeBatch(nil, 0, []Record{{Value: value, Timestamp: 1}}, segment.CodecNone)
			batches = append(batches, RangeBatch{Range: rr.Range, Batch: batch})
		}
		if _, err := produceBatches(t, b, "big", batches); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint64]bool{}
	var cursor *string
	for page := 0; page < 3; page++ {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "big", Cursor: cursor}, MaxBytes: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		size := 0
		for _, rb := range p.Batches {
			seen[rb.Range] = true
			size += len(rb.Batch)
		}
		if len(p.Batches) > 1 && size > 256<<10 {
			t.Fatalf("page %d: %d bytes over max_bytes", page, size)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("three pages of 100 KiB batches from four busy ranges served only ranges %v", seen)
	}
}

func rangesOf(bs []RangeBatch) map[uint64]int {
	out := map[uint64]int{}
	for _, rb := range bs {
		out[rb.Range]++
	}
	return out
}

// A batch re-encoded for a reader (filtered after a split) is checked
// against max_bytes at its re-encoded size.
func TestFetchBatchesFilteredBatchesKeepMaxBytes(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	_, routes, _ := b.Routes("t")
	value := bytes.Repeat([]byte("abcdefgh"), 512) // 4 KiB, compresses well
	for round := 0; round < 8; round++ {
		recs := make([]Record, 16)
		for i := range recs {
			recs[i] = Record{Key: []byte(strconv.Itoa(i)), Value: value, Timestamp: 1}
		}
		batch, _ := segment.EncodeBatch(nil, 0, recs, segment.CodecZstd)
		if _, err := produceBatches(t, b, "t", []RangeBatch{{Range: routes[0].Range, Batch: batch}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.SplitRange(ctx, "t", routes[0].Range); err != nil {
		t.Fatal(err)
	}
	var cursor *string
	total := 0
	for {
		p, err := b.FetchBatches(ctx, FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor}, MaxBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		if len(p.Batches) == 0 {
			break
		}
		size := 0
		for _, rb := range p.Batches {
			size += len(rb.Batch)
			h, _ := segment.ParseHeader(rb.Batch)
			total += int(h.RecordCount)
		}
		if len(p.Batches) > 1 && size > 64<<10 {
			t.Fatalf("page of %d filtered batches is %d bytes, over max_bytes", len(p.Batches), size)
		}
	}
	if total != 8*16 {
		t.Fatalf("read %d records, want %d", total, 8*16)
	}
}

// A request cannot buy more work than a v1 frame: its raw bytes are
// bounded, as are its batches and how far one claims to inflate.
func TestProduceBatchesRequestBounds(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 1); err != nil {
		t.Fatal(err)
	}
	_, routes, _ := b.Routes("t")
	zeros, _ := segment.EncodeBatch(nil, 0, []Record{{Value: make([]byte, 200<<10), Timestamp: 1}}, segment.CodecS2)
	if _, err := produceBatches(t, b, "t", []RangeBatch{{Range: routes[0].Range, Batch: zeros}}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("a %d-byte batch of 200 KiB of zeros: err = %v", len(zeros), err)
	}
	text := make([]byte, 200<<10)
	for i := range text {
		text[i] = byte('a' + i*7919%26)
	}
	one, _ := segment.EncodeBatch(nil, 0, []Record{{Value: text, Timestamp: 1}}, segment.CodecNone)
	many := make([]RangeBatch, MaxRequestRawBytes/len(one)+1)
	for i := range many {
		many[i] = RangeBatch{Range: routes[0].Range, Batch: one}
	}
	if _, err := produceBatches(t, b, "t", many); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("%d raw bytes in one request: err = %v", len(many)*len(one), err)
	}
	tiny, _ := segment.EncodeBatch(nil, 0, []Record{{Value: []byte("v"), Timestamp: 1}}, segment.CodecNone)
	lots := make([]RangeBatch, MaxRequestBatches+1)
	for i := range lots {
		lots[i] = RangeBatch{Range: routes[0].Range, Batch: tiny}
	}
	if _, err := produceBatches(t, b, "t", lots); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("%d batches: err = %v", len(lots), err)
	}
	if seen, _ := drainBatches(t, b, "t", nil, 0); len(seen) != 0 {
		t.Fatalf("refused requests stored %v", seen)
	}
}

// max_records is exact: a page that would pass it ends inside a batch,
// and the next page starts at the first record left out.
func TestFetchBatchesMaxRecordsIsExact(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	if err := b.CreateTopic(context.Background(), "t", 8, 2); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 5, 10
	for round := 0; round < perKey; round++ {
		if _, err := produceBatches(t, b, "t", routeBatches(t, b, "t", keyedRecords(keys, 1, round), segment.CodecZstd)); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string][]int{}
	var cursor *string
	total := 0
	for {
		p, err := b.FetchBatches(context.Background(), FetchBatchesRequest{FetchRequest: FetchRequest{Topic: "t", Cursor: cursor, Max: 7}})
		if err != nil {
			t.Fatal(err)
		}
		cursor = p.Cursor
		n := 0
		for _, rb := range p.Batches {
			recs, err := segment.DecodeRecords(rb.Batch, nil)
			if err != nil {
				t.Fatal(err)
			}
			n += len(recs)
			for _, r := range recs {
				v, _ := strconv.Atoi(string(r.Value))
				seen[string(r.Key)] = append(seen[string(r.Key)], v)
			}
		}
		if n == 0 {
			break
		}
		total += n
		if n > 7 || (n < 7 && total != keys*perKey) {
			t.Fatalf("page of %d records with max 7 (%d read so far)", n, total)
		}
	}
	requireExactly(t, seen, keys, perKey)
}
