package e2e

// Faults under a replicated topic in a cluster of three real processes:
// two producers ack continuously, one through node 1 and one through
// node 2, into one topic with three replicas, on keys they share, while
// nodes are killed with SIGKILL and restarted. The history is then read
// back through every node. In every case: no acknowledged record lost
// (W1, W6), no record read twice, each producer's records of a key read
// in the order it sent them, and the same history through every node.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// metadataTimeout is the nodes' bound on each metadata operation
// (broker.ClusterConfig.MetadataTimeout's default, which these nodes
// run with); a call to another node (DataLimits.CallTimeout) defaults
// to it too.
const metadataTimeout = 5 * time.Second

// answerBound is the longest a produce through a node that cannot serve
// it may wait for its refusal: one failover attempt of its range and one
// call to the node leading it, each bounded by metadataTimeout.
const answerBound = 2 * metadataTimeout

// faultKeys is how many keys the producers share: each key's records
// interleave both producers' values.
const faultKeys = 5

// produceTimeout is the producers' request timeout: the client's
// default, six times the broker's 5 s bound on each metadata write a
// produce makes (--metadata-timeout).
const produceTimeout = client.DefaultRequestTimeout

// attempt is one produce and what the producer was told.
type attempt struct {
	v          int
	start, end time.Time
	err        error
}

// faultProducer sends one record at a time through one node, each with
// a single attempt: a failed produce the broker may have stored is not
// sent again, so it may be read once or not at all, never twice.
type faultProducer struct {
	name string // prefixes its values: "p1/17"
	via  int
	cl   *client.Client

	mu       sync.Mutex
	attempts []attempt
	acked    map[int]bool
	stop     chan struct{}
	done     chan struct{}
}

// maxAttempts bounds what a producer records; it stops there.
const maxAttempts = 200_000

func startProducer(ctx context.Context, c *testCluster, topic string, via int) *faultProducer {
	p := &faultProducer{
		name: "p" + strconv.Itoa(via), via: via,
		cl:    c.dial(ctx, via, "admin", "admin123", produceTimeout, 1),
		acked: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go p.run(ctx, topic) // owned by p: ends on stop
	return p
}

func (p *faultProducer) run(ctx context.Context, topic string) {
	defer close(p.done)
	for v := 0; v < maxAttempts; v++ {
		select {
		case <-p.stop:
			return
		default:
		}
		start := time.Now()
		rec := client.Record{Key: []byte("k" + strconv.Itoa(v%faultKeys)), Value: []byte(p.name + "/" + strconv.Itoa(v))}
		_, err := p.cl.Produce(ctx, topic, rec)
		p.mu.Lock()
		p.attempts = append(p.attempts, attempt{v: v, start: start, end: time.Now(), err: err})
		if err == nil {
			p.acked[v] = true
		}
		p.mu.Unlock()
		if err != nil {
			// A dead node refuses the dial at once: back off rather
			// than spin.
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (p *faultProducer) finish(t *testing.T) {
	t.Helper()
	close(p.stop)
	select {
	case <-p.done:
	case <-time.After(2 * produceTimeout):
		t.Fatalf("producer through node %d did not stop", p.via)
	}
}

// ackedSince counts the produces started at or after from and acked.
func (p *faultProducer) ackedSince(from time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.attempts {
		if a.err == nil && !a.start.Before(from) {
			n++
		}
	}
	return n
}

// since returns the attempts started at or after from and answered.
func (p *faultProducer) since(from time.Time) []attempt {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []attempt
	for _, a := range p.attempts {
		if !a.start.Before(from) {
			out = append(out, a)
		}
	}
	return out
}

func ackedSince(ps []*faultProducer, from time.Time) int {
	n := 0
	for _, p := range ps {
		n += p.ackedSince(from)
	}
	return n
}

// describe lists attempts with their times relative to from.
func describe(as []attempt, from time.Time) string {
	var b strings.Builder
	for _, a := range as {
		what := "acked"
		if a.err != nil {
			what = a.err.Error()
		}
		fmt.Fprintf(&b, "[#%d sent at +%s, answered after %s: %s] ", a.v,
			a.start.Sub(from).Round(time.Millisecond), a.end.Sub(a.start).Round(time.Millisecond), what)
	}
	return b.String()
}

// reason names what a failed produce was told: the broker's reason, or
// the client's own condition.
func reason(err error) string {
	var e *client.Error
	switch {
	case errors.As(err, &e):
		return e.Reason
	case errors.Is(err, client.ErrRequestTimeout):
		return "client_timeout"
	case errors.Is(err, client.ErrDisconnected):
		return "disconnected"
	}
	return err.Error()
}

// failures sums the producers' failures by reason, and fails the test
// on one that is not retriable. A produce the client gave up on
// (client_timeout) is counted, not judged: whether one was allowed
// depends on the fault.
func failures(t *testing.T, ps []*faultProducer) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range ps {
		for _, a := range p.since(time.Time{}) {
			if a.err == nil {
				continue
			}
			out[p.name+":"+reason(a.err)]++
			if !client.IsRetriable(a.err) && !errors.Is(a.err, client.ErrRequestTimeout) {
				t.Errorf("%s/%d through node %d failed with %v, not a retriable reason", p.name, a.v, p.via, a.err)
			}
		}
	}
	return out
}

// readTopic reads topic from the start through cl until a page comes
// back empty.
func readTopic(ctx context.Context, cl *client.Client, topic string) ([]client.Record, error) {
	var out []client.Record
	cursor := ""
	for {
		page, err := cl.Fetch(ctx, topic, client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			return nil, err
		}
		if len(page.Records) == 0 {
			return out, nil
		}
		out = append(out, page.Records...)
		cursor = page.Cursor
	}
}

// historyOf checks recs, all of topic read through one node: no value
// read twice, none never sent, each producer's values of a key
// increasing (a violation fails the test at once). It returns each
// key's values in the order read, or an error while an acknowledged
// value is missing (a copy may learn the watermark a moment late).
func historyOf(t *testing.T, id int, recs []client.Record, ps []*faultProducer) (map[string][]string, error) {
	t.Helper()
	byName := map[string]*faultProducer{}
	for _, p := range ps {
		byName[p.name] = p
	}
	seen := map[string]bool{}
	last := map[string]int{} // producer and key: last value read
	byKey := map[string][]string{}
	for _, r := range recs {
		val, key := string(r.Value), string(r.Key)
		name, num, ok := strings.Cut(val, "/")
		p := byName[name]
		v, err := strconv.Atoi(num)
		if !ok || p == nil || err != nil {
			continue // the record that opened the topic
		}
		if seen[val] {
			t.Fatalf("node %d reads %s twice", id, val)
		}
		seen[val] = true
		if prev, ok := last[name+" "+key]; ok && prev >= v {
			t.Fatalf("node %d reads key %s: %s/%d after %s/%d", id, key, name, v, name, prev)
		}
		last[name+" "+key] = v
		byKey[key] = append(byKey[key], val)
		p.mu.Lock()
		sent := v < len(p.attempts)
		p.mu.Unlock()
		if !sent {
			t.Fatalf("node %d reads %s, which was never sent", id, val)
		}
	}
	for _, p := range ps {
		p.mu.Lock()
		missing := -1
		for v := range p.acked {
			if !seen[p.name+"/"+strconv.Itoa(v)] && (missing < 0 || v < missing) {
				missing = v
			}
		}
		n := len(p.acked)
		p.mu.Unlock()
		if missing >= 0 {
			return nil, fmt.Errorf("node %d: acknowledged %s/%d not read (%d of %s's %d acked read so far, %d records in all)",
				id, p.name, missing, countPrefix(seen, p.name+"/"), p.name, n, len(recs))
		}
	}
	return byKey, nil
}

func countPrefix(seen map[string]bool, prefix string) int {
	n := 0
	for v := range seen {
		if strings.HasPrefix(v, prefix) {
			n++
		}
	}
	return n
}

// sameEverywhere reads topic through each node of ids until it holds
// every acknowledged value, checks each read, and checks that every
// node reads each key's values alike.
func sameEverywhere(t *testing.T, ctx context.Context, c *testCluster, topic string, ps []*faultProducer, ids ...int) {
	t.Helper()
	var first map[string][]string
	for _, id := range ids {
		cl := c.admin(ctx, id)
		var got map[string][]string
		took := within(t, 60*time.Second, fmt.Sprintf("every acknowledged record through node %d", id), func() error {
			recs, err := readTopic(ctx, cl, topic)
			if err != nil {
				return err
			}
			got, err = historyOf(t, id, recs, ps)
			return err
		})
		n := 0
		for _, vs := range got {
			n += len(vs)
		}
		t.Logf("node %d reads %d records, every acknowledged one among them, within %s", id, n, took.Round(time.Millisecond))
		if first == nil {
			first = got
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(first)) {
			if !slices.Equal(first[k], got[k]) {
				t.Fatalf("key %s: node %d reads %d values, node %d %d; first difference at %d: %s",
					k, ids[0], len(first[k]), id, len(got[k]), firstDiff(first[k], got[k]), describeDiff(first[k], got[k]))
			}
		}
		if len(got) != len(first) {
			t.Fatalf("node %d reads %d keys, node %d %d", id, len(got), ids[0], len(first))
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func describeDiff(a, b []string) string {
	i := firstDiff(a, b)
	at := func(s []string) string {
		if i < len(s) {
			return s[i]
		}
		return "(end)"
	}
	return at(a) + " against " + at(b)
}

// replicatedTopic creates topic with three replicas through node 1,
// opens its first segment with a record, and waits until every node
// lists it. It returns the active segment's replica set, primary first.
func replicatedTopic(t *testing.T, ctx context.Context, c *testCluster, topic string) []int {
	t.Helper()
	a1 := c.admin(ctx, 1)
	if err := a1.CreateTopic(ctx, topic, client.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.Produce(ctx, topic, client.Record{Key: []byte("k0"), Value: []byte("open")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{2, 3} {
		within(t, replicated, fmt.Sprintf("node %d lists %s", id, topic), topicSeen(ctx, c.admin(ctx, id), topic))
	}
	return activeReplicas(t, ctx, a1, topic)
}

// activeReplicas is the replica set of topic's active segment (one
// range), primary first, as cl's node describes it.
func activeReplicas(t *testing.T, ctx context.Context, cl *client.Client, topic string) []int {
	t.Helper()
	var ids []int
	within(t, replicated, "the active segment of "+topic, func() error {
		d, err := cl.DescribeTopic(ctx, topic)
		if err != nil {
			return err
		}
		ids = nil
		for _, r := range d.ActiveRanges() {
			for _, s := range r.Segments {
				if !s.Active {
					continue
				}
				for _, name := range s.Replicas {
					id, err := strconv.Atoi(strings.TrimPrefix(name, "node-"))
					if err != nil {
						return fmt.Errorf("replica %q: %v", name, err)
					}
					ids = append(ids, id)
				}
				return nil
			}
		}
		return errors.New("no active segment yet")
	})
	return ids
}

// TestClusterReplicatedFollowerKilled: a follower of the active segment
// is killed with SIGKILL mid-stream. Two of three still fsync, so the
// producers' acks go on; once the follower is back, every node reads
// the same whole history.
func TestClusterReplicatedFollowerKilled(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "faults-follower"
	replicas := replicatedTopic(t, ctx, c, topic)
	if len(replicas) != 3 {
		t.Fatalf("the active segment's replicas are %v, want three", replicas)
	}
	follower := slices.Max(replicas[1:]) // node 3 when it is one: it takes no producer
	t.Logf("replicas %v: primary node %d; killing follower node %d", replicas, replicas[0], follower)

	ps := []*faultProducer{startProducer(ctx, c, topic, 1), startProducer(ctx, c, topic, 2)}
	start := time.Now()
	within(t, 60*time.Second, "produces before the kill", func() error {
		if n := ackedSince(ps, start); n < 150 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})
	c.node(follower).kill()
	killed := time.Now()
	took := within(t, 60*time.Second, fmt.Sprintf("produces with follower node %d killed", follower), func() error {
		if n := ackedSince(ps, killed); n < 300 {
			return fmt.Errorf("%d acked since the kill", n)
		}
		return nil
	})
	t.Logf("300 acks within %s of the kill", took.Round(time.Millisecond))
	for _, p := range ps {
		if p.via != follower && p.ackedSince(killed) == 0 {
			t.Errorf("the producer through live node %d had no ack after the follower's kill", p.via)
		}
	}

	c.restart(follower)
	back := time.Now()
	within(t, 60*time.Second, "produces after the follower's return", func() error {
		for _, p := range ps {
			if n := p.ackedSince(back); n < 50 {
				return fmt.Errorf("%s through node %d: %d acked since the restart", p.name, p.via, n)
			}
		}
		return nil
	})
	for _, p := range ps {
		p.finish(t)
	}
	failed := failures(t, ps)
	t.Logf("failures: %v; active segment now on %v", failed, activeReplicas(t, ctx, c.admin(ctx, 1), topic))
	for _, p := range ps {
		if n := failed[p.name+":client_timeout"]; n > 0 {
			t.Errorf("%d produces through node %d were not answered within the client's %s timeout with a quorum up", n, p.via, produceTimeout)
		}
	}
	sameEverywhere(t, ctx, c, topic, ps, 3, 1, 2)
}

// TestClusterReplicatedTwoOfThreeKilled: the primary of the active
// segment and one follower are killed with SIGKILL mid-stream; the
// survivor is a follower that takes a producer. Produces through it fail
// with a retriable reason within the client's timeout and none is
// acknowledged (W1: no quorum can fsync it); nothing acknowledged before
// is lost. The killed follower returns: the segment fails over on the
// two followers' fence answers (W6) and produces are acknowledged again.
// The survivor and the returned follower, then every node once the old
// primary is back too, read the same whole history.
func TestClusterReplicatedTwoOfThreeKilled(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "faults-two-of-three"
	replicas := replicatedTopic(t, ctx, c, topic)
	if len(replicas) != 3 {
		t.Fatalf("the active segment's replicas are %v, want three", replicas)
	}
	primary := replicas[0]
	survivor := 1 // a follower that takes a producer
	if primary == 1 {
		survivor = 2
	}
	returns := c.others(primary, survivor)[0]
	t.Logf("replicas %v: killing primary node %d and follower node %d; node %d survives", replicas, primary, returns, survivor)

	ps := []*faultProducer{startProducer(ctx, c, topic, 1), startProducer(ctx, c, topic, 2)}
	live := ps[survivor-1]
	start := time.Now()
	within(t, 60*time.Second, "produces before the kills", func() error {
		if n := ackedSince(ps, start); n < 150 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})
	c.node(primary).kill()
	c.node(returns).kill()
	down := time.Now()
	// Produces go on until one sent two metadata timeouts after the
	// kills is answered: by then the survivor has tried to fail the
	// range over and failed (no quorum of fence answers, no metadata
	// quorum), and the produces after that attempt are answered too.
	within(t, 3*produceTimeout, fmt.Sprintf("an answered produce through node %d sent %s after the kills", survivor, 2*metadataTimeout), func() error {
		as := live.since(down)
		if len(as) < 1 || as[len(as)-1].start.Sub(down) < 2*metadataTimeout {
			return fmt.Errorf("%d answered: %s", len(as), describe(as, down))
		}
		return nil
	})
	seen := map[string]int{}
	for _, a := range live.since(down) {
		took := a.end.Sub(a.start)
		switch {
		case a.err == nil:
			t.Fatalf("%s/%d was acknowledged through node %d with nodes %d and %d killed %s before it was sent (W1)",
				live.name, a.v, survivor, primary, returns, a.start.Sub(down))
		case errors.Is(a.err, client.ErrRequestTimeout):
			t.Errorf("%s/%d through node %d without a quorum: no answer within the client's %s timeout; a minority must answer a retriable reason in time, not hang (C3)", live.name, a.v, survivor, produceTimeout)
		case !client.IsRetriable(a.err):
			t.Errorf("%s/%d through node %d without a quorum: %v after %s, not a retriable reason", live.name, a.v, survivor, a.err, took)
		case took > answerBound:
			t.Errorf("%s/%d through node %d without a quorum: %v after %s; a produce waits at most one failover attempt and one call, %s (C3)",
				live.name, a.v, survivor, a.err, took.Round(time.Millisecond), answerBound)
		}
		seen[fmt.Sprintf("%s (%s)", reason(a.err), took.Round(100*time.Millisecond))]++
	}
	t.Logf("produces through node %d with two of three killed: %v: %s", survivor, seen, describe(live.since(down), down))

	c.restart(returns)
	back := time.Now()
	took := within(t, 90*time.Second, fmt.Sprintf("produces after node %d's return", returns), func() error {
		if n := live.ackedSince(back); n < 100 {
			return fmt.Errorf("%d acked through node %d since node %d's return", n, survivor, returns)
		}
		return nil
	})
	t.Logf("100 produces through node %d acknowledged within %s of node %d's return", survivor, took.Round(time.Millisecond), returns)
	for _, p := range ps {
		p.finish(t)
	}
	now := activeReplicas(t, ctx, c.admin(ctx, survivor), topic)
	t.Logf("failures: %v; active segment now on %v", failures(t, ps), now)
	if now[0] == primary {
		t.Errorf("the active segment is still led by the killed primary node %d: %v", primary, now)
	}
	sameEverywhere(t, ctx, c, topic, ps, survivor, returns)
	c.restart(primary)
	sameEverywhere(t, ctx, c, topic, ps, primary, survivor, returns)
}
