package broker_test

// Replicated segments in a three-node cluster: produces acknowledged only
// once a quorum fsynced them (W1), and a producer that keeps going while
// nodes are stopped under it, checked by reading everything back through
// another node: no acknowledged record lost (W6), none read twice, each
// key's records in order, the same history on every node.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
)

// activeSegment is the active segment of the topic's only range, as
// node b sees it.
func activeSegment(t *testing.T, b *broker.Broker, topic string) broker.SegmentDescription {
	t.Helper()
	s, err := findActive(b, topic)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// findActive is activeSegment for a polled condition: between a roll's
// seal and its successor's open a range has no active segment.
func findActive(b *broker.Broker, topic string) (broker.SegmentDescription, error) {
	d, err := b.DescribeTopic(topic)
	if err != nil {
		return broker.SegmentDescription{}, err
	}
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.Active {
				return s, nil
			}
		}
	}
	return broker.SegmentDescription{}, fmt.Errorf("topic %s has no active segment", topic)
}

// W1: with both followers' fsyncs held, a produce is not acknowledged
// although the primary fsynced it, and no node serves it (R1); once one
// follower's fsync goes through, it is.
func TestClusterReplicatedProduceWaitsForAQuorumFsync(t *testing.T) {
	faulty := map[uint64]*vfs.FaultyFS{2: vfs.NewFaulty(vfs.OS(), nil), 3: vfs.NewFaulty(vfs.OS(), nil)}
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		if f := faulty[nd.id]; f != nil {
			nd.fs = f
		}
		// The produce waits while the test reads through every node; on
		// a loaded machine that may take longer than the default 2 s a
		// produce waits for its quorum.
		nd.metaTimeout = time.Minute
	})
	ctx := t.Context()
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "quorum", 1)
	if _, err := n1.Produce(ctx, "quorum", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	seg := activeSegment(t, n1, "quorum")
	if len(seg.Replicas) != 3 || seg.Replicas[0] != "node-1" {
		t.Fatalf("replicas %v, want three led by node-1", seg.Replicas)
	}
	for _, nd := range tc.nodes[1:] {
		eventually(t, 10*time.Second, fmt.Sprintf("node %d's copy", nd.id), func() error {
			if e := nd.b.LocalDurableEnd(seg.ID); e != 1 {
				return fmt.Errorf("copy ends at %d", e)
			}
			return nil
		})
	}
	g2, g3 := newGate(tc.nodes[1].dir), newGate(tc.nodes[2].dir)
	var once2, once3 sync.Once
	release2 := func() { once2.Do(func() { close(g2.open) }) }
	release3 := func() { once3.Do(func() { close(g3.open) }) }
	t.Cleanup(func() { release2(); release3() }) // before the nodes close, which fsync
	faulty[2].SetRule(g2.rule)
	faulty[3].SetRule(g3.rule)
	acked := make(chan error, 1)
	go func() {
		_, err := n1.Produce(ctx, "quorum", []broker.Record{rec("k", "1")})
		acked <- err
	}()
	<-g2.entered
	<-g3.entered
	eventually(t, 10*time.Second, "the primary's own fsync", func() error {
		if e := n1.LocalDurableEnd(seg.ID); e != 2 {
			return fmt.Errorf("primary ends at %d", e)
		}
		return nil
	})
	select {
	case err := <-acked:
		t.Fatalf("a produce fsynced by the primary alone was answered: %v", err)
	default:
	}
	// R1: no node serves it, although the primary's copy holds it, and
	// the primary's topic description ends the segment at the watermark.
	for _, nd := range tc.nodes {
		if got := values(drain(t, nd.b, "quorum")); !slices.Equal(got, []string{"0"}) {
			t.Fatalf("node %d read %v above the watermark, want [0]", nd.id, got)
		}
	}
	if d, err := n1.DescribeTopic("quorum"); err != nil || activeEnd(d) != 1 {
		t.Fatalf("the primary describes the active segment ending at %d (%v), want the watermark 1", activeEnd(d), err)
	}
	release2()
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the produce was not acknowledged once a follower fsynced it")
	}
	release3()
	for _, nd := range tc.nodes {
		if got := values(readAll(t, nd.b, "quorum", 2)); !slices.Equal(got, []string{"0", "1"}) {
			t.Fatalf("node %d read %v", nd.id, got)
		}
	}
}

// history records what a producer was told of each value it sent.
type history struct {
	mu     sync.Mutex
	acked  map[int]bool
	failed map[int]error
	next   int
	stop   chan struct{}
	done   chan struct{}
}

// produceLoop sends one record per value, keyed round-robin over keys,
// at most window at a time, through b until stop. A failed value is not
// sent again: it may be stored once or not at all.
func produceLoop(ctx context.Context, b *broker.Broker, topic string, keys []string, window int) *history {
	h := &history{acked: map[int]bool{}, failed: map[int]error{}, stop: make(chan struct{}), done: make(chan struct{})}
	slots := make(chan struct{}, window)
	var wg sync.WaitGroup
	answer := func(v int, err error) {
		h.mu.Lock()
		if err != nil {
			h.failed[v] = err
		} else {
			h.acked[v] = true
		}
		h.mu.Unlock()
		<-slots
		wg.Done()
	}
	go func() {
		defer close(h.done)
		defer wg.Wait()
		for v := 0; ; v++ {
			select {
			case <-h.stop:
				return
			case slots <- struct{}{}:
			}
			h.mu.Lock()
			h.next = v + 1
			h.mu.Unlock()
			wg.Add(1)
			r := rec(keys[v%len(keys)], strconv.Itoa(v))
			if err := b.ProduceAsync(ctx, topic, []broker.Record{r}, func(_ int, err error) { answer(v, err) }); err != nil {
				answer(v, err)
			}
		}
	}()
	return h
}

func (h *history) ackedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

func (h *history) ackedAtLeast(n int) func() error {
	return func() error {
		if got := h.ackedCount(); got < n {
			h.mu.Lock()
			defer h.mu.Unlock()
			return fmt.Errorf("%d acked, %d failed", got, len(h.failed))
		}
		return nil
	}
}

// finish stops the producer and waits for every answer.
func (h *history) finish(t *testing.T) {
	t.Helper()
	close(h.stop)
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		t.Fatal("produces were never answered")
	}
}

// retriable reports whether a failed produce's reason is one a client
// retries.
func retriable(err error) bool {
	return errors.Is(err, broker.ErrRetry) || errors.Is(err, broker.ErrUnreachable) ||
		errors.Is(err, broker.ErrMetadataUnavailable) || errors.Is(err, broker.ErrTooManyRequests) ||
		errors.Is(err, broker.ErrShuttingDown) || errors.Is(err, context.DeadlineExceeded)
}

func reasonText(err error) string {
	for _, e := range []error{broker.ErrRetry, broker.ErrUnreachable, broker.ErrMetadataUnavailable,
		broker.ErrTooManyRequests, broker.ErrShuttingDown, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}

// check reads what recs (everything read back through one node) holds
// of the history: every acknowledged value once, no value twice, each
// key's values in increasing order, and only retriable failures. It
// returns each key's values, to compare nodes with.
func (h *history) check(t *testing.T, recs []broker.Record) map[string][]int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[int]bool{}
	byKey := map[string][]int{}
	for _, r := range recs {
		v, err := strconv.Atoi(string(r.Value))
		if err != nil || v < 0 {
			continue
		}
		if seen[v] {
			t.Fatalf("value %d read twice", v)
		}
		seen[v] = true
		k := string(r.Key)
		if s := byKey[k]; len(s) > 0 && s[len(s)-1] > v {
			t.Fatalf("key %s: value %d read after %d", k, v, s[len(s)-1])
		}
		byKey[k] = append(byKey[k], v)
		if !h.acked[v] && h.failed[v] == nil {
			t.Fatalf("value %d read but never produced", v)
		}
	}
	for v := range h.acked {
		if !seen[v] {
			t.Fatalf("acknowledged value %d lost (%d acked, %d failed, %d read)", v, len(h.acked), len(h.failed), len(seen))
		}
	}
	reasons := map[string]int{}
	for v, err := range h.failed {
		if !retriable(err) {
			t.Fatalf("value %d failed with %v, not a retriable reason", v, err)
		}
		reasons[reasonText(err)]++
	}
	t.Logf("%d acked, %d failed %v, %d read", len(h.acked), len(h.failed), reasons, len(seen))
	return byKey
}

// sameHistory checks that every node reads each key's values alike.
func sameHistory(t *testing.T, h *history, topic string, nodes ...*clusterNode) {
	t.Helper()
	var first map[string][]int
	for i, nd := range nodes {
		got := h.check(t, drainEventually(t, nd.b, topic, h))
		if i == 0 {
			first = got
			continue
		}
		for k, vs := range first {
			if !slices.Equal(vs, got[k]) {
				t.Fatalf("node %d reads key %s as %v, node %d as %v", nd.id, k, got[k], nodes[0].id, vs)
			}
		}
	}
}

// drainEventually reads topic through b until it holds every
// acknowledged value: a follower's copy may learn the last watermark a
// moment after the producer was answered.
func drainEventually(t *testing.T, b *broker.Broker, topic string, h *history) []broker.Record {
	t.Helper()
	var recs []broker.Record
	eventually(t, 20*time.Second, "every acknowledged value readable", func() error {
		var err error
		if recs, err = drainOnce(t.Context(), b, topic); err != nil {
			return err
		}
		have := map[string]bool{}
		for _, r := range recs {
			have[string(r.Value)] = true
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for v := range h.acked {
			if !have[strconv.Itoa(v)] {
				return fmt.Errorf("value %d not read yet", v)
			}
		}
		return nil
	})
	return recs
}

// drainOnce reads topic from the start until a page comes back empty.
func drainOnce(ctx context.Context, b *broker.Broker, topic string) ([]broker.Record, error) {
	var out []broker.Record
	var cur *string
	for {
		p, err := b.Fetch(ctx, broker.FetchRequest{Topic: topic, Cursor: cur, Max: 1000})
		if err != nil {
			return nil, err
		}
		if p.Cursor != nil {
			cur = p.Cursor
		}
		if len(p.Records) == 0 {
			return out, nil
		}
		out = append(out, p.Records...)
	}
}

var replicaKeys = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

// The primary stops while a producer writes through a follower: the
// range fails over to a new segment on the survivors; produces answered
// meanwhile fail with retriable reasons; every acknowledged record is
// read back through the third node, once, in order per key.
func TestClusterReplicatedPrimaryStops(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "failover", 1)
	if _, err := n1.Produce(ctx, "failover", []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	old := activeSegment(t, n1, "failover")
	readAll(t, n2, "failover", 1)
	tc.waitVoters(3)

	h := produceLoop(ctx, n2, "failover", replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the stop", h.ackedAtLeast(300))
	tc.stop(tc.nodes[0])
	before := h.ackedCount()
	eventually(t, 60*time.Second, "produces after the failover", h.ackedAtLeast(before+300))
	h.finish(t)

	seg := activeSegment(t, n2, "failover")
	if seg.ID == old.ID || seg.Replicas[0] == "node-1" {
		t.Fatalf("after the failover the range is written to %+v (was %+v)", seg, old)
	}
	sameHistory(t, h, "failover", tc.nodes[2], tc.nodes[1])
}

// A follower stops: produces through the primary go on (two of three
// still fsync), and both remaining nodes read every acknowledged record.
func TestClusterReplicatedFollowerStops(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "follower", 1)
	if _, err := n1.Produce(ctx, "follower", []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	seg := activeSegment(t, n1, "follower")
	tc.waitVoters(3)

	h := produceLoop(ctx, n1, "follower", replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the stop", h.ackedAtLeast(300))
	var stopped *clusterNode
	for _, nd := range tc.nodes {
		if nd.id == 3 {
			stopped = nd
		}
	}
	tc.stop(stopped)
	before := h.ackedCount()
	eventually(t, 30*time.Second, "produces with a follower stopped", h.ackedAtLeast(before+300))
	h.finish(t)
	if s := activeSegment(t, n1, "follower"); s.ID != seg.ID {
		t.Fatalf("a follower's stop rolled the segment: %d, then %d", seg.ID, s.ID)
	}
	sameHistory(t, h, "follower", tc.nodes[1], tc.nodes[0])
}

// Two of three nodes stop: a produce fails within its time with a
// retriable reason, nothing acknowledged is lost, and produces go
// through again once one node is back.
func TestClusterReplicatedTwoOfThreeStop(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "majority", 1)
	if _, err := n1.Produce(ctx, "majority", []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	tc.waitVoters(3)
	h := produceLoop(ctx, n1, "majority", replicaKeys, 8)
	eventually(t, 30*time.Second, "produces before the stops", h.ackedAtLeast(200))
	h.finish(t)

	tc.stop(tc.nodes[1])
	tc.stop(tc.nodes[2])
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := n1.Produce(pctx, "majority", []broker.Record{rec("a", "lonely")})
	if err == nil || !retriable(err) || pctx.Err() != nil {
		t.Fatalf("a produce with two of three nodes stopped: %v, want a retriable reason in time", err)
	}

	tc.open(tc.nodes[1], []string{tc.nodes[0].gossip})
	eventually(t, 60*time.Second, "a produce once a node is back", func() error {
		_, err := n1.Produce(ctx, "majority", []broker.Record{rec("a", "back")})
		return err
	})
	recs := drainEventually(t, n1, "majority", h)
	h.check(t, recs)
	if got := values(recs); !slices.Contains(got, "back") {
		t.Fatalf("the produce acknowledged after the return is not read back: %v", got[max(0, len(got)-5):])
	}
	sameHistory(t, h, "majority", tc.nodes[1], tc.nodes[0])
}

// The primary restarts: it does not resume its old active segment (its
// primary's state is gone), which is failed over with its own copy
// answering as a follower's; every acknowledged record is kept and
// produces go on in a successor.
func TestClusterReplicatedPrimaryRestarts(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1 := tc.nodes[0].b
	tc.createEverywhere(tc.nodes[0], "restart", 1)
	if _, err := n1.Produce(ctx, "restart", []broker.Record{rec("a", "-1")}); err != nil {
		t.Fatal(err)
	}
	old := activeSegment(t, n1, "restart")
	tc.waitVoters(3)
	h := produceLoop(ctx, n1, "restart", replicaKeys, 16)
	eventually(t, 30*time.Second, "produces before the restart", h.ackedAtLeast(300))
	h.finish(t)

	tc.stop(tc.nodes[0])
	tc.open(tc.nodes[0], []string{tc.nodes[1].gossip})
	n1 = tc.nodes[0].b
	eventually(t, 60*time.Second, "a produce through the restarted node", func() error {
		_, err := n1.Produce(ctx, "restart", []broker.Record{rec("a", "after")})
		return err
	})
	d, err := tc.nodes[2].b.DescribeTopic("restart")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.Ranges[0].Segments {
		if s.ID == old.ID && (s.Active || s.End < uint64(h.ackedCount()+1)) {
			t.Fatalf("the restarted primary's segment: %+v, want sealed past the %d acknowledged records", s, h.ackedCount()+1)
		}
	}
	if s := activeSegment(t, tc.nodes[2].b, "restart"); s.ID == old.ID {
		t.Fatalf("the restarted primary resumed its old segment %d", old.ID)
	}
	sameHistory(t, h, "restart", tc.nodes[2], tc.nodes[0], tc.nodes[1])
}

// activeEnd is where a topic description says its active segment ends.
func activeEnd(d broker.TopicDescription) uint64 {
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			if s.Active {
				return s.End
			}
		}
	}
	return 0
}
