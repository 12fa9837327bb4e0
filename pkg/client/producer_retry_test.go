package client

// The Producer's retries, against a scripted node (fakeBroker): failed
// batches are sent again in order, or not at all when a newer batch of
// their topic was stored meanwhile. The fake holds the first answers back
// until several batches are in flight, so that the outcome does not
// depend on timing.

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/wire"
)

// produceScript is a fake node's produce handling: the first len(first)
// produce requests are answered together once the last of them arrives,
// each as first says ("" stores it, a reason refuses it, "drop" closes
// the connection); later ones are stored at once.
type produceScript struct {
	produceStore
	first []string
	held  []heldProduce // guarded by mu
}

// produceStore is what a fake node stored of the produce requests it
// answered: their values, in order.
type produceStore struct {
	mu     sync.Mutex
	seen   int // produce requests received
	stored []string
}

// produceOf returns req as a produce request, refusing any other.
func produceOf(fc *fakeConn, corr uint32, req wire.Request) (*wire.ProduceRequest, bool) {
	pr, ok := req.(*wire.ProduceRequest)
	if !ok {
		fc.refuse(corr, wire.ReasonUnknownAPIKey)
	}
	return pr, ok
}

// acceptLocked stores pr and answers it. REQUIRES: s.mu held.
func (s *produceStore) acceptLocked(fc *fakeConn, corr uint32, pr *wire.ProduceRequest) {
	for _, r := range pr.Records {
		s.stored = append(s.stored, string(r.Value))
	}
	fc.ok(corr, wire.CountResponse{Count: uint32(len(pr.Records))})
}

// result is what was stored and how many produce requests came.
func (s *produceStore) result() (stored []string, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stored), s.seen
}

type heldProduce struct {
	fc   *fakeConn
	corr uint32
	req  *wire.ProduceRequest
}

func (s *produceScript) handle(fc *fakeConn, corr uint32, req wire.Request) {
	pr, ok := produceOf(fc, corr, req)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	if s.seen > len(s.first) {
		s.acceptLocked(fc, corr, pr)
		return
	}
	s.held = append(s.held, heldProduce{fc, corr, pr})
	if len(s.held) < len(s.first) {
		return
	}
	for i, h := range s.held {
		switch s.first[i] {
		case "":
			s.acceptLocked(h.fc, h.corr, h.req)
		case "drop":
			h.fc.nc.Close()
		default:
			h.fc.refuse(h.corr, s.first[i])
		}
	}
}

// produceEach sends one record per value, each its own batch, and returns
// the promises' errors once the producer is closed.
func produceEach(t *testing.T, c *Client, values ...string) []error {
	t.Helper()
	p := NewProducer(c, ProducerOptions{Linger: -1})
	errs := make([]error, len(values))
	for i, v := range values {
		p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(v)}, func(_ Record, err error) { errs[i] = err })
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return errs
}

// TestProducerRetriesInOrder: batches refused with a retriable reason, or
// whose answers were lost with the connection, while no newer batch was
// stored, are sent again oldest first and all stored, in order.
func TestProducerRetriesInOrder(t *testing.T) {
	for name, first := range map[string][]string{
		"refused":    {wire.ReasonNoQuorum, wire.ReasonNotOwner, wire.ReasonNoQuorum},
		"connection": {"drop", "drop", "drop"},
	} {
		t.Run(name, func(t *testing.T) {
			s := &produceScript{first: first}
			c := dialFake(t, startFake(t, s.handle), WithRetry(5, 1))
			errs := produceEach(t, c, "a", "b", "c")
			for i, err := range errs {
				if err != nil {
					t.Errorf("record %d: %v, want stored after a retry", i, err)
				}
			}
			stored, requests := s.result()
			if !slices.Equal(stored, []string{"a", "b", "c"}) || requests != 6 {
				t.Fatalf("node stored %q from %d requests, want [a b c] from 6", stored, requests)
			}
		})
	}
}

// TestProducerNoRetryAfterNewerStored: a batch refused while a newer batch
// of its topic was stored is not sent again, which would store its
// records after the newer ones: its promise gets the refusal.
func TestProducerNoRetryAfterNewerStored(t *testing.T) {
	s := &produceScript{first: []string{wire.ReasonNoQuorum, ""}}
	c := dialFake(t, startFake(t, s.handle), WithRetry(5, 1))
	errs := produceEach(t, c, "a", "b")
	if !errors.Is(errs[0], ErrNoQuorum) || errs[1] != nil {
		t.Fatalf("promises got %v, want [no_quorum <nil>]", errs)
	}
	stored, requests := s.result()
	if !slices.Equal(stored, []string{"b"}) || requests != 2 {
		t.Fatalf("node stored %q from %d requests, want [b] from 2", stored, requests)
	}
}

// TestProducerRetriesRunOut: a batch refused on every attempt fails with
// the refusal after WithRetry's attempts.
func TestProducerRetriesRunOut(t *testing.T) {
	var (
		mu       sync.Mutex
		attempts int
	)
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		mu.Lock()
		attempts++
		mu.Unlock()
		fc.refuse(corr, wire.ReasonNoQuorum)
	})
	c := dialFake(t, f, WithRetry(3, 1))
	errs := produceEach(t, c, "a")
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(errs[0], ErrNoQuorum) || attempts != 3 {
		t.Fatalf("promise got %v after %d attempts, want no_quorum after 3", errs[0], attempts)
	}
}

// stallLoss is a Metrics hook that holds up the report of the first
// produce that failed (its answer lost with the connection) until
// release is closed. The producer reports an attempt before it takes its
// outcome, so meanwhile the failed batch is still in flight as far as the
// producer knows, as it is when the goroutine awaiting it is slow to run.
type stallLoss struct {
	once    sync.Once
	stalled chan struct{} // closed when the first loss is held up
	release chan struct{}
}

func (m *stallLoss) OnRequest(e RequestEvent) {
	if e.Op != "produce" || e.Err == nil {
		return
	}
	m.once.Do(func() {
		close(m.stalled)
		<-m.release
	})
}

func (m *stallLoss) OnConnect(ConnectEvent) {}

// TestProducerNoOvertakeAcrossRedial: a batch taken for sending while an
// older batch of its topic is still in flight on a connection that broke
// does not go out ahead of it on the connection dialled next: it waits
// until the older batch's loss is taken, and both are then stored, in
// order, and every promise reports success. Sending it at once would store
// it first, and the older batch could then only fail.
func TestProducerNoOvertakeAcrossRedial(t *testing.T) {
	var s produceStore
	lost := make(chan struct{})
	f := startFake(t, func(fc *fakeConn, corr uint32, req wire.Request) {
		pr, ok := produceOf(fc, corr, req)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.seen++; s.seen == 1 {
			close(lost) // never answered: the test drops the connection
			return
		}
		s.acceptLocked(fc, corr, pr)
	})
	m := &stallLoss{stalled: make(chan struct{}), release: make(chan struct{})}
	c := dialFake(t, f, WithRetry(5, 1), WithMetrics(m))
	p := NewProducer(c, ProducerOptions{Linger: -1})
	var errs [2]error
	produce := func(i int, v string) {
		p.Produce(t.Context(), "t", Record{Key: []byte("k"), Value: []byte(v)}, func(_ Record, err error) { errs[i] = err })
	}
	produce(0, "a")
	awaitClosed(t, lost, "a to reach the node")
	f.dropAll()
	awaitClosed(t, m.stalled, "a's loss to be reported")
	produce(1, "b")
	// b either goes out on a new connection or is set aside to wait for a.
	parked := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		ts := p.topics["t"]
		return ts != nil && len(ts.parked) > 0
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for _, requests := s.result(); requests < 2 && !parked(); _, requests = s.result() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("b neither sent nor set aside")
		}
	}
	close(m.release)
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("promises got %v, want both stored", errs)
	}
	if stored, _ := s.result(); !slices.Equal(stored, []string{"a", "b"}) {
		t.Fatalf("node stored %q, want [a b]", stored)
	}
}

// awaitClosed waits for ch to be closed, failing the test after a deadline.
func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
