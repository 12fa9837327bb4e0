package client_test

// End-to-end tests: a real broker and server in process (clienttest),
// reached over TCP. They test the client and the broker together.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

func start(t *testing.T, opts ...clienttest.Option) (*clienttest.Node, *client.Client) {
	t.Helper()
	n := clienttest.Start(t, opts...)
	// A hung request should fail its test well within the suite's budget.
	return n, n.Client(t, "admin", "admin123", client.WithRequestTimeout(10*time.Second))
}

func createTopic(t *testing.T, c *client.Client, name string, opts ...client.TopicOption) {
	t.Helper()
	if err := c.CreateTopic(t.Context(), name, opts...); err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
}

func produce(t *testing.T, c *client.Client, topic string, recs ...client.Record) {
	t.Helper()
	n, err := c.Produce(t.Context(), topic, recs...)
	if err != nil || n != len(recs) {
		t.Fatalf("produce %d records to %s: accepted %d, %v", len(recs), topic, n, err)
	}
}

// fetchN reads exactly n records from cursor on, page by page, and returns
// them with the cursor after them. Produced records are durable before
// Produce returns, so an empty page before n is a failure.
func fetchN(t *testing.T, c *client.Client, topic, cursor string, n int) ([]client.Record, string) {
	t.Helper()
	var out []client.Record
	for len(out) < n {
		page, err := c.Fetch(t.Context(), topic, client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			t.Fatalf("fetch after %d records: %v", len(out), err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("fetch: empty page after %d of %d records", len(out), n)
		}
		out = append(out, page.Records...)
		cursor = page.Cursor
	}
	if len(out) != n {
		t.Fatalf("fetched %d records, want %d", len(out), n)
	}
	return out, cursor
}

func value(i int) []byte { return fmt.Appendf(nil, "v%06d", i) }

func TestProduceFetchRoundTrip(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "rt")
	ts := time.UnixMilli(1_700_000_000_001)
	recs := []client.Record{
		{Key: nil, Value: []byte("no key"), Timestamp: ts},
		{Key: []byte{}, Value: []byte("empty key"), Timestamp: ts},
		{Key: []byte("k"), Value: []byte{}, Timestamp: ts},
		{Key: []byte("k"), Value: []byte("headers"), Timestamp: ts, Headers: []client.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "nil", Value: nil},
			{Key: "empty", Value: []byte{}},
			{Key: "trace", Value: []byte("repeated keys are kept")},
		}},
		{Key: []byte{0, 0xff, '\n'}, Value: bytes.Repeat([]byte{0xab}, 100<<10), Timestamp: ts},
	}
	produce(t, c, "rt", recs...)
	got, cursor := fetchN(t, c, "rt", "", len(recs))
	for i := range recs { // one range: the whole topic is in produce order
		if err := sameRecord(got[i], recs[i]); err != nil {
			t.Errorf("record %d: %v", i, err)
		}
	}
	page, err := c.Fetch(t.Context(), "rt", client.FetchOptions{Cursor: cursor})
	if err != nil || len(page.Records) != 0 || page.Cursor == "" {
		t.Fatalf("fetch at the end: %d records, cursor %q, %v", len(page.Records), page.Cursor, err)
	}
}

// sameRecord compares records, telling nil from empty byte slices.
func sameRecord(got, want client.Record) error {
	if (got.Key == nil) != (want.Key == nil) || !bytes.Equal(got.Key, want.Key) {
		return fmt.Errorf("key %q (nil %v), want %q (nil %v)", got.Key, got.Key == nil, want.Key, want.Key == nil)
	}
	if !bytes.Equal(got.Value, want.Value) || got.Value == nil {
		return fmt.Errorf("value of %d bytes (nil %v), want %d bytes", len(got.Value), got.Value == nil, len(want.Value))
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		return fmt.Errorf("timestamp %v, want %v", got.Timestamp, want.Timestamp)
	}
	if len(got.Headers) != len(want.Headers) {
		return fmt.Errorf("%d headers, want %d", len(got.Headers), len(want.Headers))
	}
	for i, h := range want.Headers {
		g := got.Headers[i]
		if g.Key != h.Key || (g.Value == nil) != (h.Value == nil) || !bytes.Equal(g.Value, h.Value) {
			return fmt.Errorf("header %d = %q:%q (nil %v), want %q:%q (nil %v)",
				i, g.Key, g.Value, g.Value == nil, h.Key, h.Value, h.Value == nil)
		}
	}
	return nil
}

// TestProducerPerKeyOrder produces 100k records over 1000 keys through
// the async producer into a topic of four ranges, then reads everything
// back: every record exactly once, each key's records in produce order,
// and every range used.
func TestProducerPerKeyOrder(t *testing.T) {
	const (
		total = 100_000
		keys  = 1000
	)
	_, c := start(t)
	createTopic(t, c, "ordered", client.WithRanges(4))
	p := client.NewProducer(c, client.ProducerOptions{})
	var (
		mu     sync.Mutex
		failed []error
	)
	for i := range total {
		key := fmt.Appendf(nil, "key-%d", i%keys)
		val := binary.BigEndian.AppendUint64(nil, uint64(i/keys)) // sequence within the key
		p.Produce(t.Context(), "ordered", client.Record{Key: key, Value: val}, func(_ client.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		})
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d records failed, first: %v", len(failed), failed[0])
	}

	recs, _ := fetchN(t, c, "ordered", "", total)
	next := make(map[string]uint64, keys)
	for _, r := range recs {
		seq := binary.BigEndian.Uint64(r.Value)
		if want := next[string(r.Key)]; seq != want {
			t.Fatalf("key %s: got sequence %d, want %d", r.Key, seq, want)
		}
		next[string(r.Key)]++
	}
	if len(next) != keys {
		t.Fatalf("read %d keys, want %d", len(next), keys)
	}
	page, err := c.Fetch(t.Context(), "ordered", client.FetchOptions{Cursor: "", Max: 1})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("refetch from the start: %v", err)
	}

	d, err := c.DescribeTopic(t.Context(), "ordered")
	if err != nil {
		t.Fatal(err)
	}
	active := d.ActiveRanges()
	if len(active) != 4 {
		t.Fatalf("%d active ranges, want 4", len(active))
	}
	var sum uint64
	for _, r := range active {
		if r.Records() == 0 {
			t.Errorf("range %d [%d, %d) holds no records", r.ID, r.Start, r.End)
		}
		sum += r.Records()
	}
	if sum != total {
		t.Errorf("ranges hold %d records, want %d", sum, total)
	}
}

// TestKeylessRecordsSpread: records without a key may go to any range,
// and the broker spreads them.
func TestKeylessRecordsSpread(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "keyless", client.WithRanges(4))
	for i := range 20 {
		produce(t, c, "keyless", client.Record{Value: value(2 * i)}, client.Record{Value: value(2*i + 1)})
	}
	d, err := c.DescribeTopic(t.Context(), "keyless")
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	var sum uint64
	for _, r := range d.ActiveRanges() {
		if r.Records() > 0 {
			used++
		}
		sum += r.Records()
	}
	if used < 2 || sum != 40 {
		t.Fatalf("40 keyless records landed in %d ranges (%d counted), want more than one", used, sum)
	}
	recs, _ := fetchN(t, c, "keyless", "", 40)
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Key != nil {
			t.Fatalf("keyless record read back with key %q", r.Key)
		}
		seen[string(r.Value)] = true
	}
	if len(seen) != 40 {
		t.Fatalf("read %d distinct records, want 40", len(seen))
	}
}

// TestLongPollWakesOnProduce parks a fetch for 10 s, then produces: the
// fetch must return the record at once, not after its wait.
func TestLongPollWakesOnProduce(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "poll")
	empty, err := c.Fetch(t.Context(), "poll", client.FetchOptions{})
	if err != nil || len(empty.Records) != 0 {
		t.Fatalf("fetch of an empty topic: %+v, %v", empty, err)
	}

	type result struct {
		page client.Page
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		begin := time.Now()
		page, err := c.Fetch(t.Context(), "poll", client.FetchOptions{Cursor: empty.Cursor, Wait: 10 * time.Second})
		done <- result{page, err, time.Since(begin)}
	}()
	produce(t, c, "poll", client.Record{Key: []byte("k"), Value: []byte("wake up")})
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.page.Records) != 1 || string(r.page.Records[0].Value) != "wake up" {
		t.Fatalf("long poll returned %d records", len(r.page.Records))
	}
	if r.took > 5*time.Second {
		t.Fatalf("long poll took %v to see a record produced while it waited", r.took)
	}
}

// TestLongPollTimesOutEmpty: with nothing to read, a long poll waits its
// full wait and answers an empty page whose cursor is usable.
func TestLongPollTimesOutEmpty(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "quiet")
	produce(t, c, "quiet", client.Record{Value: []byte("old")})
	_, cursor := fetchN(t, c, "quiet", "", 1)

	const wait = 200 * time.Millisecond
	begin := time.Now()
	page, err := c.Fetch(t.Context(), "quiet", client.FetchOptions{Cursor: cursor, Wait: wait})
	took := time.Since(begin)
	if err != nil || len(page.Records) != 0 || page.Cursor == "" {
		t.Fatalf("timed-out poll: %d records, cursor %q, %v", len(page.Records), page.Cursor, err)
	}
	if took < wait*3/4 {
		t.Fatalf("poll answered after %v, before its %v wait", took, wait)
	}
	produce(t, c, "quiet", client.Record{Value: []byte("new")})
	got, _ := fetchN(t, c, "quiet", page.Cursor, 1)
	if string(got[0].Value) != "new" {
		t.Fatalf("cursor of the empty page resumed at %q, want the new record", got[0].Value)
	}
}

// TestSubscribeWindow: with window 10, the broker pushes exactly 10
// records and then nothing until an ack returns credit; rounds of ack and
// receive walk through all 100 records in order. A group subscription
// resumes after the last acked cursor.
func TestSubscribeWindow(t *testing.T) {
	const window, total = 10, 100
	_, c := start(t)
	createTopic(t, c, "stream")
	for i := range total / 10 {
		batch := make([]client.Record, 10)
		for j := range batch {
			batch[j] = client.Record{Key: []byte("k"), Value: value(10*i + j)}
		}
		produce(t, c, "stream", batch...)
	}

	sub, err := c.Subscribe(t.Context(), "stream", client.SubscribeOptions{Group: "g", Window: window, PageMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for round := range total / window {
		var cursor string
		for got := 0; got < window; {
			page, err := sub.Next(t.Context())
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			for _, r := range page.Records {
				if !bytes.Equal(r.Value, value(next)) {
					t.Fatalf("round %d: got %s, want %s", round, r.Value, value(next))
				}
				next++
			}
			got += len(page.Records)
			if got > window {
				t.Fatalf("round %d: %d records unacked, window is %d", round, got, window)
			}
			cursor = page.Cursor
		}
		// Nothing more may be pushed until the ack.
		if queued, err := sub.Sync(t.Context()); err != nil || queued != 0 {
			t.Fatalf("round %d: %d pages pushed beyond the window (%v)", round, queued, err)
		}
		if err := sub.Ack(t.Context(), cursor, window); err != nil {
			t.Fatal(err)
		}
	}
	// The last ack returned credit: a new record is pushed, which also
	// shows the broker applied that ack (it commits before pushing).
	produce(t, c, "stream", client.Record{Key: []byte("k"), Value: value(total)})
	page, err := sub.Next(t.Context())
	if err != nil || len(page.Records) != 1 || !bytes.Equal(page.Records[0].Value, value(total)) {
		t.Fatalf("push after the last ack: %+v, %v", page, err)
	}
	sub.Close()

	// Resume: the group committed up to record 99, not the unacked 100.
	sub, err = c.Subscribe(t.Context(), "stream", client.SubscribeOptions{Group: "g", Window: window, PageMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	page, err = sub.Next(t.Context())
	if err != nil || len(page.Records) == 0 || !bytes.Equal(page.Records[0].Value, value(total)) {
		t.Fatalf("resumed subscription starts with %+v, %v; want record %d", page.Records, err, total)
	}
}

// TestGroupCommitSurvivesRestart: a committed group position is durable
// across a broker restart, and so are the records.
func TestGroupCommitSurvivesRestart(t *testing.T) {
	n, c := start(t)
	createTopic(t, c, "durable", client.WithRanges(2))
	for i := range 10 {
		produce(t, c, "durable", client.Record{Key: []byte("k"), Value: value(i)})
	}
	page, err := c.Fetch(t.Context(), "durable", client.FetchOptions{Group: "g", Max: 4})
	if err != nil || len(page.Records) != 4 {
		t.Fatalf("first fetch: %d records, %v", len(page.Records), err)
	}
	if err := c.Commit(t.Context(), "durable", client.CommitOptions{Group: "g", Cursor: page.Cursor}); err != nil {
		t.Fatal(err)
	}

	before := n.Addr()
	n.Restart(t)
	c2 := n.Client(t, "consumer", "consumer123")
	page, err = c2.Fetch(t.Context(), "durable", client.FetchOptions{Group: "g", Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 6 || !bytes.Equal(page.Records[0].Value, value(4)) || !bytes.Equal(page.Records[5].Value, value(9)) {
		t.Fatalf("after restart the group resumed with %d records", len(page.Records))
	}
	g, err := c2.DescribeGroup(t.Context(), "durable", "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.Cursor == "" || g.Lag != 6 {
		t.Fatalf("group after restart: cursor %q, lag %d, want lag 6", g.Cursor, g.Lag)
	}
	groups, err := c2.ListGroups(t.Context(), "durable")
	if err != nil || !slices.Contains(groups, "g") {
		t.Fatalf("groups %v, %v", groups, err)
	}

	// The client dialled before the restart dials again by itself.
	if n.Addr() != before {
		t.Skipf("restart moved the node from %s to %s; redial not exercised", before, n.Addr())
	}
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("old client after restart: %v", err)
	}
}

// TestDescribeRangesAndSegments: small segments roll, and describe shows
// contiguous segments under ranges that tile the keyspace; a split and a
// merge show up in the lineage and lose no record.
func TestDescribeRangesAndSegments(t *testing.T) {
	_, c := start(t, clienttest.WithSegmentMaxBytes(2<<10))
	createTopic(t, c, "segs", client.WithRanges(2), client.WithKeyspaceBits(8))
	const total = 400
	for i := range total / 20 {
		batch := make([]client.Record, 20)
		for j := range batch {
			k := 20*i + j
			batch[j] = client.Record{Key: fmt.Appendf(nil, "key-%d", k%37), Value: bytes.Repeat(value(k), 10)}
		}
		produce(t, c, "segs", batch...)
	}
	d, err := c.DescribeTopic(t.Context(), "segs")
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "segs" || d.KeyspaceBits != 8 || d.CreatedAt.IsZero() {
		t.Fatalf("describe: %+v", d)
	}
	checkTiling(t, d, 8)
	var sum uint64
	rolled := false
	for _, r := range d.ActiveRanges() {
		sum += r.Records()
		for i, s := range r.Segments {
			if i > 0 && s.Base != r.Segments[i-1].End {
				t.Errorf("range %d: segment %d starts at %d, previous ended at %d", r.ID, s.ID, s.Base, r.Segments[i-1].End)
			}
			// Only the last segment may be active (after a roll the next
			// one opens with the next produce).
			if last := i == len(r.Segments)-1; (s.Active && !last) || (!s.Active && s.SealedAt.IsZero()) || s.OpenedAt.IsZero() {
				t.Errorf("range %d segment %d: active %v sealed at %v (last %v)", r.ID, s.ID, s.Active, s.SealedAt, last)
			}
			if len(s.Replicas) == 0 {
				t.Errorf("segment %d has no replicas", s.ID)
			}
		}
		rolled = rolled || len(r.Segments) > 1
	}
	if sum != total || !rolled {
		t.Fatalf("ranges hold %d records (want %d), rolled %v", sum, total, rolled)
	}
	topics, err := c.ListTopics(t.Context())
	if err != nil || len(topics) != 1 || topics[0].Records != total || topics[0].ActiveRanges != 2 {
		t.Fatalf("list topics: %+v, %v", topics, err)
	}

	// Split the first range, then merge its children back.
	parent := d.ActiveRanges()[0]
	children, err := c.SplitRange(t.Context(), "segs", parent.ID)
	if err != nil || len(children) != 2 {
		t.Fatalf("split: %v, %v", children, err)
	}
	d, err = c.DescribeTopic(t.Context(), "segs")
	if err != nil {
		t.Fatal(err)
	}
	checkTiling(t, d, 8)
	for _, r := range d.Ranges {
		switch {
		case r.ID == parent.ID && (r.Active || r.SealedAt.IsZero()):
			t.Errorf("split parent %d still active", r.ID)
		case slices.Contains(children, r.ID) && !slices.Equal(r.Parents, []uint64{parent.ID}):
			t.Errorf("child %d has parents %v, want [%d]", r.ID, r.Parents, parent.ID)
		}
	}
	merged, err := c.MergeRanges(t.Context(), "segs", children[0], children[1])
	if err != nil {
		t.Fatal(err)
	}
	d, err = c.DescribeTopic(t.Context(), "segs")
	if err != nil {
		t.Fatal(err)
	}
	checkTiling(t, d, 8)
	if r := d.ActiveRanges(); len(r) != 2 || !slices.ContainsFunc(r, func(r client.RangeInfo) bool { return r.ID == merged }) {
		t.Fatalf("after merge: active ranges %+v", r)
	}
	if _, err := c.MergeRanges(t.Context(), "segs", children[0], children[1]); !errors.Is(err, client.ErrNotBuddies) && !errors.Is(err, client.ErrSealed) && !errors.Is(err, client.ErrNoSuchRange) {
		t.Errorf("merging sealed ranges: got %v", err)
	}

	recs, _ := fetchN(t, c, "segs", "", total)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Value)] = true
	}
	if len(seen) != total {
		t.Fatalf("after split and merge: %d distinct records, want %d", len(seen), total)
	}
}

// checkTiling asserts the active ranges cover the keyspace exactly.
func checkTiling(t *testing.T, d client.TopicDescription, bits uint8) {
	t.Helper()
	active := d.ActiveRanges()
	slices.SortFunc(active, func(a, b client.RangeInfo) int { return int(a.Start) - int(b.Start) })
	var at uint64
	for _, r := range active {
		if r.Start != at || r.End <= r.Start {
			t.Fatalf("active ranges do not tile the keyspace: %+v", active)
		}
		at = r.End
	}
	if at != 1<<bits {
		t.Fatalf("active ranges end at %d, want %d", at, 1<<bits)
	}
}

func TestTypedErrors(t *testing.T) {
	n, admin := start(t)
	createTopic(t, admin, "typed")
	produce(t, admin, "typed", client.Record{Value: []byte("x")})
	page, err := admin.Fetch(t.Context(), "typed", client.FetchOptions{})
	if err != nil || page.Cursor == "" {
		t.Fatal(err)
	}
	forged := []byte(page.Cursor)
	forged[len(forged)/2] ^= 1
	consumer := n.Client(t, "consumer", "consumer123")
	producer := n.Client(t, "producer", "producer123")
	ctx := t.Context()

	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"produce to a missing topic", func() error {
			_, err := admin.Produce(ctx, "missing", client.Record{Value: []byte("x")})
			return err
		}, client.ErrNoSuchTopic},
		{"describe a missing topic", func() error {
			_, err := admin.DescribeTopic(ctx, "missing")
			return err
		}, client.ErrNoSuchTopic},
		{"subscribe to a missing topic", func() error {
			_, err := admin.Subscribe(ctx, "missing", client.SubscribeOptions{})
			return err
		}, client.ErrNoSuchTopic},
		{"forged cursor", func() error {
			_, err := admin.Fetch(ctx, "typed", client.FetchOptions{Cursor: string(forged)})
			return err
		}, client.ErrInvalidCursor},
		{"garbage cursor", func() error {
			_, err := admin.Fetch(ctx, "typed", client.FetchOptions{Cursor: "not-a-cursor"})
			return err
		}, client.ErrInvalidCursor},
		{"commit a forged cursor", func() error {
			return admin.Commit(ctx, "typed", client.CommitOptions{Group: "g", Cursor: string(forged)})
		}, client.ErrInvalidCursor},
		{"consumer produces", func() error {
			_, err := consumer.Produce(ctx, "typed", client.Record{Value: []byte("x")})
			return err
		}, client.ErrPermissionDenied},
		{"producer fetches", func() error {
			_, err := producer.Fetch(ctx, "typed", client.FetchOptions{})
			return err
		}, client.ErrPermissionDenied},
		{"producer subscribes", func() error {
			_, err := producer.Subscribe(ctx, "typed", client.SubscribeOptions{Group: "g"})
			return err
		}, client.ErrPermissionDenied},
		{"consumer creates a user", func() error {
			return consumer.CreateUser(ctx, "mallory", client.UserOptions{Password: "secret123", Perms: []string{client.PermAdmin}})
		}, client.ErrPermissionDenied},
		{"topic exists", func() error { return admin.CreateTopic(ctx, "typed") }, client.ErrAlreadyExists},
		{"bad topic name", func() error { return admin.CreateTopic(ctx, "a/b") }, client.ErrInvalidTopicName},
		{"bad range count", func() error { return admin.CreateTopic(ctx, "r3", client.WithRanges(3)) }, client.ErrInvalidRangeCount},
		{"wrong password", func() error {
			_, err := client.Dial(ctx, n.Addr(), client.WithCredentials("admin", "wrong"))
			return err
		}, client.ErrInvalidCredentials},
		{"unknown user", func() error {
			_, err := client.Dial(ctx, n.Addr(), client.WithCredentials("nobody", "admin123"))
			return err
		}, client.ErrInvalidCredentials},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var e *client.Error
			if !errors.As(err, &e) || e.Retriable {
				t.Fatalf("%v: not a non-retriable *client.Error", err)
			}
		})
	}
	// A refused request changes nothing and leaves the connection usable.
	if got, _ := fetchN(t, admin, "typed", "", 1); string(got[0].Value) != "x" {
		t.Fatal("topic changed by refused requests")
	}
}

func TestUsersAndACLs(t *testing.T) {
	n, admin := start(t)
	ctx := t.Context()
	if err := admin.CreateUser(ctx, "dana", client.UserOptions{Password: "first-pass", Perms: []string{client.PermConsume}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateUser(ctx, "dana", client.UserOptions{Password: "x", Perms: []string{client.PermConsume}}); !errors.Is(err, client.ErrUserExists) {
		t.Fatalf("duplicate user: %v", err)
	}
	users, err := admin.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(users, func(u client.User) bool { return u.Name == "dana" })
	if i < 0 || !slices.Equal(users[i].Perms, []string{client.PermConsume}) {
		t.Fatalf("users: %+v", users)
	}
	dana := n.Client(t, "dana", "first-pass")
	if _, err := dana.ListUsers(ctx); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("non-admin lists users: %v", err)
	}

	if err := admin.ChangePassword(ctx, "dana", "second-pass"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, n.Addr(), client.WithCredentials("dana", "first-pass")); !errors.Is(err, client.ErrInvalidCredentials) {
		t.Fatalf("old password after change: %v", err)
	}
	n.Client(t, "dana", "second-pass")

	if err := admin.GrantACL(ctx, "dana", client.ACL{Operation: "consume", Resource: "orders.*"}); err != nil {
		t.Fatal(err)
	}
	acls, err := admin.ListACLs(ctx, "dana")
	if err != nil || !slices.Contains(acls, client.ACL{Operation: "consume", Resource: "orders.*"}) {
		t.Fatalf("acls after grant: %+v, %v", acls, err)
	}
	if err := admin.GrantACL(ctx, "dana", client.ACL{Operation: "fly", Resource: "x"}); !errors.Is(err, client.ErrInvalidOperation) {
		t.Fatalf("grant of a bad operation: %v", err)
	}
	if err := admin.RevokeACL(ctx, "dana", client.ACL{Operation: "consume", Resource: "orders.*"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.RevokeACL(ctx, "dana", client.ACL{Operation: "consume", Resource: "orders.*"}); err != nil {
		t.Fatalf("revoke is idempotent, got %v", err)
	}
	if acls, err := admin.ListACLs(ctx, "dana"); err != nil || len(acls) != 0 {
		t.Fatalf("acls after revoke: %+v, %v", acls, err)
	}

	if err := admin.DeleteUser(ctx, "dana"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Dial(ctx, n.Addr(), client.WithCredentials("dana", "second-pass")); !errors.Is(err, client.ErrInvalidCredentials) {
		t.Fatalf("deleted user dials: %v", err)
	}
}

func TestStatusAndDeleteTopic(t *testing.T) {
	n, c := start(t)
	createTopic(t, c, "gone")
	produce(t, c, "gone", client.Record{Value: []byte("x")}, client.Record{Value: []byte("y")})
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID == "" || st.Version == "" || st.DataDir != n.DataDir() || st.Topics != 1 || st.Records != 2 {
		t.Fatalf("status: %+v", st)
	}
	if err := c.DeleteTopic(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeTopic(t.Context(), "gone"); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("describe after delete: %v", err)
	}
	if topics, err := c.ListTopics(t.Context()); err != nil || len(topics) != 0 {
		t.Fatalf("topics after delete: %+v, %v", topics, err)
	}
}

// TestGroupMembersShareRanges: two members of one group read disjoint
// ranges whose union is the whole topic.
func TestGroupMembersShareRanges(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "shared", client.WithRanges(4))
	const total = 200
	for i := range total / 50 {
		batch := make([]client.Record, 50)
		for j := range batch {
			k := 50*i + j
			batch[j] = client.Record{Key: fmt.Appendf(nil, "key-%d", k), Value: value(k)}
		}
		produce(t, c, "shared", batch...)
	}
	// Join both members before either reads: assignment is eager, so the
	// next polls see the settled split.
	for _, m := range []string{"m1", "m2"} {
		if _, err := c.Fetch(t.Context(), "shared", client.FetchOptions{Group: "g", Member: m, Max: 1}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(m string) []client.Record {
		page, err := c.Fetch(t.Context(), "shared", client.FetchOptions{Group: "g", Member: m, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return page.Records
	}
	seen := map[string]string{}
	for _, m := range []string{"m1", "m2"} {
		for _, r := range read(m) {
			if other, dup := seen[string(r.Value)]; dup {
				t.Fatalf("record %s read by %s and %s", r.Value, other, m)
			}
			seen[string(r.Value)] = m
		}
	}
	if len(seen) != total {
		t.Fatalf("the two members read %d records together, want %d", len(seen), total)
	}
	// Once m2 leaves, m1 reads every range.
	if err := c.LeaveGroup(t.Context(), "shared", "g", "m2"); err != nil {
		t.Fatal(err)
	}
	if got := read("m1"); len(got) != total {
		t.Fatalf("after m2 left, m1 read %d records, want %d", len(got), total)
	}
}

// TestCallsHonourContext: a long poll ends when its context does.
func TestCallsHonourContext(t *testing.T) {
	_, c := start(t)
	createTopic(t, c, "ctx")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, "ctx", client.FetchOptions{Group: "g", Wait: 30 * time.Second})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled long poll: %v", err)
	}
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("client after a cancelled call: %v", err)
	}
}
