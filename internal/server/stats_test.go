package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
)

func TestTrafficCountsResultsByReason(t *testing.T) {
	ts := newTrafficStats()
	start := time.Now()
	ts.done(&ts.produce, OpProduce, start, 10, 100, nil)
	ts.done(&ts.produce, OpProduce, start, 0, 0, broker.ErrRetry)
	ts.done(&ts.produce, OpProduce, start, 0, 0, errors.New("something unexpected"))
	ts.login(nil)
	ts.login(broker.ErrCredentials)
	s := &Server{traffic: ts}
	s.mu.conns = map[*conn]struct{}{}
	got := s.Traffic()
	if got.Produce.OK != 1 || got.Produce.Records != 10 || got.Produce.Bytes != 100 {
		t.Errorf("produce %+v, want 1 ok, 10 records, 100 bytes", got.Produce)
	}
	if got.Produce.Latency.Count != 3 {
		t.Errorf("latency observed %d times, want 3 (refusals too)", got.Produce.Latency.Count)
	}
	if got.Refused[[2]string{OpProduce, "retry"}] != 1 || got.Refused[[2]string{OpProduce, "internal_error"}] != 1 {
		t.Errorf("refusals %v", got.Refused)
	}
	if got.Logins["ok"] != 1 || got.Logins["invalid_credentials"] != 1 {
		t.Errorf("logins %v", got.Logins)
	}
}

func TestRefusalReasonsAreBounded(t *testing.T) {
	ts := newTrafficStats()
	for i := range 2 * maxReasons {
		ts.refuse("", fmt.Sprintf("reason-%d", i))
	}
	if n := len(ts.refused); n > maxReasons+1 {
		t.Fatalf("%d refusal keys kept, want at most %d", n, maxReasons+1)
	}
	var total uint64
	for _, n := range ts.refused {
		total += n
	}
	if total != 2*maxReasons {
		t.Fatalf("%d refusals counted, want %d: folded ones must still count", total, 2*maxReasons)
	}
}

func BenchmarkTrafficDone(b *testing.B) {
	ts := newTrafficStats()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ts.done(&ts.produce, OpProduce, time.Now(), 100, 12800, nil)
		}
	})
}
