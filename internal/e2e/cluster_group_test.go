package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/malachi-log/malachi/pkg/client"
)

// TestClusterGroupMembersOnDifferentNodes: two consumers of one group,
// connected to different nodes of three real ones, share a topic. Once
// both have joined, every record produced is processed, none by both;
// their commits land, and the group's lag reaches 0 as seen through the
// third node.
func TestClusterGroupMembersOnDifferentNodes(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := c.admin(ctx, 1)
	if err := admin.CreateTopic(ctx, "shared", client.WithRanges(8)); err != nil {
		t.Fatal(err)
	}
	for id := 2; id <= 3; id++ {
		within(t, replicated, fmt.Sprintf("shared through node %d", id), topicSeen(ctx, c.admin(ctx, id), "shared"))
	}

	var (
		mu     sync.Mutex
		reader = map[string]string{} // key/value -> the member that processed it
		both   []string
	)
	process := func(member string, recs []client.Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			id := string(r.Key) + "/" + string(r.Value)
			if prev, ok := reader[id]; ok && prev != member && len(both) < 10 {
				both = append(both, fmt.Sprintf("%s processed by %s and %s", id, prev, member))
			}
			reader[id] = member
		}
	}
	processed := func() (n int, by map[string]int) {
		mu.Lock()
		defer mu.Unlock()
		by = map[string]int{}
		for _, m := range reader {
			by[m]++
		}
		return len(reader), by
	}

	loopCtx, stop := context.WithCancel(ctx)
	var loops sync.WaitGroup
	var consumers []*client.Consumer
	for i, id := range []int{2, 3} {
		cs, err := client.NewConsumer(c.admin(ctx, id), client.ConsumerOptions{
			Topic: "shared", Group: "g", Member: fmt.Sprintf("m%d", i+1), MaxRecords: 20,
			MaxWait: 200 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, cs)
		loops.Go(func() {
			for {
				p, err := cs.Poll(loopCtx)
				if err != nil {
					if loopCtx.Err() == nil {
						t.Errorf("member %s through node %d: %v", cs.Member(), id, err)
					}
					return
				}
				process(cs.Member(), p.Records)
			}
		})
	}
	within(t, 30*time.Second, "both members see each other", func() error {
		for _, cs := range consumers {
			if a := cs.Assignment(); a.Members != 2 {
				return fmt.Errorf("%s: %+v", cs.Member(), a)
			}
		}
		return nil
	})
	m, err := c.admin(ctx, 1).DescribeGroupMembers(ctx, "shared", "g")
	if err != nil {
		t.Fatal(err)
	}
	var ranges []uint64
	for _, x := range m.Members {
		ranges = append(ranges, x.Ranges...)
	}
	slices.Sort(ranges)
	if len(m.Members) != 2 || len(ranges) != 8 || len(slices.Compact(ranges)) != 8 {
		t.Fatalf("the group through node 1: %+v, want two members sharing 8 ranges", m)
	}

	const keys, per = 16, 480
	for round := range 4 {
		recs := make([]client.Record, per/4)
		for i := range recs {
			n := round*len(recs) + i
			recs[i] = client.Record{Key: fmt.Appendf(nil, "k%02d", n%keys), Value: []byte(strconv.Itoa(n))}
		}
		if got, err := admin.Produce(ctx, "shared", recs...); err != nil || got != len(recs) {
			t.Fatalf("produce round %d: %d, %v", round, got, err)
		}
	}
	took := within(t, time.Minute, "every record processed", func() error {
		if n, by := processed(); n != per {
			return fmt.Errorf("%d of %d processed (%v)", n, per, by)
		}
		return nil
	})
	_, by := processed()
	t.Logf("%d records processed %v after the last produce, by member: %v", per, took, by)
	if len(by) != 2 {
		t.Errorf("records processed by %v: want both members to have read some", by)
	}
	within(t, 30*time.Second, "the group's lag through node 1 reaches 0", func() error {
		g, err := admin.DescribeGroup(ctx, "shared", "g")
		if err != nil || g.Lag != 0 {
			return fmt.Errorf("lag %d, %v", g.Lag, err)
		}
		return nil
	})

	stop()
	loops.Wait()
	for _, cs := range consumers {
		if err := cs.Close(ctx); err != nil {
			t.Errorf("close %s: %v", cs.Member(), err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range both {
		t.Error(f)
	}
}
