package client

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// holdFirstProduce is a fake node's produce handling: the first produce
// request is kept unanswered and handed to the test on first; every
// later one is stored at once.
type holdFirstProduce struct {
	produceStore
	first chan func(reason string) // answers the first request: "" stores it
}

func newHoldFirstProduce() *holdFirstProduce {
	return &holdFirstProduce{first: make(chan func(string), 1)}
}

func (s *holdFirstProduce) handle(fc *fakeConn, corr uint32, req wire.Request) {
	pr, ok := produceOf(fc, corr, req)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if s.seen == 1 {
		s.first <- func(reason string) {
			if reason != "" {
				fc.refuse(corr, reason)
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.acceptLocked(fc, corr, pr)
		}
		return
	}
	s.acceptLocked(fc, corr, pr)
}

// firstRequest waits for the first produce request to reach the fake.
func (s *holdFirstProduce) firstRequest(t *testing.T) func(string) {
	t.Helper()
	select {
	case answer := <-s.first:
		return answer
	case <-time.After(10 * time.Second):
		t.Fatal("no produce request reached the node")
		return nil
	}
}

// untilHolds waits for cond, for at most 10 s.
func untilHolds(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestProducerOneInFlightRetriesRefusal: with MaxInFlight 1 nothing of a
// topic is ever in flight beside a failed batch, so a retriable refusal
// must be retried (the producer "stops sending the topic's batches" and
// sends the failed one again first). The sender has already taken the
// next batch and waits for the slot the refused one frees; it must not
// send it past the held topic.
func TestProducerOneInFlightRetriesRefusal(t *testing.T) {
	s := newHoldFirstProduce()
	c := dialFake(t, startFake(t, s.handle), WithRetry(5, 1))
	p := NewProducer(c, ProducerOptions{Linger: -1, MaxInFlight: 1})
	errs := make([]error, 2)
	for i, v := range []string{"a", "b"} {
		p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(v)}, func(_ Record, err error) { errs[i] = err })
	}
	answer := s.firstRequest(t)
	untilHolds(t, "the sender to take the second batch", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		ts := p.topics["t"]
		return len(p.sendq) == 0 && ts != nil && ts.inflight == 2
	})
	answer(wire.ReasonNoQuorum) // transient
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("promises got %v, want both stored (a retried)", errs)
	}
	if got, _ := s.result(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("node stored %q, want [a b]", got)
	}
}

// TestProducerConcurrentCloseWaitsForFlush: Close flushes; a second Close
// while the first still flushes must not return before the records
// produced have been resolved (a program that exits after it loses
// them), and then returns what the first returned.
func TestProducerConcurrentCloseWaitsForFlush(t *testing.T) {
	s := newHoldFirstProduce()
	c := dialFake(t, startFake(t, s.handle))
	p := NewProducer(c, ProducerOptions{Linger: -1})
	var resolved atomic.Bool
	p.Produce(t.Context(), "t", Record{Value: []byte("a")}, func(Record, error) { resolved.Store(true) })
	answer := s.firstRequest(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() { first <- p.Close(ctx) }()
	untilHolds(t, "the first Close to start", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	})
	type outcome struct {
		err  error
		done bool // the record was resolved when the second Close returned
	}
	second := make(chan outcome, 1)
	go func() {
		err := p.Close(ctx)
		second <- outcome{err, resolved.Load()}
	}()
	// A second Close that does not wait returns before the answer below
	// has even been written, let alone resolved its record.
	answer("")
	if err := <-first; err != nil {
		t.Fatalf("first close: %v", err)
	}
	got := <-second
	if got.err != nil {
		t.Fatalf("second close: %v, want the first's nil", got.err)
	}
	if !got.done {
		t.Fatal("a second Close returned nil while the record produced was still unanswered")
	}
}

// TestProducerBlockedProduceSealsFillingBatch: with a buffer smaller than
// a batch, the buffer fills before the batch does. A Produce waiting for
// room must not wait for the batch's linger (an hour here): room comes
// only once the filling batch has gone out and been answered.
func TestProducerBlockedProduceSealsFillingBatch(t *testing.T) {
	c := dialFake(t, startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		pr, ok := req.(*wire.ProduceRequest)
		if !ok {
			fc.refuse(corr, wire.ReasonUnknownAPIKey)
			return
		}
		fc.ok(corr, wire.CountResponse{Count: uint32(len(pr.Records))})
	}))
	p := NewProducer(c, ProducerOptions{Linger: time.Hour, MaxBufferedBytes: 100})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rec := Record{Value: make([]byte, 60)} // two do not fit in 100 bytes
	errs := make([]error, 2)
	for i := range errs {
		p.Produce(ctx, "t", rec, func(_ Record, err error) { errs[i] = err })
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("record %d: %v", i, err)
		}
	}
}

// TestProducerResendsOneAtATime: two batches of a topic in flight are both
// refused; the retry of the first is refused once more, that of the second
// would be stored at once. Sent again together, the second would be
// stored while the first waits for its next attempt, and the first could
// then only fail; sent one at a time, both are stored, in order.
func TestProducerResendsOneAtATime(t *testing.T) {
	var (
		mu      sync.Mutex
		tries   = map[string]int{}
		stored  []string
		refuseA func() // the first refusal of a, sent once b is in flight too
	)
	refusals := map[string]int{"a": 2, "b": 1}
	c := dialFake(t, startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		pr, ok := req.(*wire.ProduceRequest)
		if !ok {
			fc.refuse(corr, wire.ReasonUnknownAPIKey)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		v := string(pr.Records[0].Value)
		tries[v]++
		switch {
		case v == "a" && tries[v] == 1:
			refuseA = func() { fc.refuse(corr, wire.ReasonNoQuorum) }
			return
		case v == "b" && tries[v] == 1:
			refuseA()
		}
		if tries[v] <= refusals[v] {
			fc.refuse(corr, wire.ReasonNoQuorum)
			return
		}
		stored = append(stored, v)
		fc.ok(corr, wire.CountResponse{Count: uint32(len(pr.Records))})
	}), WithRetry(5, 1))
	p := NewProducer(c, ProducerOptions{Linger: -1})
	errs := make([]error, 2)
	for i, v := range []string{"a", "b"} {
		p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(v)}, func(_ Record, err error) { errs[i] = err })
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("promises got %v, want both stored", errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(stored, []string{"a", "b"}) {
		t.Fatalf("node stored %q, want [a b]", stored)
	}
}
