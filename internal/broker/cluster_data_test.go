package broker_test

// The data path between nodes, on in-process clusters of three brokers
// over loopback TCP and real disks: produces forwarded to the node writing
// a range, reads of other nodes' segments, and readers woken across nodes.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/keyspace"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
	"github.com/malachi-log/malachi/pkg/client"
)

// createEverywhere creates topic through nd and waits until every node
// of tc knows it.
func (tc *testCluster) createEverywhere(nd *clusterNode, topic string, ranges int) {
	tc.t.Helper()
	createRetried(tc.t, nd.b, topic, ranges)
	for _, o := range tc.nodes {
		if o.b != nil {
			eventually(tc.t, 10*time.Second, fmt.Sprintf("%s on node %d", topic, o.id), func() error { return hasTopics(o.b, topic) })
		}
	}
}

// createRetried creates topic through b, trying again while the
// attempts fail. An attempt answered metadata_unavailable may still have
// been applied, so already_exists after a failed attempt is that
// attempt's success; on the first attempt it is a test's mistake.
func createRetried(t testing.TB, b *broker.Broker, topic string, ranges int) {
	t.Helper()
	failed := false
	eventually(t, 20*time.Second, "create "+topic, func() error {
		err := b.CreateTopic(t.Context(), topic, 0, ranges)
		if failed && errors.Is(err, metadata.ErrAlreadyExists) {
			return nil
		}
		failed = failed || err != nil
		return err
	})
}

// readAll fetches topic from the start through b until want records were
// read, and returns them in the order read.
func readAll(t testing.TB, b *broker.Broker, topic string, want int) []broker.Record {
	t.Helper()
	var out []broker.Record
	var cur *string
	eventually(t, 20*time.Second, fmt.Sprintf("read %d records of %s", want, topic), func() error {
		for len(out) < want {
			p, err := b.Fetch(t.Context(), broker.FetchRequest{Topic: topic, Cursor: cur, Max: 1000})
			if err != nil {
				return err
			}
			if p.Cursor != nil {
				cur = p.Cursor
			}
			out = append(out, p.Records...)
			if len(p.Records) == 0 {
				break
			}
		}
		if len(out) != want {
			return fmt.Errorf("read %d", len(out))
		}
		return nil
	})
	return out
}

func values(recs []broker.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// keyIn returns a key whose position falls in r, for a topic of bits.
func keyIn(t *testing.T, bits uint8, r broker.RouteRange) []byte {
	t.Helper()
	for i := 0; i < 1<<20; i++ {
		k := []byte("key-" + strconv.Itoa(i))
		if p := keyspace.Position(k, bits); p >= r.Start && p < r.End {
			return k
		}
	}
	t.Fatalf("no key found for range %+v", r)
	return nil
}

func rec(key, value string) broker.Record {
	return broker.Record{Key: []byte(key), Value: []byte(value)}
}

// Node 1 opens a range's segment; produces through node 2 (records, wire
// v1's path) and node 3 (stored batches from the Go client, wire v2's)
// are forwarded to node 1 and land in that one segment; every node reads
// all of them in order.
func TestClusterProduceAndFetchThroughAnyNode(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "events", 1)
	if _, err := n1.Produce(ctx, "events", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	var want []string
	want = append(want, "0")
	for i := 1; i <= 20; i++ {
		if _, err := n2.Produce(ctx, "events", []broker.Record{rec("k", strconv.Itoa(i))}); err != nil {
			t.Fatalf("produce %d through node 2: %v", i, err)
		}
		want = append(want, strconv.Itoa(i))
	}
	c3 := tc.client(tc.nodes[2], "admin", "admin123")
	for i := 21; i <= 40; i++ {
		if _, err := c3.Produce(ctx, "events", client.Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatalf("produce %d through node 3's client: %v", i, err)
		}
		want = append(want, strconv.Itoa(i))
	}
	d, err := n1.DescribeTopic("events")
	if err != nil {
		t.Fatal(err)
	}
	if segs := d.Ranges[0].Segments; len(segs) != 1 || len(segs[0].Replicas) != 3 || segs[0].Replicas[0] != "node-1" {
		t.Fatalf("segments of the range: %+v, want one, led by node-1 on three nodes", segs)
	}
	for _, nd := range tc.nodes {
		if got := values(readAll(t, nd.b, "events", len(want))); !slices.Equal(got, want) {
			t.Fatalf("node %d read %v, want %v", nd.id, got, want)
		}
	}
	// The Go client through node 2, with its own fetch path (wire v2).
	c2 := tc.client(tc.nodes[1], "admin", "admin123")
	p, err := c2.Fetch(ctx, "events", client.FetchOptions{Max: 100})
	if err != nil || len(p.Records) != len(want) {
		t.Fatalf("client fetch through node 2: %d records, %v", len(p.Records), err)
	}
	end, err := c2.EndCursor(ctx, "events")
	if err != nil {
		t.Fatalf("end cursor through node 2: %v", err)
	}
	if p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "events", Cursor: &end, Max: 10}); err != nil || len(p.Records) != 0 {
		t.Fatalf("fetch from node 2's end cursor: %d records, %v", len(p.Records), err)
	}
}

// A topic of eight ranges whose segments were opened through different
// nodes; every node produces into all of them at once (node 3 through the
// Go client); every node then reads everything: nothing lost, duplicated
// or out of order per key and producer.
func TestClusterManyRangesThroughEveryNode(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	tc.createEverywhere(tc.nodes[0], "spread", 8)
	bits, routes, err := tc.nodes[0].b.Routes("spread")
	if err != nil || len(routes) != 8 {
		t.Fatalf("routes: %v, %v", routes, err)
	}
	keys := make([][]byte, len(routes))
	for i, r := range routes {
		keys[i] = keyIn(t, bits, r)
		nd := tc.nodes[i%3]
		eventually(t, 10*time.Second, fmt.Sprintf("open range %d through node %d", r.Range, nd.id), func() error {
			_, err := nd.b.Produce(ctx, "spread", []broker.Record{{Key: keys[i], Value: []byte("open")}})
			return err
		})
	}
	d, err := tc.nodes[0].b.DescribeTopic("spread")
	if err != nil {
		t.Fatal(err)
	}
	holders := map[string]int{}
	for _, r := range d.Ranges {
		for _, s := range r.Segments {
			holders[s.Replicas[0]]++
		}
	}
	if len(holders) != 3 {
		t.Fatalf("segments by node: %v, want some on each of the three", holders)
	}

	const rounds = 15
	c3 := tc.client(tc.nodes[2], "admin", "admin123")
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for p, nd := range tc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				var recs []broker.Record
				var crecs []client.Record
				for _, k := range keys {
					v := fmt.Sprintf("%d:%d", p, round)
					recs = append(recs, broker.Record{Key: k, Value: []byte(v)})
					crecs = append(crecs, client.Record{Key: k, Value: []byte(v)})
				}
				var err error
				if p == 2 {
					_, err = c3.Produce(ctx, "spread", crecs...)
				} else {
					_, err = nd.b.Produce(ctx, "spread", recs)
				}
				if err != nil {
					errs <- fmt.Errorf("node %d round %d: %w", nd.id, round, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := len(keys) + 3*rounds*len(keys)
	for _, nd := range tc.nodes {
		checkPerKey(t, nd.id, readAll(t, nd.b, "spread", total), len(keys), rounds)
	}
}

// checkPerKey checks that, per key, the "open" record comes first and
// each producer's rounds follow in order, each exactly once.
func checkPerKey(t *testing.T, node uint64, recs []broker.Record, keys, rounds int) {
	t.Helper()
	next := map[string][3]int{}
	opened := map[string]bool{}
	for _, r := range recs {
		k, v := string(r.Key), string(r.Value)
		if v == "open" {
			if opened[k] || next[k] != [3]int{} {
				t.Fatalf("node %d: %s opened twice or late", node, k)
			}
			opened[k] = true
			continue
		}
		p, round, _ := strings.Cut(v, ":")
		pi, _ := strconv.Atoi(p)
		ri, _ := strconv.Atoi(round)
		n := next[k]
		if !opened[k] || n[pi] != ri {
			t.Fatalf("node %d: key %s producer %d round %d, expected round %d (opened %v)", node, k, pi, ri, n[pi], opened[k])
		}
		n[pi]++
		next[k] = n
	}
	if len(opened) != keys {
		t.Fatalf("node %d: %d keys opened, want %d", node, len(opened), keys)
	}
	for k, n := range next {
		if n != [3]int{rounds, rounds, rounds} {
			t.Fatalf("node %d: key %s got rounds %v, want %d from each", node, k, n, rounds)
		}
	}
}

// gate blocks the fsyncs of a node's segment store while closed.
type gate struct {
	dir     string
	mu      sync.Mutex
	open    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func newGate(dir string) *gate {
	return &gate{dir: filepath.Join(dir, "segments"), open: make(chan struct{}), entered: make(chan struct{})}
}

func (g *gate) rule(op vfs.Op, name string) error {
	if op != vfs.OpSync || !strings.HasPrefix(name, g.dir) {
		return nil
	}
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return nil
}

// A produce through node 2 into node 1's range is answered only after
// node 1's fsync: while that fsync is held, it waits, and a second one
// past node 2's forwarding bound is refused at once with
// too_many_requests; once the fsync goes through, the first is acked. An
// fsync that fails on node 1 fails the produce through node 2.
func TestClusterForwardedProduceWaitsForTheOwnersFsync(t *testing.T) {
	faulty := vfs.NewFaulty(vfs.OS(), nil)
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		unreplicated(nd) // node 1 alone holds the range: its fsync decides
		switch nd.id {
		case 1:
			nd.fs = faulty
		case 2:
			nd.data = broker.DataLimits{ForwardBytes: 1}
		}
	})
	tc.waitQuorumSafe()
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "acks", 1)
	if _, err := n1.Produce(ctx, "acks", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "acks", 1) // node 2 has seen node 1's segment

	g := newGate(tc.nodes[0].dir)
	faulty.SetRule(g.rule)
	acked := make(chan error, 1)
	go func() {
		_, err := n2.Produce(ctx, "acks", []broker.Record{rec("k", "1")})
		acked <- err
	}()
	select {
	case <-g.entered:
	case err := <-acked:
		t.Fatalf("the produce through node 2 answered (%v) before node 1 synced anything", err)
	case <-time.After(20 * time.Second):
		t.Fatal("node 1 never synced the forwarded produce")
	}
	select {
	case err := <-acked:
		t.Fatalf("the produce through node 2 answered (%v) while node 1's fsync is held", err)
	default:
	}
	_, err := n2.Produce(ctx, "acks", []broker.Record{rec("k", "2")})
	if !errors.Is(err, broker.ErrTooManyRequests) {
		t.Fatalf("a produce past node 2's forwarding bound: %v, want too_many_requests", err)
	}
	close(g.open)
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("the produce through node 2 after node 1's fsync: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the produce through node 2 was never answered")
	}
	if got := values(readAll(t, tc.nodes[2].b, "acks", 2)); !slices.Equal(got, []string{"0", "1"}) {
		t.Fatalf("node 3 read %v", got)
	}

	faulty.SetRule(vfs.FailOn(vfs.OpSync, filepath.Join(tc.nodes[0].dir, "segments"), nil))
	if _, err := n2.Produce(ctx, "acks", []broker.Record{rec("k", "3")}); err == nil {
		t.Fatal("a produce through node 2 acked although node 1's fsync failed")
	}
	// Node 1's store has stopped taking writes: close it without
	// asking for a clean close.
	tc.kill(tc.nodes[0])
}

// kill stops nd without checking that it closes cleanly.
func (tc *testCluster) kill(nd *clusterNode) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = nd.srv.Shutdown(ctx)
	<-nd.served
	_ = nd.b.Close()
	nd.b = nil
}

// A long poll through node 3 sleeps until node 1 appends, and wakes on
// node 1's notification: interest renewals, the fallback, are an hour
// apart here.
func TestClusterLongPollWakesOnAnotherNodesAppend(t *testing.T) {
	tc := startClusterWith(t, 3, func(nd *clusterNode) { nd.data = broker.DataLimits{InterestRenew: time.Hour} })
	ctx := t.Context()
	n1, n3 := tc.nodes[0].b, tc.nodes[2].b
	tc.createEverywhere(tc.nodes[0], "polls", 1)
	if _, err := n1.Produce(ctx, "polls", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n3, "polls", 1)
	first, err := n3.Fetch(ctx, broker.FetchRequest{Topic: "polls", Max: 10})
	if err != nil || len(first.Records) != 1 {
		t.Fatalf("first page through node 3: %v, %v", first.Records, err)
	}
	for i := 1; i <= 3; i++ {
		type result struct {
			page broker.Page
			err  error
		}
		done := make(chan result, 1)
		go func() {
			p, err := n3.Fetch(ctx, broker.FetchRequest{Topic: "polls", Cursor: first.Cursor, Max: 10, Wait: 30 * time.Second})
			done <- result{p, err}
		}()
		eventually(t, 10*time.Second, "the poll sleeps on node 3", func() error {
			if n := n3.SleepingReaders("polls"); n != 1 {
				return fmt.Errorf("%d readers asleep", n)
			}
			return nil
		})
		if _, err := n1.Produce(ctx, "polls", []broker.Record{rec("k", strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.err != nil || len(r.page.Records) != 1 || string(r.page.Records[0].Value) != strconv.Itoa(i) {
				t.Fatalf("the long poll through node 3: %v, %v", values(r.page.Records), r.err)
			}
			first.Cursor = r.page.Cursor
		case <-time.After(15 * time.Second):
			t.Fatalf("the long poll through node 3 did not wake for node 1's append %d", i)
		}
	}
}

// A subscription through node 2 receives what node 1 appends, pushed as
// node 1's notifications arrive.
func TestClusterSubscriptionReceivesAnotherNodesAppends(t *testing.T) {
	tc := startClusterWith(t, 3, func(nd *clusterNode) { nd.data = broker.DataLimits{InterestRenew: time.Hour} })
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "subs", 1)
	if _, err := n1.Produce(ctx, "subs", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "subs", 1)
	sub, err := n2.Subscribe("subs", nil, nil, 1000, 100)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	pages := make(chan broker.Page, 64)
	ran := make(chan error, 1)
	go func() { ran <- sub.Run(runCtx, func(p broker.Page) error { pages <- p; return nil }) }()
	t.Cleanup(func() { stop(); <-ran })
	var got []string
	take := func(want int, what string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for len(got) < want {
			select {
			case p := <-pages:
				got = append(got, values(p.Records)...)
			case <-deadline:
				t.Fatalf("%s: got %v", what, got)
			}
		}
	}
	take(1, "the record there before")
	for i := 1; i <= 3; i++ {
		eventually(t, 10*time.Second, "the subscription idles on node 2", func() error {
			if n := n2.SleepingReaders("subs"); n != 1 {
				return fmt.Errorf("%d readers asleep", n)
			}
			return nil
		})
		if _, err := n1.Produce(ctx, "subs", []broker.Record{rec("k", strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
		take(i+1, fmt.Sprintf("node 1's append %d", i))
	}
	if !slices.Equal(got, []string{"0", "1", "2", "3"}) {
		t.Fatalf("the subscription through node 2 got %v", got)
	}
}

// A group reads and commits through node 2 and resumes through node 3,
// the data being on node 1.
func TestClusterGroupCommitAndResumeThroughAnotherNode(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := t.Context()
	n1, n2, n3 := tc.nodes[0].b, tc.nodes[1].b, tc.nodes[2].b
	tc.createEverywhere(tc.nodes[0], "orders", 1)
	for i := range 10 {
		if _, err := n1.Produce(ctx, "orders", []broker.Record{rec("k", strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	readAll(t, n2, "orders", 10)
	group := "billing"
	p, err := n2.Fetch(ctx, broker.FetchRequest{Topic: "orders", Group: &group, Max: 4})
	if err != nil || !slices.Equal(values(p.Records), []string{"0", "1", "2", "3"}) {
		t.Fatalf("group fetch through node 2: %v, %v", values(p.Records), err)
	}
	if err := n2.Commit(ctx, "orders", group, *p.Cursor); err != nil {
		t.Fatalf("commit through node 2: %v", err)
	}
	eventually(t, 10*time.Second, "resume through node 3", func() error {
		p, err := n3.Fetch(ctx, broker.FetchRequest{Topic: "orders", Group: &group, Max: 100})
		if err != nil {
			return err
		}
		if got := values(p.Records); !slices.Equal(got, []string{"4", "5", "6", "7", "8", "9"}) {
			return fmt.Errorf("read %v", got)
		}
		return nil
	})
	// The Go client's consumer group subscription through node 3 too.
	c3 := tc.client(tc.nodes[2], "admin", "admin123")
	sub, err := c3.Subscribe(ctx, "orders", client.SubscribeOptions{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	page, err := sub.Next(pctx)
	if err != nil || len(page.Records) == 0 || string(page.Records[0].Value) != "4" {
		t.Fatalf("group subscription through node 3: %+v, %v", page.Records, err)
	}
}

// With node 1 stopped, produces into its range and reads of its segment
// through the other nodes answer unreachable (retriable), naming node 1,
// within the request's time, not hanging.
func TestClusterOwnerStoppedAnswersUnreachable(t *testing.T) {
	tc := startClusterWith(t, 3, unreplicated) // a replicated segment fails over instead
	ctx := t.Context()
	n1, n2 := tc.nodes[0].b, tc.nodes[1].b
	tc.createEverywhere(tc.nodes[0], "down", 1)
	if _, err := n1.Produce(ctx, "down", []broker.Record{rec("k", "0")}); err != nil {
		t.Fatal(err)
	}
	readAll(t, n2, "down", 1)
	tc.waitVoters(3)
	tc.stop(tc.nodes[0])

	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := n2.Produce(rctx, "down", []broker.Record{rec("k", "1")})
	var ue *broker.UnreachableError
	if !errors.As(err, &ue) || !errors.Is(err, broker.ErrUnreachable) || ue.Node != "node-1" || rctx.Err() != nil {
		t.Fatalf("produce into the stopped node's range through node 2: %v, want unreachable naming node-1 in time", err)
	}
	_, err = n2.Fetch(rctx, broker.FetchRequest{Topic: "down", Max: 10})
	if !errors.Is(err, broker.ErrUnreachable) || rctx.Err() != nil {
		t.Fatalf("fetch of the stopped node's segment through node 2: %v, want unreachable in time", err)
	}
	c3 := tc.client(tc.nodes[2], "admin", "admin123", client.WithRetry(1, 0), client.WithRequestTimeout(15*time.Second))
	if _, err := c3.Produce(ctx, "down", client.Record{Key: []byte("k"), Value: []byte("2")}); !errors.Is(err, client.ErrUnreachable) || !client.IsRetriable(err) {
		t.Fatalf("client produce through node 3: %v, want the retriable unreachable", err)
	}
	if _, err := c3.Fetch(ctx, "down", client.FetchOptions{Max: 10}); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("client fetch through node 3: %v, want unreachable", err)
	}
}

// An owner whose interest table is full answers the registrations it
// cannot record; the readers they were for still wake, on the next
// renewal, instead of sleeping out their wait.
func TestClusterInterestTableFullStillWakesReaders(t *testing.T) {
	tc := startClusterWith(t, 3, func(nd *clusterNode) {
		nd.data = broker.DataLimits{InterestEntries: 1, InterestRenew: 200 * time.Millisecond}
	})
	ctx := t.Context()
	n1, n3 := tc.nodes[0].b, tc.nodes[2].b
	topics := []string{"full-a", "full-b", "full-c"}
	type result struct {
		topic string
		recs  []broker.Record
		err   error
	}
	done := make(chan result, len(topics))
	for _, topic := range topics {
		tc.createEverywhere(tc.nodes[0], topic, 1)
		if _, err := n1.Produce(ctx, topic, []broker.Record{rec("k", "0")}); err != nil {
			t.Fatal(err)
		}
		readAll(t, n3, topic, 1)
		end, err := n3.EndCursor(topic)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			p, err := n3.Fetch(ctx, broker.FetchRequest{Topic: topic, Cursor: &end, Max: 10, Wait: 30 * time.Second})
			done <- result{topic, p.Records, err}
		}()
		eventually(t, 10*time.Second, topic+" polled on node 3", func() error {
			if n := n3.SleepingReaders(topic); n != 1 {
				return fmt.Errorf("%d readers asleep", n)
			}
			return nil
		})
	}
	for _, topic := range topics {
		if _, err := n1.Produce(ctx, topic, []broker.Record{rec("k", "1")}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(15 * time.Second)
	for range topics {
		select {
		case r := <-done:
			if r.err != nil || len(r.recs) != 1 || string(r.recs[0].Value) != "1" {
				t.Fatalf("the long poll of %s: %v, %v", r.topic, values(r.recs), r.err)
			}
		case <-deadline:
			t.Fatal("a long poll through node 3 did not wake for node 1's append")
		}
	}
}

// BenchmarkClusterProduce measures a one-record synchronous produce
// into a range written by node 1: through node 1 itself, and forwarded
// through node 2 (one extra call, with node 1's fsync in both).
func BenchmarkClusterProduce(b *testing.B) {
	tc := startCluster(b, 3)
	ctx := b.Context()
	tc.createEverywhere(tc.nodes[0], "bench", 1)
	if _, err := tc.nodes[0].b.Produce(ctx, "bench", []broker.Record{rec("k", "open")}); err != nil {
		b.Fatal(err)
	}
	readAll(b, tc.nodes[1].b, "bench", 1)
	for _, through := range []int{0, 1} {
		nd := tc.nodes[through]
		b.Run(fmt.Sprintf("through-node-%d", nd.id), func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if _, err := nd.b.Produce(ctx, "bench", []broker.Record{rec("k", strconv.Itoa(i))}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
	// A page of 1,000 records read through node 1 and through node 2.
	var recs []broker.Record
	for i := range 1000 {
		recs = append(recs, rec("k", strconv.Itoa(i)))
	}
	if _, err := tc.nodes[0].b.Produce(ctx, "bench", recs); err != nil {
		b.Fatal(err)
	}
	for _, through := range []int{0, 1} {
		nd := tc.nodes[through]
		b.Run(fmt.Sprintf("fetch-1000-through-node-%d", nd.id), func(b *testing.B) {
			for b.Loop() {
				p, err := nd.b.Fetch(ctx, broker.FetchRequest{Topic: "bench", Max: 1000})
				if err != nil || len(p.Records) != 1000 {
					b.Fatalf("%d records, %v", len(p.Records), err)
				}
			}
		})
	}
}
