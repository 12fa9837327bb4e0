package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
	"github.com/malachi-log/malachi/pkg/client/clienttest"
)

// ledger records what the members of one group processed.
type ledger struct {
	mu sync.Mutex
	// exclusive: a key handed to a member while another member is still
	// processing a page with that key is an error.
	exclusive bool
	times     map[string]int    // "key/value" -> times processed
	next      map[string]int    // key -> the value after the highest processed
	inflight  map[string]string // key -> member processing a page with it
	errs      []string
}

func newLedger(exclusive bool) *ledger {
	return &ledger{
		exclusive: exclusive, times: map[string]int{}, next: map[string]int{}, inflight: map[string]string{},
	}
}

func (l *ledger) fail(format string, args ...any) {
	if len(l.errs) < 10 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

// begin records that member was handed recs and processes them: each key
// in order (no value before the one after its highest processed), and,
// when exclusive, no key another member is still processing.
func (l *ledger) begin(member string, recs []client.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		k := string(r.Key)
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			l.fail("record %s has value %q", k, r.Value)
			continue
		}
		if other, busy := l.inflight[k]; l.exclusive && busy && other != member {
			l.fail("key %s handed to %s while %s still processes it", k, member, other)
		}
		l.inflight[k] = member
		if v > l.next[k] {
			l.fail("key %s: %s processed %d before %d", k, member, v, l.next[k])
		}
		l.next[k] = max(l.next[k], v+1)
		l.times[k+"/"+strconv.Itoa(v)]++
	}
}

// end records that member is done with its page (it polls again).
func (l *ledger) end(member string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, m := range l.inflight {
		if m == member {
			delete(l.inflight, k)
		}
	}
}

// distinct is how many different records were processed.
func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.times)
}

// check fails the test on a recorded error, on a record of the n produced
// (keys records each over keys keys) never processed, and, with once, on
// one processed twice.
func (l *ledger) check(t *testing.T, n, keys int, once bool) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
	dups := 0
	for i := range n {
		id := fmt.Sprintf("k%02d/%d", i%keys, i/keys)
		switch c := l.times[id]; {
		case c == 0:
			t.Errorf("record %s never processed", id)
		case c > 1:
			dups++
		}
	}
	if len(l.times) != n {
		t.Errorf("%d distinct records processed, %d produced", len(l.times), n)
	}
	if once && dups > 0 {
		t.Errorf("%d records processed twice", dups)
	}
	t.Logf("%d records, %d processed more than once", n, dups)
}

// groupMember runs a consumer's Poll loop until ctx ends, recording into l.
type groupMember struct {
	cs     *client.Consumer
	stop   context.CancelFunc
	done   chan error
	closed sync.Once
}

func runMember(t *testing.T, c *client.Client, name string, l *ledger) *groupMember {
	t.Helper()
	cs, err := client.NewConsumer(c, client.ConsumerOptions{
		Topic: "orders", Group: "g", Member: name, MaxRecords: 25, MaxWait: 100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	m := &groupMember{cs: cs, stop: stop, done: make(chan error, 1)}
	go func() {
		for {
			l.end(name)
			p, err := cs.Poll(ctx)
			if err != nil {
				if ctx.Err() != nil {
					err = nil
				}
				m.done <- err
				return
			}
			l.begin(name, p.Records)
		}
	}()
	t.Cleanup(func() { m.close(t) })
	return m
}

// close stops the loop and closes the consumer: its last page is
// committed and it leaves the group.
func (m *groupMember) close(t *testing.T) {
	t.Helper()
	m.closed.Do(func() {
		m.stop()
		if err := <-m.done; err != nil {
			t.Errorf("member %s: %v", m.cs.Member(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.cs.Close(ctx); err != nil {
			t.Errorf("close %s: %v", m.cs.Member(), err)
		}
	})
}

// awaitCond waits until cond holds, for at most 30 s.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	awaitCondOr(t, what, cond, func() {})
}

// awaitCondOr is awaitCond that calls explain, to log what the test sees,
// before failing on the timeout.
func awaitCondOr(t *testing.T, what string, cond func() bool, explain func()) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			explain()
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// logGroup logs what the node says of the group's members (who holds
// which ranges, last seen when) and how far the ledger got: a member the
// group still counts but that reads nothing holds its ranges until the
// node drops it for silence (GroupSessionTimeout).
func logGroup(t *testing.T, c *client.Client, l *ledger) {
	g, err := c.DescribeGroupMembers(t.Context(), "orders", "g")
	t.Logf("%d distinct records processed; generation %d, describe error %v", l.distinct(), g.Generation, err)
	for _, m := range g.Members {
		t.Logf("member %s: ranges %v, last seen %v ago", m.Name, m.Ranges, time.Since(m.LastSeen).Round(time.Millisecond))
	}
}

// afterClose checks that the group has nothing left: lag 0, and a new
// member reads nothing.
func afterClose(t *testing.T, c *client.Client) {
	t.Helper()
	if n := groupLag(t, c, "orders", "g"); n != 0 {
		t.Fatalf("lag %d after every member closed", n)
	}
	cs := newConsumer(t, c, client.ConsumerOptions{Topic: "orders", Group: "g", Member: "late"})
	pollNothing(t, cs, 500*time.Millisecond)
}

// TestConsumerGroupRebalances: members join and leave while records
// flow. Every record is processed exactly once, each key in order, and
// never by two members at once.
//
// The node drops a silent member after 5 s here (GroupSessionTimeout),
// not the default 30 s: a member's fetch sent just before its Close may
// reach the node after the leave and join it again (Consumer.shutdown),
// and its ranges then wait until the node drops it. At 30 s that took
// the whole of awaitCond's wait.
func TestConsumerGroupRebalances(t *testing.T) {
	for _, size := range []int{2, 3} {
		t.Run(fmt.Sprintf("members=%d", size), func(t *testing.T) {
			_, c := start(t, clienttest.WithGroupSessionTimeout(5*time.Second))
			createTopic(t, c, "orders", client.WithRanges(8))
			const keys, batches, per = 16, 6, 80
			l := newLedger(true)
			var ms []*groupMember
			for i := range size {
				ms = append(ms, runMember(t, c, fmt.Sprintf("m%d", i), l))
			}
			for b := range batches {
				produce(t, c, "orders", keyedBy(per, keys, b*per/keys)...)
				switch b {
				case 2: // one more joins
					ms = append(ms, runMember(t, c, "late", l))
				case 4: // the first leaves
					ms[0].close(t)
					ms = ms[1:]
				}
				awaitCondOr(t, fmt.Sprintf("the group to process batch %d", b),
					func() bool { return l.distinct() == (b+1)*per }, func() { logGroup(t, c, l) })
			}
			for _, m := range ms {
				m.close(t)
			}
			l.check(t, batches*per, keys, true)
			afterClose(t, c)
		})
	}
}

// TestConsumerGroupAcrossRestart: two and three members of a group while
// the node restarts under them on the same data directory. They join
// again by themselves; every record is processed, each key in order, and
// once they closed cleanly nothing is left for the group.
func TestConsumerGroupAcrossRestart(t *testing.T) {
	for _, size := range []int{2, 3} {
		t.Run(fmt.Sprintf("members=%d", size), func(t *testing.T) {
			n, c := start(t)
			createTopic(t, c, "orders", client.WithRanges(8))
			const keys, per = 16, 160
			// A node restart forgets which member holds what, so two members
			// may process a page at once: at least once, in order per key.
			l := newLedger(false)
			var ms []*groupMember
			for i := range size {
				ms = append(ms, runMember(t, c, fmt.Sprintf("m%d", i), l))
			}
			produce(t, c, "orders", keyedBy(per, keys, 0)...)
			awaitCond(t, "records before the restart", func() bool { return l.distinct() >= per/2 })
			n.Restart(t)
			produceRetrying(t, c, keyedBy(per, keys, per/keys))
			awaitCond(t, "every record after the restart", func() bool { return l.distinct() == 2*per })
			for _, m := range ms {
				m.close(t)
			}
			l.check(t, 2*per, keys, false)
			afterClose(t, c)
		})
	}
}

// produceRetrying produces recs, waiting out a node that is still
// coming back.
func produceRetrying(t *testing.T, c *client.Client, recs []client.Record) {
	t.Helper()
	var err error
	awaitCond(t, "a produce after the restart", func() bool {
		var n int
		n, err = c.Produce(t.Context(), "orders", recs...)
		if err != nil && !client.IsRetriable(err) && !errors.Is(err, client.ErrRequestTimeout) {
			t.Fatalf("produce: %v", err)
		}
		return err == nil && n == len(recs)
	})
}

// TestConsumerRejoinsAfterConnectionLoss: a node restart breaks a
// member's connection while it waits in Poll; Poll goes on, and the
// records produced after come.
func TestConsumerRejoinsAfterConnectionLoss(t *testing.T) {
	n, c := start(t, clienttest.WithGroupSessionTimeout(5*time.Second))
	createTopic(t, c, "orders", client.WithRanges(2))
	produce(t, c, "orders", keyedBy(10, 2, 0)...)
	cs := newConsumer(t, c, client.ConsumerOptions{Topic: "orders", Group: "g", Member: "m"})
	pollN(t, cs, 10)
	if err := cs.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	type result struct {
		recs []client.Record
		err  error
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := cs.Poll(ctx)
		got <- result{p.Records, err}
	}()
	n.Restart(t)
	produceRetrying(t, c, keyedBy(4, 2, 5))
	r := <-got
	if r.err != nil {
		t.Fatalf("poll across the restart: %v", r.err)
	}
	if len(r.recs) == 0 || string(r.recs[0].Value) != "5" {
		t.Fatalf("poll across the restart read %d records, first %v", len(r.recs), r.recs)
	}
}
