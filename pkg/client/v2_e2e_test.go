package client_test

// End-to-end tests of wire v2 (api_versions, topic_routes,
// produce_batches, fetch_batches) against a real node, and of its mixing
// with wire v1.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// fetchAllV2 reads topic from cursor on with wire v2 fetches (Max 0) of at
// most maxBytes each until a page comes back empty, and returns the
// records and the cursor after them. Produced records are durable before
// their produce returns, so the empty page is the end.
func fetchAllV2(t *testing.T, c *client.Client, topic, cursor string, maxBytes int) ([]client.Record, string) {
	t.Helper()
	var out []client.Record
	for pages := 0; ; pages++ {
		page, err := c.Fetch(t.Context(), topic, client.FetchOptions{Cursor: cursor, MaxBytes: maxBytes})
		if err != nil {
			t.Fatalf("v2 fetch after %d records: %v", len(out), err)
		}
		if page.Cursor == "" {
			t.Fatalf("v2 fetch after %d records: no cursor", len(out))
		}
		cursor = page.Cursor
		if len(page.Records) == 0 {
			return out, cursor
		}
		if pages > 1_000_000 {
			t.Fatal("v2 fetch does not end")
		}
		out = append(out, page.Records...)
	}
}

// seqValue is the value of the seq-th record of a key: the sequence
// number, then filler up to size bytes.
func seqValue(seq, size int) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(seq))
	for len(v) < size {
		v = append(v, byte('a'+len(v)%26))
	}
	return v
}

// keylessKey counts the records without a key in checkPerKeyOrder's want.
const keylessKey = "\x00keyless"

// checkPerKeyOrder asserts recs hold, for every key, sequence numbers
// 0..want[key]-1 exactly once each and in order (records without a key
// are checked as one more key, for loss and duplicates only).
func checkPerKeyOrder(t *testing.T, recs []client.Record, want map[string]int) {
	t.Helper()
	next := map[string]int{}
	keyless := map[uint64]bool{}
	for i, r := range recs {
		if len(r.Value) < 8 {
			t.Fatalf("record %d: value %q carries no sequence", i, r.Value)
		}
		seq := int(binary.BigEndian.Uint64(r.Value))
		if r.Key == nil {
			if keyless[uint64(seq)] {
				t.Fatalf("keyless record %d read twice", seq)
			}
			keyless[uint64(seq)] = true
			continue
		}
		if seq != next[string(r.Key)] {
			t.Fatalf("record %d: key %q sequence %d, want %d (lost, duplicated or reordered)", i, r.Key, seq, next[string(r.Key)])
		}
		next[string(r.Key)]++
	}
	for k, n := range want {
		if k == keylessKey {
			continue
		}
		if next[k] != n {
			t.Errorf("key %q: read %d records, want %d", k, next[k], n)
		}
	}
	if n := want[keylessKey]; len(keyless) != n {
		t.Errorf("read %d keyless records, want %d", len(keyless), n)
	}
}

func activeRangeIDs(t *testing.T, c *client.Client, topic string) map[uint64]bool {
	t.Helper()
	d, err := c.DescribeTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for _, r := range d.Ranges {
		ids[r.ID] = true
	}
	return ids
}

// TestV2RoundTrip produces through the Producer and Client.Produce with
// wire v2 into four ranges and reads everything back with fetch_batches:
// every record once, each key's in order, the corner cases of the record
// encoding intact, and each record marked with its range.
func TestV2RoundTrip(t *testing.T) {
	_, c := start(t)
	if v := c.WireVersion(); v != 2 {
		t.Fatalf("WireVersion = %d against a v2 node, want 2", v)
	}
	createTopic(t, c, "v2rt", client.WithRanges(4))

	// Corner cases, identified by their "id" header.
	ts := time.UnixMilli(1_700_000_000_001)
	specials := []client.Record{
		{Key: nil, Value: []byte("no key")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte("k"), Value: nil},
		{Key: []byte("k"), Value: []byte{}},
		{Key: []byte("h"), Value: []byte("headers"), Headers: []client.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "nil", Value: nil},
			{Key: "empty", Value: []byte{}},
			{Key: "", Value: []byte("empty header key")},
			{Key: "trace", Value: []byte("repeated keys are kept")},
		}},
		{Key: []byte{0, 0xff, '\n'}, Value: bytes.Repeat([]byte{0xab}, 100<<10)},
	}
	for i := range specials {
		specials[i].Timestamp = ts
		specials[i].Headers = append([]client.Header{{Key: "id", Value: fmt.Append(nil, i)}}, specials[i].Headers...)
	}
	produce(t, c, "v2rt", specials...)

	// Bulk: 100 keys and keyless records, through the Producer and then
	// through Client.Produce, sequence numbers continuing per key.
	const keys, perKey = 100, 150
	p := client.NewProducer(c, client.ProducerOptions{Linger: time.Millisecond, MaxBatchRecords: 500})
	var failed atomic.Int64
	want := map[string]int{}
	keyless := 0
	for i := range keys * perKey {
		key := fmt.Appendf(nil, "key-%d", i%keys)
		r := client.Record{Key: key, Value: seqValue(want[string(key)], 40)}
		want[string(key)]++
		if i%10 == 0 {
			r = client.Record{Value: seqValue(keyless, 40)}
			keyless++
			want[string(key)]--
		}
		buf := slices.Clone(r.Value)
		p.Produce(t.Context(), "v2rt", client.Record{Key: r.Key, Value: buf}, func(_ client.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
		clear(buf) // Produce copied it: reusing the buffer changes nothing
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d records failed", n)
	}
	for range 10 {
		batch := make([]client.Record, 0, keys)
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			batch = append(batch, client.Record{Key: []byte(key), Value: seqValue(want[key], 40)})
			want[key]++
		}
		produce(t, c, "v2rt", batch...)
	}
	want[keylessKey] = keyless

	recs, _ := fetchAllV2(t, c, "v2rt", "", 16<<10)
	ranges := activeRangeIDs(t, c, "v2rt")
	var bulk []client.Record
	found := map[string]client.Record{}
	for _, r := range recs {
		if !ranges[r.Range] {
			t.Fatalf("record read from range %d, not a range of the topic (%v)", r.Range, ranges)
		}
		if len(r.Headers) > 0 && r.Headers[0].Key == "id" {
			if _, dup := found[string(r.Headers[0].Value)]; dup {
				t.Fatalf("special record %s read twice", r.Headers[0].Value)
			}
			found[string(r.Headers[0].Value)] = r
			continue
		}
		bulk = append(bulk, r)
	}
	for i, w := range specials {
		got, ok := found[fmt.Sprint(i)]
		if !ok {
			t.Fatalf("special record %d lost", i)
		}
		if w.Value == nil {
			w.Value = []byte{} // read back as empty, as with wire v1
		}
		if err := sameRecord(got, w); err != nil {
			t.Errorf("special record %d: %v", i, err)
		}
	}
	checkPerKeyOrder(t, bulk, want)
}

// TestV2SplitRacingProducer splits ranges while a Producer writes with
// routes fetched before the splits: the node re-routes the stale batches,
// nothing is lost, duplicated or reordered per key, and the client's
// routes catch up.
func TestV2SplitRacingProducer(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "race", client.WithRanges(2))
	const keys = 200
	p := client.NewProducer(c, client.ProducerOptions{Linger: time.Millisecond, MaxBatchRecords: 200})
	var (
		mu       sync.Mutex
		failures []error
		produced atomic.Int64
		stop     = make(chan struct{})
		done     = make(chan map[string]int)
	)
	go func() {
		want := map[string]int{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- want
				return
			default:
			}
			key := fmt.Sprintf("key-%d", i%keys)
			p.Produce(t.Context(), "race", client.Record{Key: []byte(key), Value: seqValue(want[key], 64)}, func(_ client.Record, err error) {
				produced.Add(1)
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			})
			want[key]++
		}
	}()
	waitFor := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for produced.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d records acknowledged, waiting for %d", produced.Load(), n)
			}
			<-time.After(time.Millisecond) // poll the acknowledged count
		}
	}
	waitFor(2000)
	if got := client.CachedRanges(c, "race"); got != 2 {
		t.Fatalf("client routes hold %d ranges before the splits, want 2", got)
	}
	for range 2 {
		if _, err := c.SplitRange(t.Context(), "race", 0); err != nil {
			t.Fatal(err)
		}
		waitFor(produced.Load() + 2000)
	}
	close(stop)
	want := <-done
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(failures) > 0 {
		t.Fatalf("%d records failed, first: %v", len(failures), failures[0])
	}
	// The node answered rerouted > 0 for the stale batches, which made
	// the client fetch the routes again (in the background).
	deadline := time.Now().Add(10 * time.Second)
	for client.CachedRanges(c, "race") != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("client routes hold %d ranges after two splits, want 4", client.CachedRanges(c, "race"))
		}
		<-time.After(10 * time.Millisecond) // poll: the refresh runs in the background
	}
	recs, _ := fetchAllV2(t, c, "race", "", 0)
	checkPerKeyOrder(t, recs, want)
	v1, _ := fetchN(t, c, "race", "", len(recs)) // Max > 0: wire v1
	checkPerKeyOrder(t, v1, want)
}

// TestV2Compression produces zstd, s2 and lz4 batches: they are stored
// compressed (the topic takes far fewer bytes than the same records
// uncompressed) and read back intact with wire v2 and with wire v1.
func TestV2Compression(t *testing.T) {
	n, c := start(t)
	v1 := n.Client(t, "admin", "admin123", client.WithWireVersion(1))
	const total = 3000
	bytesOf := map[client.Codec]uint64{}
	for _, codec := range []client.Codec{client.CompressionNone, client.CompressionZstd, client.CompressionS2, client.CompressionLZ4} {
		topic := "compress-" + codec.String()
		createTopic(t, c, topic, client.WithRanges(2))
		p := client.NewProducer(c, client.ProducerOptions{Compression: codec, Linger: 5 * time.Millisecond})
		var failed atomic.Int64
		want := map[string]int{}
		for i := range total {
			key := fmt.Sprintf("key-%d", i%7)
			p.Produce(t.Context(), topic, client.Record{Key: []byte(key), Value: seqValue(want[key], 128)}, func(_ client.Record, err error) {
				if err != nil {
					failed.Add(1)
				}
			})
			want[key]++
		}
		if err := p.Close(t.Context()); err != nil || failed.Load() > 0 {
			t.Fatalf("%v: close %v, %d failed", codec, err, failed.Load())
		}
		recs, _ := fetchAllV2(t, c, topic, "", 0)
		checkPerKeyOrder(t, recs, want)
		old, _ := fetchN(t, v1, topic, "", total)
		checkPerKeyOrder(t, old, want)
		topics, err := c.ListTopics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range topics {
			if s.Name == topic {
				bytesOf[codec] = s.Bytes
			}
		}
	}
	for _, codec := range []client.Codec{client.CompressionZstd, client.CompressionS2, client.CompressionLZ4} {
		if bytesOf[codec] == 0 || bytesOf[codec]*3 > bytesOf[client.CompressionNone] {
			t.Errorf("%v: topic holds %d bytes, uncompressed %d: not stored compressed", codec, bytesOf[codec], bytesOf[client.CompressionNone])
		}
	}
}

// TestV2MissingTopic: fetch_batches of a topic that does not exist fails
// with ErrNoSuchTopic (wire v1 answers an empty page), and so do the
// produces, sync and through a Producer.
func TestV2MissingTopic(t *testing.T) {
	_, c := start(t)
	if _, err := c.Fetch(t.Context(), "nothing-here", client.FetchOptions{}); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("v2 fetch of a missing topic: %v, want ErrNoSuchTopic", err)
	}
	if _, err := c.Produce(t.Context(), "nothing-here", client.Record{Value: []byte("v")}); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("produce to a missing topic: %v, want ErrNoSuchTopic", err)
	}
	p := client.NewProducer(c, client.ProducerOptions{})
	var errs []error
	for range 3 {
		p.Produce(t.Context(), "nothing-here", client.Record{Value: []byte("v")}, func(_ client.Record, err error) { errs = append(errs, err) })
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 3 || !errors.Is(errs[0], client.ErrNoSuchTopic) || !errors.Is(errs[2], client.ErrNoSuchTopic) {
		t.Fatalf("producer to a missing topic: promises got %v", errs)
	}
	// Once the topic exists, the same client produces to it.
	createTopic(t, c, "nothing-here")
	produce(t, c, "nothing-here", client.Record{Value: []byte("v")})
}

// TestWireMixing: records a wire v1 client produced are read by a wire v2
// client and the other way round, through both the Producer and
// Client.Produce, all in one topic.
func TestWireMixing(t *testing.T) {
	n, v2 := start(t)
	v1 := n.Client(t, "admin", "admin123", client.WithWireVersion(1))
	if v1.WireVersion() != 1 || v2.WireVersion() != 2 {
		t.Fatalf("wire versions %d and %d, want 1 and 2", v1.WireVersion(), v2.WireVersion())
	}
	createTopic(t, v2, "mixed", client.WithRanges(4))
	want := map[string]int{}
	var failed atomic.Int64
	promise := func(_ client.Record, err error) {
		if err != nil {
			failed.Add(1)
		}
	}
	// Rounds alternate the producing client; a key's sequence continues
	// across them, so reading checks the order across versions too.
	for round := range 4 {
		c := []*client.Client{v1, v2}[round%2]
		p := client.NewProducer(c, client.ProducerOptions{Compression: client.CompressionS2})
		for i := range 2000 {
			key := fmt.Sprintf("key-%d", i%50)
			p.Produce(t.Context(), "mixed", client.Record{Key: []byte(key), Value: seqValue(want[key], 32)}, promise)
			want[key]++
		}
		if err := p.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		batch := make([]client.Record, 0, 50)
		for k := range 50 {
			key := fmt.Sprintf("key-%d", k)
			batch = append(batch, client.Record{Key: []byte(key), Value: seqValue(want[key], 32)})
			want[key]++
		}
		produce(t, c, "mixed", batch...)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d records failed", failed.Load())
	}
	total := 0
	for _, n := range want {
		total += n
	}
	fromV2, _ := fetchAllV2(t, v2, "mixed", "", 64<<10)
	checkPerKeyOrder(t, fromV2, want)
	fromV1, _ := fetchN(t, v1, "mixed", "", total)
	checkPerKeyOrder(t, fromV1, want)
	for _, r := range fromV1 {
		if r.Range != 0 {
			t.Fatalf("wire v1 read marked a record with range %d", r.Range)
		}
	}
}

// TestV2GroupResume: a cursor from a v2 page commits and resumes like a
// v1 one, a v2 group read continues from a v1 commit, and small MaxBytes
// pages still make progress (a page holds at least one whole batch).
func TestV2GroupResume(t *testing.T) {
	n, c := start(t)
	v1 := n.Client(t, "admin", "admin123", client.WithWireVersion(1))
	createTopic(t, c, "resume", client.WithRanges(2))
	want := map[string]int{}
	for range 20 {
		batch := make([]client.Record, 0, 10)
		for k := range 10 {
			key := fmt.Sprintf("key-%d", k)
			batch = append(batch, client.Record{Key: []byte(key), Value: seqValue(want[key], 64)})
			want[key]++
		}
		produce(t, c, "resume", batch...)
	}
	var got []client.Record
	// A v2 group read of one small page, committed.
	page, err := c.Fetch(t.Context(), "resume", client.FetchOptions{Group: "g", MaxBytes: 1})
	if err != nil || len(page.Records) == 0 || len(page.Records) >= 200 {
		t.Fatalf("first v2 page: %d records, %v", len(page.Records), err)
	}
	got = append(got, page.Records...)
	if err := c.Commit(t.Context(), "resume", client.CommitOptions{Group: "g", Cursor: page.Cursor}); err != nil {
		t.Fatal(err)
	}
	// A v1 group read continues from it, and commits.
	page, err = v1.Fetch(t.Context(), "resume", client.FetchOptions{Group: "g", Max: 5})
	if err != nil || len(page.Records) != 5 {
		t.Fatalf("v1 page after the v2 commit: %d records, %v", len(page.Records), err)
	}
	got = append(got, page.Records...)
	if err := v1.Commit(t.Context(), "resume", client.CommitOptions{Group: "g", Cursor: page.Cursor}); err != nil {
		t.Fatal(err)
	}
	// And v2 reads the rest from the group's position.
	for {
		page, err = c.Fetch(t.Context(), "resume", client.FetchOptions{Group: "g", MaxBytes: 512})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) == 0 {
			break
		}
		got = append(got, page.Records...)
		if err := c.Commit(t.Context(), "resume", client.CommitOptions{Group: "g", Cursor: page.Cursor}); err != nil {
			t.Fatal(err)
		}
	}
	checkPerKeyOrder(t, got, want)
}
