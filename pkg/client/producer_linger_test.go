package client

import (
	"cmp"
	"maps"
	"strconv"
	"testing"
	"time"
)

// TestProducerV2LingerAfterEarlyTake: the linger timer is armed for the
// oldest range's batch; a request that takes that batch early (it filled)
// leaves the next range's batch, opened later, the oldest. When the timer
// fires, that batch has not lingered yet: it still goes once it has,
// without Flush or Close.
func TestProducerV2LingerAfterEarlyTake(t *testing.T) {
	fv, c := newFakeV2(t, 1<<16)
	const linger = 400 * time.Millisecond
	p := NewProducer(c, ProducerOptions{Linger: linger, MaxBatchRecords: 4})
	defer p.Close(t.Context())
	table, err := c.routes(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var ka, kb string
	for i := 0; ka == "" || kb == ""; i++ {
		k := "k" + strconv.Itoa(i)
		switch table.index([]byte(k)) {
		case 0:
			ka = cmp.Or(ka, k)
		case 1:
			kb = cmp.Or(kb, k)
		}
	}
	start := time.Now()
	p.Produce(t.Context(), "t", Record{Key: []byte(ka), Value: []byte("a0")}, nil)
	// B's batch must open later than A's by more than the sender takes to
	// act on a timer, or it has lingered too by the time A's timer fires.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < linger/4 {
		<-tick.C
	}
	done := make(chan error, 1)
	p.Produce(t.Context(), "t", Record{Key: []byte(kb), Value: []byte("b0")}, func(_ Record, err error) { done <- err })
	for i := 1; i < 4; i++ { // A's batch fills the request: it goes at once
		p.Produce(t.Context(), "t", Record{Key: []byte(ka), Value: []byte("a" + strconv.Itoa(i))}, nil)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("B's record was not sent after its linger")
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	ra, rb := table.ranges[0].Range, table.ranges[1].Range
	want := []map[uint64]int{{ra: 4}, {rb: 1}}
	if len(fv.shares) != len(want) || !maps.Equal(fv.shares[0], want[0]) || !maps.Equal(fv.shares[1], want[1]) {
		t.Fatalf("requests carried %v records per range, want %v: A's full batch first, then B's", fv.shares, want)
	}
}
