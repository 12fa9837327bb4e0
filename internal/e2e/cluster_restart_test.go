package e2e

// Restart recovery (R3): a node that restarts has lost what it knew of
// the commit watermark of the active segments it keeps, and the node
// that could tell it may be gone too. Until a range's end is learned
// again, every read of the range through every live node must answer a
// retriable reason or the whole acknowledged history: never a history
// that stops short of the last acknowledged record, which a reader
// would take for "caught up" and whose cursor would then skip the
// missing records.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// pause stops the node's process where it is (SIGSTOP): it keeps its
// sockets and state, answers nothing, and resumes with what it knew.
func (nd *clusterNode) pause() { nd.sendNoWait(syscall.SIGSTOP) }

// resume continues a paused node (SIGCONT).
func (nd *clusterNode) resume() { nd.sendNoWait(syscall.SIGCONT) }

func (nd *clusterNode) sendNoWait(sig syscall.Signal) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil {
		nd.cmd.Process.Signal(sig)
	}
}

// probeTimeout bounds one probe request: a node that does not answer
// within it is counted, not judged (it may be starting).
const probeTimeout = 10 * time.Second

// restartProbe reads a topic from its start through each of a set of
// nodes, again and again, while they restart and recover, and judges
// every read: a retriable refusal, or every acknowledged record once and
// each producer's values of a key in order. A read that ends short is
// followed by long polls with its cursor, to say whether the missing
// records would ever reach that reader.
type restartProbe struct {
	c     *testCluster
	topic string
	ps    []*faultProducer

	mu         sync.Mutex
	reasons    map[string]int // refusals by node and reason
	full       map[int]bool   // nodes that served the whole history
	answered   map[int]int    // reads each node answered, refused or served
	violations []string       // at most maxProbeViolations
	stop, done chan struct{}
}

const maxProbeViolations = 10

func startRestartProbe(c *testCluster, topic string, ps []*faultProducer, ids ...int) *restartProbe {
	pr := &restartProbe{c: c, topic: topic, ps: ps, reasons: map[string]int{}, full: map[int]bool{}, answered: map[int]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go pr.run(ids) // owned by pr: ends on stop
	return pr
}

// run reads through each node of ids on its own loop, so that a node
// that does not answer (paused, starting) holds up only its own reads.
func (pr *restartProbe) run(ids []int) {
	defer close(pr.done)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { pr.loop(ctx, id) }) // ends on stop
	}
	<-pr.stop
	cancel()
	wg.Wait()
}

func (pr *restartProbe) loop(ctx context.Context, id int) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pr.probe(ctx, id)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probe is one read of the whole topic through node id, on a new
// connection (the node may have restarted since the last one).
func (pr *restartProbe) probe(ctx context.Context, id int) {
	cl, err := client.Dial(ctx, pr.c.node(id).client, client.WithCredentials("admin", "admin123"),
		client.WithRequestTimeout(probeTimeout), client.WithRetry(1, 50*time.Millisecond))
	if err != nil {
		return // not answering yet
	}
	defer cl.Close()
	var recs []client.Record
	cursor := ""
	for {
		page, err := cl.Fetch(ctx, pr.topic, client.FetchOptions{Cursor: cursor, Max: 1000})
		if err != nil {
			pr.refused(ctx, id, err)
			return
		}
		if len(page.Records) == 0 {
			cursor = page.Cursor
			break
		}
		recs = append(recs, page.Records...)
		cursor = page.Cursor
	}
	pr.mu.Lock()
	pr.answered[id]++
	pr.mu.Unlock()
	missing, err := checkRead(recs, pr.ps)
	switch {
	case err != nil:
		pr.violate(fmt.Sprintf("node %d: %v", id, err))
	case missing != "":
		pr.violate(fmt.Sprintf("node %d answered a history of %d records ending short, as caught up: %s; %s",
			id, len(recs), missing, pr.afterShort(ctx, cl, cursor, pr.firstMissing(recs))))
	default:
		pr.mu.Lock()
		pr.full[id] = true
		pr.mu.Unlock()
	}
}

// waitReasons are the answers a reader may get while a range's end is
// unknown: the broker's retriable refusals that mean "not yet" (R3).
// shutting_down is what a node answers before it has started.
var waitReasons = []string{"metadata_unavailable", "retry", "no_quorum", "shutting_down"}

// refused judges a failed read: one of waitReasons, a connection lost
// to a node being killed, or the client giving up on a node that is
// starting are allowed; anything else is a violation.
func (pr *restartProbe) refused(ctx context.Context, id int, err error) {
	if ctx.Err() != nil {
		return
	}
	pr.mu.Lock()
	pr.reasons[fmt.Sprintf("node %d: %s", id, reason(err))]++
	if !errors.Is(err, client.ErrRequestTimeout) {
		pr.answered[id]++
	}
	pr.mu.Unlock()
	var e *client.Error
	if errors.As(err, &e) && !slices.Contains(waitReasons, e.Reason) {
		pr.violate(fmt.Sprintf("node %d refused a read with %v, not one of %v", id, err, waitReasons))
	}
	if !errors.As(err, &e) && !errors.Is(err, client.ErrDisconnected) && !errors.Is(err, client.ErrRequestTimeout) {
		pr.violate(fmt.Sprintf("node %d: a read failed with %v", id, err))
	}
}

// afterShort long-polls from the cursor a short read ended at and says
// whether the first missing value arrives: a reader with that cursor
// must still receive it (T1).
func (pr *restartProbe) afterShort(ctx context.Context, cl *client.Client, cursor, want string) string {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		page, err := cl.Fetch(ctx, pr.topic, client.FetchOptions{Cursor: cursor, Max: 1000, Wait: 2 * time.Second})
		if err != nil {
			continue
		}
		for _, r := range page.Records {
			if string(r.Value) == want {
				return "a long poll with its cursor received " + want + " later"
			}
		}
		cursor = page.Cursor
	}
	return "long polls with its cursor never received " + want
}

// firstMissing names the lowest acknowledged value of the first producer
// missing from recs.
func (pr *restartProbe) firstMissing(recs []client.Record) string {
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r.Value)] = true
	}
	for _, p := range pr.ps {
		p.mu.Lock()
		vs := make([]int, 0, len(p.acked))
		for v := range p.acked {
			vs = append(vs, v)
		}
		p.mu.Unlock()
		slices.Sort(vs)
		for _, v := range vs {
			if val := p.name + "/" + strconv.Itoa(v); !seen[val] {
				return val
			}
		}
	}
	return ""
}

func (pr *restartProbe) violate(s string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(pr.violations) < maxProbeViolations {
		pr.violations = append(pr.violations, s)
	}
}

// servedFull reports nil once every node of ids served the whole history.
func (pr *restartProbe) servedFull(ids ...int) func() error {
	return func() error {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if len(pr.violations) > 0 {
			return nil // reported by finish
		}
		for _, id := range ids {
			if !pr.full[id] {
				return fmt.Errorf("node %d has not served the whole history yet (refusals so far: %v)", id, pr.reasons)
			}
		}
		return nil
	}
}

// answeredReads reports nil once node id answered n reads.
func (pr *restartProbe) answeredReads(id, n int) func() error {
	return func() error {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if got := pr.answered[id]; got < n {
			return fmt.Errorf("node %d answered %d reads (refusals so far: %v)", id, got, pr.reasons)
		}
		return nil
	}
}

// finish stops the probe and fails the test on any violation.
func (pr *restartProbe) finish(t *testing.T) {
	t.Helper()
	close(pr.stop)
	select {
	case <-pr.done:
	case <-time.After(2 * probeTimeout):
		t.Fatal("the read probe did not stop")
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	t.Logf("reads refused while the range's end was unknown: %v", pr.reasons)
	for _, v := range pr.violations {
		t.Error(v)
	}
}

// checkRead checks one read of the history: an error for a value read
// twice, never sent, or out of its producer's order on its key; and the
// first acknowledged value missing, if any.
func checkRead(recs []client.Record, ps []*faultProducer) (string, error) {
	byName := map[string]*faultProducer{}
	for _, p := range ps {
		byName[p.name] = p
	}
	seen := map[string]bool{}
	last := map[string]int{}
	for _, r := range recs {
		val := string(r.Value)
		name, num, ok := strings.Cut(val, "/")
		v, err := strconv.Atoi(num)
		p := byName[name]
		if !ok || err != nil || p == nil {
			continue // the record that opened the topic
		}
		if seen[val] {
			return "", fmt.Errorf("%s read twice", val)
		}
		seen[val] = true
		k := name + " " + string(r.Key)
		if prev, ok := last[k]; ok && prev >= v {
			return "", fmt.Errorf("key %s: %s read after %s/%d", r.Key, val, name, prev)
		}
		last[k] = v
		p.mu.Lock()
		sent := v < len(p.attempts)
		p.mu.Unlock()
		if !sent {
			return "", fmt.Errorf("%s read, never sent", val)
		}
	}
	for _, p := range ps {
		p.mu.Lock()
		n, read := len(p.acked), 0
		for v := range p.acked {
			if seen[p.name+"/"+strconv.Itoa(v)] {
				read++
			}
		}
		p.mu.Unlock()
		if read < n {
			return fmt.Sprintf("%d of %s's %d acknowledged records missing", n-read, p.name, n), nil
		}
	}
	return "", nil
}

// waitAcked waits until p has n more records acknowledged.
func waitAcked(t *testing.T, p *faultProducer, n int, what string) {
	t.Helper()
	from := time.Now()
	within(t, 30*time.Second, what, func() error {
		if got := p.ackedSince(from); got < n {
			return fmt.Errorf("%d acked", got)
		}
		return nil
	})
}

// TestClusterRestartFreshestTailWaits: follower F2 of the active
// segment is paused (SIGSTOP) and more records are acknowledged by the
// primary and follower F1 alone; then the primary and F1 are killed with
// SIGKILL. F1, the only live holder of the tail, restarts with its
// watermark forgotten while the primary is dead and F2 paused: every
// read through it answers a retriable reason, not the part of its copy
// it can vouch for. F2 then resumes with a watermark behind the
// acknowledged end: reads through either answer a retriable reason or
// the whole acknowledged history, until the range fails over and both
// serve it all. At the end, with the old primary back, every node reads
// the same whole history.
func TestClusterRestartFreshestTailWaits(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "restart-tail"
	replicas := replicatedTopic(t, ctx, c, topic)
	if len(replicas) != 3 {
		t.Fatalf("the active segment's replicas are %v, want three", replicas)
	}
	primary, f1, f2 := replicas[0], replicas[1], replicas[2]
	t.Logf("replicas %v: primary node %d; node %d keeps the tail; node %d is paused", replicas, primary, f1, f2)

	p := startProducer(ctx, c, topic, primary)
	waitAcked(t, p, 100, "produces before the pause")
	c.node(f2).pause()
	waitAcked(t, p, 100, fmt.Sprintf("produces acknowledged by nodes %d and %d alone", primary, f1))
	c.node(primary).kill()
	p.finish(t)
	c.node(f1).kill()

	pr := startRestartProbe(c, topic, []*faultProducer{p}, f1, f2)
	c.restart(f1)
	alone := time.Now()
	within(t, 60*time.Second, fmt.Sprintf("node %d answers reads alone", f1), pr.answeredReads(f1, 2))
	t.Logf("node %d answered 2 reads within %s of its restart", f1, time.Since(alone).Round(time.Millisecond))
	c.node(f2).resume()
	resumed := time.Now()
	within(t, 60*time.Second, fmt.Sprintf("nodes %d and %d serve the whole history", f1, f2), pr.servedFull(f1, f2))
	pr.finish(t)
	t.Logf("probe ended (whole history from both, or a violation) %s after node %d's resumption; failures of the producer: %v",
		time.Since(resumed).Round(time.Millisecond), f2, failures(t, []*faultProducer{p}))
	if t.Failed() {
		return
	}
	c.restart(primary)
	sameEverywhere(t, ctx, c, topic, []*faultProducer{p}, f1, f2, primary)
}

// TestClusterRestartAllReadsWait: every node is killed with SIGKILL
// mid-stream and all three start again together. Each is read from the
// moment it answers: a retriable reason or the whole acknowledged
// history, never a short one; then every node reads the same history.
func TestClusterRestartAllReadsWait(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "restart-all"
	replicas := replicatedTopic(t, ctx, c, topic)
	t.Logf("replicas %v", replicas)
	ps := []*faultProducer{startProducer(ctx, c, topic, 1), startProducer(ctx, c, topic, 2)}
	from := time.Now()
	within(t, 30*time.Second, "produces before the kills", func() error {
		if n := ackedSince(ps, from); n < 300 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})
	for _, nd := range c.nodes {
		nd.kill()
	}
	for _, p := range ps {
		p.finish(t)
	}

	pr := startRestartProbe(c, topic, ps, 1, 2, 3)
	for _, nd := range c.nodes {
		c.launch(nd, joinOthers(c, nd))
	}
	for _, nd := range c.nodes {
		c.waitReady(nd)
	}
	took := within(t, 60*time.Second, "every node serves the whole history", pr.servedFull(1, 2, 3))
	pr.finish(t)
	t.Logf("probe ended (whole history from every node, or a violation) %s after the restarts; producers' failures: %v",
		took.Round(time.Millisecond), failures(t, ps))
	if t.Failed() {
		return
	}
	sameEverywhere(t, ctx, c, topic, ps, 1, 2, 3)
}

// joinOthers is the gossip addresses of every node but nd.
func joinOthers(c *testCluster, nd *clusterNode) []string {
	var join []string
	for _, o := range c.nodes {
		if o != nd {
			join = append(join, o.gossipA)
		}
	}
	return join
}
