package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// keyedBy returns n records over keys k00..k(keys-1), each key's values
// numbered from first on in order.
func keyedBy(n, keys, first int) []client.Record {
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{
			Key:   fmt.Appendf(nil, "k%02d", i%keys),
			Value: fmt.Appendf(nil, "%d", first+i/keys),
		}
	}
	return recs
}

func newConsumer(t *testing.T, c *client.Client, opt client.ConsumerOptions) *client.Consumer {
	t.Helper()
	if opt.MaxWait == 0 {
		opt.MaxWait = 200 * time.Millisecond
	}
	cs, err := client.NewConsumer(c, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs.Close(ctx)
	})
	return cs
}

// pollN polls until n records came, and returns them.
func pollN(t *testing.T, cs *client.Consumer, n int) []client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out []client.Record
	for len(out) < n {
		p, err := cs.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, p.Records...)
	}
	if len(out) != n {
		t.Fatalf("polled %d records, want %d", len(out), n)
	}
	return out
}

// pollNothing polls for a while and fails if a record comes.
func pollNothing(t *testing.T, cs *client.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	p, err := cs.Poll(ctx)
	if err == nil {
		t.Fatalf("polled %d records, want none (first %s=%s)", len(p.Records), p.Records[0].Key, p.Records[0].Value)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("poll: %v, want the deadline", err)
	}
}

func closeConsumer(t *testing.T, cs *client.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := cs.Close(ctx); err != nil {
		t.Fatalf("close %s: %v", cs.Member(), err)
	}
}

// startTopic starts a node, creates topic with opts and produces recs to
// it, and returns the admin's client.
func startTopic(t *testing.T, topic string, recs []client.Record, opts ...client.TopicOption) *client.Client {
	t.Helper()
	_, c := start(t)
	createTopic(t, c, topic, opts...)
	produce(t, c, topic, recs...)
	return c
}

func groupLag(t *testing.T, c *client.Client, topic, group string) uint64 {
	t.Helper()
	g, err := c.DescribeGroup(t.Context(), topic, group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	return g.Lag
}

func TestConsumerOptionsChecked(t *testing.T) {
	_, c := start(t)
	for _, opt := range []client.ConsumerOptions{
		{Group: "g"},
		{Topic: "t"},
		{Topic: "t", Group: string(make([]byte, 256))},
		{Topic: "t", Group: "g", Member: string(make([]byte, 256))},
	} {
		if _, err := client.NewConsumer(c, opt); err == nil {
			t.Errorf("NewConsumer accepted %+v", opt)
		}
	}
	cs, err := client.NewConsumer(c, client.ConsumerOptions{Topic: "t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.NewConsumer(c, client.ConsumerOptions{Topic: "t", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Member() == "" || cs.Member() == other.Member() {
		t.Fatalf("default member names %q and %q", cs.Member(), other.Member())
	}
}

// TestConsumerPollCommitsOnClose: without ManualCommit, the last page
// Poll returned is committed by Close; a consumer of the group that comes
// after reads nothing again.
func TestConsumerPollCommitsOnClose(t *testing.T) {
	c := startTopic(t, "orders", keyedBy(100, 10, 0), client.WithRanges(4))
	var assigned, revoked []client.Assignment
	cs := newConsumer(t, c, client.ConsumerOptions{
		Topic: "orders", Group: "billing", MaxRecords: 30,
		OnAssigned: func(a client.Assignment) { assigned = append(assigned, a) },
		OnRevoked:  func(a client.Assignment) { revoked = append(revoked, a) },
	})
	if n, err := cs.Lag(t.Context()); err != nil || n != 100 {
		t.Fatalf("lag before reading: %d, %v", n, err)
	}
	pollN(t, cs, 100)
	if len(assigned) == 0 || assigned[0].Slices != 4 || assigned[0].Members != 1 || assigned[0].Generation == 0 {
		t.Fatalf("assignments told: %+v; want the 4 slices of a sole member", assigned)
	}
	if got := cs.Assignment(); got != assigned[len(assigned)-1] {
		t.Fatalf("Assignment() = %+v, last told %+v", got, assigned[len(assigned)-1])
	}
	closeConsumer(t, cs)
	if len(revoked) != 1 || revoked[0].Slices != 4 {
		t.Fatalf("revocations told at close: %+v", revoked)
	}
	if n := groupLag(t, c, "orders", "billing"); n != 0 {
		t.Fatalf("lag %d after close", n)
	}
	if _, err := cs.Poll(t.Context()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("poll after close: %v", err)
	}
	if err := cs.Close(t.Context()); err != nil {
		t.Fatalf("second close: %v", err)
	}
	g, err := c.DescribeGroupMembers(t.Context(), "orders", "billing")
	if err != nil || len(g.Members) != 0 {
		t.Fatalf("members after close: %+v, %v", g, err)
	}
	next := newConsumer(t, c, client.ConsumerOptions{Topic: "orders", Group: "billing"})
	pollNothing(t, next, 500*time.Millisecond)
}

// TestConsumerCloseNeverLosesCommit: Poll then Close, and Commit then
// Close, twenty times each, a new group every time; the position is
// always there after Close returns.
func TestConsumerCloseNeverLosesCommit(t *testing.T) {
	c := startTopic(t, "acks", keyedBy(10, 5, 0), client.WithRanges(2))
	for round := range 20 {
		for _, manual := range []bool{false, true} {
			group := fmt.Sprintf("g%d-%v", round, manual)
			cs := newConsumer(t, c, client.ConsumerOptions{Topic: "acks", Group: group, ManualCommit: manual})
			pollN(t, cs, 10)
			if manual {
				if err := cs.Commit(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			closeConsumer(t, cs)
			if n := groupLag(t, c, "acks", group); n != 0 {
				t.Errorf("round %d (manual %v): lag %d after close", round, manual, n)
			}
		}
	}
}

// TestConsumerManualCommit: a page not marked is given again; a marked
// one is committed by the next Poll.
func TestConsumerManualCommit(t *testing.T) {
	c := startTopic(t, "jobs", keyedBy(6, 1, 0))
	cs := newConsumer(t, c, client.ConsumerOptions{Topic: "jobs", Group: "g", ManualCommit: true, MaxRecords: 3})
	first := pollN(t, cs, 3)
	again := pollN(t, cs, 3)
	if string(again[0].Value) != string(first[0].Value) {
		t.Fatalf("a page not marked was not given again: %s then %s", first[0].Value, again[0].Value)
	}
	cs.MarkProcessed()
	next := pollN(t, cs, 3)
	if string(next[0].Value) != "3" {
		t.Fatalf("after marking the first page the next starts at %s, want 3", next[0].Value)
	}
	if n := groupLag(t, c, "jobs", "g"); n != 3 {
		t.Fatalf("lag %d after the first page was committed, want 3", n)
	}
	closeConsumer(t, cs) // the last page was not marked: it stays uncommitted
	if n := groupLag(t, c, "jobs", "g"); n != 3 {
		t.Fatalf("lag %d after close without marking, want 3", n)
	}
}

// TestConsumerRecordsStopsOnCancel: the iterator ends without an error
// when its context ends, and what it went through is committed.
func TestConsumerRecordsStopsOnCancel(t *testing.T) {
	c := startTopic(t, "feed", keyedBy(40, 4, 0), client.WithRanges(2))
	cs := newConsumer(t, c, client.ConsumerOptions{Topic: "feed", Group: "g", MaxRecords: 10})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := 0
	var iterErr error
	for _, err := range cs.Records(ctx) {
		if err != nil {
			iterErr = err
			break
		}
		if got++; got == 40 {
			cancel()
		}
	}
	if iterErr != nil || got != 40 {
		t.Fatalf("iterator: %d records, error %v", got, iterErr)
	}
	closeConsumer(t, cs)
	if n := groupLag(t, c, "feed", "g"); n != 0 {
		t.Fatalf("lag %d after the loop went through every record", n)
	}
}

// TestConsumerRecordsBreakKeepsPage: a loop that breaks inside a page
// leaves that page uncommitted, and it is given again.
func TestConsumerRecordsBreakKeepsPage(t *testing.T) {
	c := startTopic(t, "feed", keyedBy(10, 1, 0))
	cs := newConsumer(t, c, client.ConsumerOptions{Topic: "feed", Group: "g", MaxRecords: 5})
	seen := 0
	for r, err := range cs.Records(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		if seen++; seen == 7 {
			if string(r.Value) != "6" {
				t.Fatalf("7th record %s", r.Value)
			}
			break
		}
	}
	closeConsumer(t, cs)
	if n := groupLag(t, c, "feed", "g"); n != 5 {
		t.Fatalf("lag %d, want the 5 records of the page the loop left", n)
	}
}

func TestConsumerStartPositions(t *testing.T) {
	c := startTopic(t, "events", keyedBy(10, 1, 0), client.WithRanges(2))

	end := newConsumer(t, c, client.ConsumerOptions{Topic: "events", Group: "tail", Start: client.StartAtEnd()})
	pollNothing(t, end, 300*time.Millisecond)
	produce(t, c, "events", keyedBy(3, 1, 10)...)
	if got := pollN(t, end, 3); string(got[0].Value) != "10" {
		t.Fatalf("StartAtEnd read %s first, want 10", got[0].Value)
	}

	page, err := c.Fetch(t.Context(), "events", client.FetchOptions{Max: 4})
	if err != nil || len(page.Records) != 4 {
		t.Fatalf("fetch 4: %d records, %v", len(page.Records), err)
	}
	at := newConsumer(t, c, client.ConsumerOptions{Topic: "events", Group: "cursor", Start: client.StartAtCursor(page.Cursor)})
	if got := pollN(t, at, 9); string(got[0].Value) != "4" {
		t.Fatalf("StartAtCursor read %s first, want 4", got[0].Value)
	}

	// A group with a position resumes there, whatever Start says.
	closeConsumer(t, at)
	again := newConsumer(t, c, client.ConsumerOptions{Topic: "events", Group: "cursor", Start: client.StartAtBeginning()})
	pollNothing(t, again, 300*time.Millisecond)

	past := newConsumer(t, c, client.ConsumerOptions{Topic: "events", Group: "time", Start: client.StartAtTime(time.Now().Add(-time.Hour))})
	pollN(t, past, 13)
}

// TestConsumerStaleCommitRefused: a member that stops heartbeating while
// it holds a page is timed out; its slices pass to the other member, and
// its commit of that page is refused.
func TestConsumerStaleCommitRefused(t *testing.T) {
	_, c := start(t, clienttest.WithGroupSessionTimeout(300*time.Millisecond))
	createTopic(t, c, "orders", client.WithRanges(2))
	produce(t, c, "orders", keyedBy(20, 4, 0)...)
	var revoked int
	slow := newConsumer(t, c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "slow", HeartbeatInterval: -1, ManualCommit: true,
		OnRevoked: func(client.Assignment) { revoked++ },
	})
	pollN(t, slow, 20)
	other := newConsumer(t, c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: "other", HeartbeatInterval: 50 * time.Millisecond,
	})
	// The other member gets the records once the node has timed the
	// silent one out.
	pollN(t, other, 20)
	err := slow.Commit(t.Context())
	if !errors.Is(err, client.ErrStaleMember) {
		t.Fatalf("commit of a member timed out: %v, want ErrStaleMember", err)
	}
	if revoked != 1 {
		t.Fatalf("OnRevoked called %d times", revoked)
	}
	closeConsumer(t, other)
	if n := groupLag(t, c, "orders", "g"); n != 0 {
		t.Fatalf("lag %d", n)
	}
}

// TestConsumerHeartbeatsKeepSlices: a member that takes longer than the
// member timeout over a page keeps its slices while it heartbeats; a
// member that joined meanwhile gets them once it polls again. Without
// heartbeats, the same member loses them.
func TestConsumerHeartbeatsKeepSlices(t *testing.T) {
	const timeout = time.Second
	for _, beat := range []bool{true, false} {
		t.Run(fmt.Sprintf("heartbeats=%v", beat), func(t *testing.T) {
			_, c := start(t, clienttest.WithGroupSessionTimeout(timeout))
			createTopic(t, c, "orders", client.WithRanges(2))
			produce(t, c, "orders", keyedBy(20, 4, 0)...)
			interval := 50 * time.Millisecond
			if !beat {
				interval = -1
			}
			busy := newConsumer(t, c, client.ConsumerOptions{
				Topic: "orders", Group: "g", Member: "busy", HeartbeatInterval: interval,
			})
			pollN(t, busy, 20)
			other := newConsumer(t, c, client.ConsumerOptions{Topic: "orders", Group: "g", Member: "other"})
			// busy "processes" its page for three member timeouts, timed
			// by the other member's polls.
			began := time.Now()
			got := 0
			for time.Since(began) < 3*timeout && got == 0 {
				ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				p, err := other.Poll(ctx)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				got += len(p.Records)
			}
			if beat && got != 0 {
				t.Fatalf("the other member read %d records of a page the heartbeating member still held", got)
			}
			if !beat && got == 0 {
				t.Fatal("a member silent for three member timeouts kept its slices")
			}
			if !beat {
				return
			}
			closeConsumer(t, busy) // commits the page and leaves
			pollNothing(t, other, 500*time.Millisecond)
			if n := groupLag(t, c, "orders", "g"); n != 0 {
				t.Fatalf("lag %d", n)
			}
		})
	}
}

// TestConsumerCallbacksOnGoroutineOfCaller: callbacks run inside Poll and
// Close, never concurrently with the application's loop.
func TestConsumerCallbacksOnGoroutineOfCaller(t *testing.T) {
	c := startTopic(t, "orders", keyedBy(5, 1, 0))
	var inCall sync.Mutex
	check := func(client.Assignment) {
		if inCall.TryLock() {
			inCall.Unlock()
			t.Error("callback ran outside a call of the consumer")
		}
	}
	cs := newConsumer(t, c, client.ConsumerOptions{
		Topic: "orders", Group: "g", HeartbeatInterval: 10 * time.Millisecond,
		OnAssigned: check, OnRevoked: check,
	})
	inCall.Lock()
	pollN(t, cs, 5)
	inCall.Unlock()
	inCall.Lock()
	closeConsumer(t, cs)
	inCall.Unlock()
}

// TestConsumerRefusals: what retrying cannot fix ends Poll, and a Records
// loop yields it once.
func TestConsumerRefusals(t *testing.T) {
	n, c := start(t)
	missing := newConsumer(t, c, client.ConsumerOptions{Topic: "missing", Group: "g"})
	if _, err := missing.Poll(t.Context()); !errors.Is(err, client.ErrNoSuchTopic) {
		t.Fatalf("poll of a missing topic: %v", err)
	}
	createTopic(t, c, "secret")
	producer := n.Client(t, "producer", "producer123")
	denied := newConsumer(t, producer, client.ConsumerOptions{Topic: "secret", Group: "g"})
	errs := 0
	for _, err := range denied.Records(t.Context()) {
		if !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("records without the consume permission: %v", err)
		}
		errs++
	}
	if errs != 1 {
		t.Fatalf("the loop yielded %d errors", errs)
	}
}
