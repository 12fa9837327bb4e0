package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/testenv"
	"github.com/malachi-log/malachi/pkg/client"
)

// TestConsumersAcrossNodeCrash: three group consumers (pkg/client's
// Consumer) read a topic while the real node is killed with SIGKILL and
// started again on the same data directory and port. They join again by
// themselves; every record is processed at least once, each key in order,
// and once they have closed the group's lag is 0 and a new member reads
// nothing.
func TestConsumersAcrossNodeCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	dir, addr := t.TempDir(), freeAddr(t)
	node := startServe(t, dir, "--listen", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, node.addr, client.WithCredentials("admin", "admin123"),
		client.WithRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "orders", client.WithRanges(8)); err != nil {
		t.Fatal(err)
	}

	const keys, per = 12, 240
	var (
		mu     sync.Mutex
		next   = map[string]int{} // key -> value after the highest processed
		seen   = map[string]bool{}
		faults []string
	)
	process := func(recs []client.Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			k := string(r.Key)
			v, _ := strconv.Atoi(string(r.Value))
			if v > next[k] && len(faults) < 10 {
				faults = append(faults, fmt.Sprintf("key %s: %d processed before %d", k, v, next[k]))
			}
			next[k] = max(next[k], v+1)
			seen[fmt.Sprintf("%s/%d", k, v)] = true
		}
	}
	processed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	var loops sync.WaitGroup
	loopCtx, stop := context.WithCancel(ctx)
	consumers := make([]*client.Consumer, 3)
	for i := range consumers {
		cs, err := client.NewConsumer(c, client.ConsumerOptions{
			Topic: "orders", Group: "g", Member: fmt.Sprintf("m%d", i), MaxRecords: 20,
			MaxWait: 200 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		consumers[i] = cs
		loops.Go(func() {
			for {
				p, err := cs.Poll(loopCtx)
				if err != nil {
					if loopCtx.Err() == nil {
						t.Errorf("member %s: %v", cs.Member(), err)
					}
					return
				}
				process(p.Records)
			}
		})
	}

	produceKeyed(t, ctx, c, keys, per, 0)
	waitUntil(t, "half the records before the crash", func() bool { return processed() >= per/2 })
	node.kill()
	node = startServe(t, dir, "--listen", addr)
	produceKeyed(t, ctx, c, keys, per, per/keys)
	waitUntil(t, "every record after the crash", func() bool { return processed() == 2*per })

	stop()
	loops.Wait()
	for _, cs := range consumers {
		if err := cs.Close(ctx); err != nil {
			t.Errorf("close %s: %v", cs.Member(), err)
		}
	}
	for _, f := range faults {
		t.Error(f)
	}
	g, err := c.DescribeGroup(ctx, "orders", "g")
	if err != nil || g.Lag != 0 {
		t.Fatalf("group after every member closed: lag %d, %v", g.Lag, err)
	}
	late, err := client.NewConsumer(c, client.ConsumerOptions{Topic: "orders", Group: "g", Member: "late"})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close(ctx)
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if p, err := late.Poll(pctx); err == nil {
		t.Fatalf("a member after the clean closes read %d records", len(p.Records))
	}
}

// freeAddr returns a loopback address with a port free now, for a node
// that must come back on the same one.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(testenv.FreePorts(t, 1)[0])
}

// produceKeyed stores n records over keys k00.., values from first on per key,
// retrying while the node comes back.
func produceKeyed(t *testing.T, ctx context.Context, c *client.Client, keys, n, first int) {
	t.Helper()
	recs := make([]client.Record, n)
	for i := range recs {
		recs[i] = client.Record{Key: fmt.Appendf(nil, "k%02d", i%keys), Value: fmt.Appendf(nil, "%d", first+i/keys)}
	}
	waitUntil(t, "a produce", func() bool {
		got, err := c.Produce(ctx, "orders", recs...)
		return err == nil && got == n
	})
}

// waitUntil polls cond until it holds, for at most a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
