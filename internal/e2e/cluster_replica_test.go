package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestClusterReplicatedPrimaryKilled: a producer writes through node 2
// into a topic whose segment node 1 leads (three replicas); node 1 is
// killed with SIGKILL mid-stream. The range fails over to the survivors
// and the producer goes on; produces caught in between fail with a
// retriable reason and are not sent again. Read back through node 3,
// every acknowledged record is there once, no record twice, each key's
// records in order.
func TestClusterReplicatedPrimaryKilled(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "replicated-kill"
	a1 := c.admin(ctx, 1)
	if err := a1.CreateTopic(ctx, topic, client.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.Produce(ctx, topic, client.Record{Key: []byte("k0"), Value: []byte("-1")}); err != nil {
		t.Fatal(err)
	}
	a3 := c.admin(ctx, 3)
	within(t, 20*time.Second, "node 2 and 3 see the topic", func() error {
		if err := topicSeen(ctx, a3, topic)(); err != nil {
			return err
		}
		return topicSeen(ctx, c.admin(ctx, 2), topic)()
	})

	// One attempt per produce: a retried produce that the failed
	// primary may have stored could be stored twice.
	p := c.dial(ctx, 2, "admin", "admin123", 5*time.Second, 1)
	var (
		mu     sync.Mutex
		acked  = map[int]bool{}
		failed = map[int]error{}
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	go func() {
		defer close(done)
		for v := 0; ; v++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := p.Produce(ctx, topic, client.Record{Key: []byte("k" + strconv.Itoa(v%8)), Value: []byte(strconv.Itoa(v))})
			mu.Lock()
			if err == nil {
				acked[v] = true
			} else {
				failed[v] = err
			}
			mu.Unlock()
		}
	}()
	within(t, 60*time.Second, "produces before the kill", func() error {
		if n := count(); n < 200 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})
	c.node(1).kill()
	before := count()
	took := within(t, 90*time.Second, "produces after the kill", func() error {
		if n := count(); n < before+200 {
			return fmt.Errorf("%d acked since the kill", n-before)
		}
		return nil
	})
	close(stop)
	<-done
	t.Logf("%d acked before the kill; 200 more within %s of it; %d failed", before, took, len(failed))
	for v, err := range failed {
		if !client.IsRetriable(err) {
			t.Fatalf("value %d failed with %v, not a retriable reason", v, err)
		}
	}

	seen := map[int]bool{}
	last := map[string]int{}
	cursor := ""
	within(t, 60*time.Second, "every acknowledged record through node 3", func() error {
		for {
			page, err := a3.Fetch(ctx, topic, client.FetchOptions{Cursor: cursor, Max: 1000})
			if err != nil {
				return err
			}
			for _, r := range page.Records {
				v, err := strconv.Atoi(string(r.Value))
				if err != nil || v < 0 {
					continue
				}
				if seen[v] {
					t.Fatalf("value %d read twice", v)
				}
				seen[v] = true
				k := string(r.Key)
				if prev, ok := last[k]; ok && prev > v {
					t.Fatalf("key %s: %d read after %d", k, v, prev)
				}
				last[k] = v
			}
			cursor = page.Cursor
			if len(page.Records) == 0 {
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for v := range acked {
			if !seen[v] {
				return fmt.Errorf("acknowledged value %d not read (read %d, acked %d)", v, len(seen), len(acked))
			}
		}
		return nil
	})
}
