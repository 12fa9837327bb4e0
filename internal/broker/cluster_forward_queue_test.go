package broker_test

// Produces forwarded between nodes: queued produces whose sum exceeds one
// peer frame, one produce larger than a frame, the order of one
// producer's records per key when its range is split or merged while
// produces are queued for the owner, and cursors that need another node.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/vfs"
)

// bigProduce is about 9 MiB of incompressible records for key k: less
// than one peer frame (16 MiB by default), more than half of one.
func bigProduce(seed uint64, k string) []broker.Record {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	recs := make([]broker.Record, 36)
	for i := range recs {
		v := make([]byte, 256<<10)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		recs[i] = broker.Record{Key: []byte(k), Value: v}
	}
	return recs
}

// Two produces through node 2, each of which node 2 forwards fine on its
// own, queue behind a third while node 1's fsync is held. Once it goes
// through, node 2 sends the two queued produces to node 1 in one call;
// both must still be acknowledged (splitting the call if need be), not
// failed because their sum exceeds one peer frame.
func TestClusterForwardedQueueLargerThanOnePeerFrame(t *testing.T) {
	faulty := vfs.NewFaulty(vfs.OS(), nil)
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		if nd.id == 1 {
			nd.fs = faulty
		}
		// Node 1 appends 18 MiB in one call once the gate opens: on a
		// loaded machine, under the race detector, that takes longer
		// than the test clusters' default of the 2 s metadata timeout.
		nd.data.CallTimeout = time.Minute
		// The forward queue is what is tested: one copy, so the held
		// fsync is not also a replicated commit running out of time.
		unreplicated(nd)
	})
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "frames", 1)
	if _, err := n1.Produce(ctx, "frames", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "frames", 1)
	if _, err := n2.Produce(ctx, "frames", bigProduce(1, "k")); err != nil {
		t.Fatalf("one 9 MiB produce through node 2 on its own: %v", err)
	}

	g := newGate(tc.nodes[0].dir)
	faulty.SetRule(g.rule)
	results := make(chan error, 3)
	if err := n2.ProduceAsync(ctx, "frames", []broker.Record{rec("k", "small")}, func(_ int, err error) { results <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("node 1 never synced the forwarded produce")
	}
	for seed := uint64(2); seed <= 3; seed++ {
		if err := n2.ProduceAsync(ctx, "frames", bigProduce(seed, "k"), func(_ int, err error) { results <- err }); err != nil {
			t.Fatalf("queue produce %d through node 2: %v", seed, err)
		}
	}
	close(g.open)
	deadline := time.After(30 * time.Second)
	for i := range 3 {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("produce %d through node 2: %v", i, err)
			}
		case <-deadline:
			t.Fatal("a produce through node 2 was never answered")
		}
	}
}

// drain reads topic through b from the start until a page comes back
// empty.
func drain(t *testing.T, b *broker.Broker, topic string) []broker.Record {
	t.Helper()
	var out []broker.Record
	var cur *string
	for {
		p, err := b.Fetch(t.Context(), broker.FetchRequest{Topic: topic, Cursor: cur, Max: 1000})
		if err != nil {
			t.Fatalf("fetch %s: %v", topic, err)
		}
		if p.Cursor != nil {
			cur = p.Cursor
		}
		if len(p.Records) == 0 {
			return out
		}
		out = append(out, p.Records...)
	}
}

// pipeline produces one record at a time through b, pipelined (at most
// 4,096 unanswered), cycling through keys, until stopped; the values
// count up from 0.
type pipeline struct {
	mu       sync.Mutex
	acked    int
	failed   []error
	pending  sync.WaitGroup
	stop     chan struct{}
	produced chan int
}

func startPipeline(ctx context.Context, b *broker.Broker, topic string, keys []string) *pipeline {
	p := &pipeline{stop: make(chan struct{}), produced: make(chan int, 1)}
	window := make(chan struct{}, 4096)
	answered := func(err error) {
		p.mu.Lock()
		if err != nil {
			p.failed = append(p.failed, err)
		} else {
			p.acked++
		}
		p.mu.Unlock()
		<-window
		p.pending.Done()
	}
	go func() {
		i := 0
		defer func() { p.produced <- i }()
		for ; i < 200000; i++ {
			select {
			case <-p.stop:
				return
			case window <- struct{}{}:
			}
			p.pending.Add(1)
			r := rec(keys[i%len(keys)], strconv.Itoa(i))
			if err := b.ProduceAsync(ctx, topic, []broker.Record{r}, func(_ int, err error) { answered(err) }); err != nil {
				answered(err)
			}
		}
	}()
	return p
}

func (p *pipeline) ackedAtLeast(n int) func() error {
	return func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.acked < n {
			return fmt.Errorf("%d acked, %d failed", p.acked, len(p.failed))
		}
		return nil
	}
}

func (p *pipeline) ackedNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

// finish stops producing, waits for every answer and returns how many
// produces were made.
func (p *pipeline) finish(t *testing.T) int {
	t.Helper()
	close(p.stop)
	n := <-p.produced
	waited := make(chan struct{})
	go func() { p.pending.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("pipelined produces were never answered")
	}
	return n
}

// checkKeyOrder checks that recs hold each key's values in increasing
// order, none twice, and at least as many as were acked.
func (p *pipeline) checkKeyOrder(t *testing.T, recs []broker.Record, produced int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	last := map[string]int{}
	seen := map[int]bool{}
	for idx, r := range recs {
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatalf("record %d: value %q", idx, r.Value)
		}
		if v < 0 {
			continue // written before the pipeline
		}
		if seen[v] {
			t.Fatalf("record %d: value %d read twice (produced %d, %d acked, %d failed)", idx, v, produced, p.acked, len(p.failed))
		}
		seen[v] = true
		k := string(r.Key)
		if prev, ok := last[k]; ok && v < prev {
			t.Fatalf("record %d: value %d of key %s read after %d: one producer's records reordered (produced %d, %d acked, %d failed)",
				idx, v, k, prev, produced, p.acked, len(p.failed))
		}
		last[k] = v
	}
	if len(seen) < p.acked {
		t.Fatalf("read %d distinct records, %d were acked", len(seen), p.acked)
	}
}

// One producer pipelines produces of one key through node 2 into a range
// node 1 writes, and node 1 splits the range meanwhile. ProduceAsync
// promises that calls made one after another keep their order per key:
// the key's records, read back, must be in the order produced, with no
// record twice (nothing is retried here).
func TestClusterForwardedProducesKeepKeyOrderAcrossASplit(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "splitorder", 1)
	if _, err := n1.Produce(ctx, "splitorder", []broker.Record{rec("k", "-1")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "splitorder", 1)
	_, routes, err := n1.Routes("splitorder")
	if err != nil || len(routes) != 1 {
		t.Fatalf("routes: %v, %v", routes, err)
	}

	p := startPipeline(ctx, n2, "splitorder", []string{"k"})
	eventually(t, 30*time.Second, "produces through node 2 before the split", p.ackedAtLeast(200))
	if _, err := n1.SplitRange(ctx, "splitorder", routes[0].Range); err != nil {
		p.finish(t)
		t.Fatalf("split through node 1: %v", err)
	}
	eventually(t, 30*time.Second, "produces through node 2 after the split", p.ackedAtLeast(p.ackedNow()+500))
	n := p.finish(t)
	p.checkKeyOrder(t, drain(t, n1, "splitorder"), n)
}

// The same across a merge: one producer pipelines produces of two keys,
// one in each of two ranges node 1 writes, through node 2, and node 1
// merges the two ranges meanwhile. Each key's records keep their order.
func TestClusterForwardedProducesKeepKeyOrderAcrossAMerge(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "mergeorder", 2)
	bits, routes, err := n1.Routes("mergeorder")
	if err != nil || len(routes) != 2 {
		t.Fatalf("routes: %v, %v", routes, err)
	}
	keys := []string{string(keyIn(t, bits, routes[0])), string(keyIn(t, bits, routes[1]))}
	for _, k := range keys {
		if _, err := n1.Produce(ctx, "mergeorder", []broker.Record{rec(k, "-1")}); err != nil {
			t.Fatal(err)
		}
	}
	readAll(t, n2, "mergeorder", 2)

	p := startPipeline(ctx, n2, "mergeorder", keys)
	eventually(t, 30*time.Second, "produces through node 2 before the merge", p.ackedAtLeast(400))
	// The merge holds both ranges and has node 1 seal what it writes
	// (cluster_roll.go); it is tried again only on an answer a client is
	// told to retry.
	_, merr := mergeRetrying(t, n2, "mergeorder", routes[0].Range, routes[1].Range)
	if merr != nil {
		p.finish(t)
		t.Fatalf("merge: %v", merr)
	}
	eventually(t, 30*time.Second, "produces through node 2 after the merge", p.ackedAtLeast(p.ackedNow()+1000))
	n := p.finish(t)
	p.checkKeyOrder(t, drain(t, n1, "mergeorder"), n)
}

// A produce for one range larger than one call between nodes can carry
// is refused by the node forwarding it, with a reason that is not
// retriable, and nothing of it is stored; the range goes on taking
// produces through that node.
func TestClusterForwardedProduceLargerThanAFrameIsRefused(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "huge", 1)
	if _, err := n1.Produce(ctx, "huge", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "huge", 1)
	huge := append(bigProduce(4, "k"), bigProduce(5, "k")...) // about 18 MiB
	_, err := n2.Produce(ctx, "huge", huge)
	if !errors.Is(err, broker.ErrTooLarge) {
		t.Fatalf("an 18 MiB produce through node 2: %v, want %v", err, broker.ErrTooLarge)
	}
	if errors.Is(err, broker.ErrUnreachable) {
		t.Fatalf("an 18 MiB produce through node 2 reported node 1 unreachable: %v", err)
	}
	if _, err := n2.Produce(ctx, "huge", []broker.Record{rec("k", "1")}); err != nil {
		t.Fatalf("a small produce through node 2 after the refusal: %v", err)
	}
	if got := values(drain(t, n1, "huge")); !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("node 1 holds %v", got)
	}
}

// A cursor asked of node 2 for a topic node 1 writes needs node 1; with
// the asker's context already ended it fails at once instead of waiting
// on node 1, and with a live one it is answered. A read from it through
// node 2 then finds what node 1 appended after it, although no reader
// waits on node 2 (so nothing tells node 2 of the append).
func TestClusterEndCursorEndsWithTheCallersContext(t *testing.T) {
	tc := startClusterWith(t, 3, unreplicated) // node 1 alone holds the segment
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "ends", 1)
	if _, err := n1.Produce(ctx, "ends", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "ends", 1)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := n2.EndCursorContext(done, "ends"); err == nil {
		t.Fatal("an end cursor needing node 1 was answered with the asker's context ended")
	}
	if _, err := n2.CursorFromEndContext(done, "ends", 1); err == nil {
		t.Fatal("a cursor from the end needing node 1 was answered with the asker's context ended")
	}
	if _, err := n2.CursorAtContext(done, "ends", 0); err == nil {
		t.Fatal("a cursor by time needing node 1 was answered with the asker's context ended")
	}
	cur, err := n2.EndCursorContext(ctx, "ends")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Produce(ctx, "ends", []broker.Record{rec("k", "1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the record after the end cursor", func() error {
		page, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "ends", Cursor: &cur, Max: 10})
		if err != nil {
			return err
		}
		if got := values(page.Records); !slices.Equal(got, []string{"1"}) {
			return fmt.Errorf("read %v", got)
		}
		return nil
	})
}
