package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metrics"
)

// lagNode is a node with one topic of 60 records in batches of 10 and
// five groups that read 0, 10, ... 40 of them.
func lagNode(t *testing.T) *node {
	t.Helper()
	n := startNode(t, metrics.Options{})
	c := n.dial(t)
	if err := c.CreateTopic(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "orders", 60)
	for i := range 5 {
		if i > 0 {
			consume(t, c, "orders", fmt.Sprintf("g%d", i), 10*i)
		}
	}
	return n
}

func TestGroupLagsStayWithinTheByteBudget(t *testing.T) {
	n := lagNode(t)
	all := n.b.GroupLags(t.Context(), broker.LagBudget{MaxGroups: 100, Bytes: 1 << 20})
	if len(all.Lags) != 4 || all.Cut || all.More {
		t.Fatalf("unbounded: %+v, want 4 groups, whole", all)
	}
	for i, l := range all.Lags {
		if want := uint64(60 - 10*(i+1)); l.Records != want || !l.AgeKnown || l.OldestMs == 0 {
			t.Errorf("group %s: %d records, age known %v (%d), want %d records dated", l.Group, l.Records, l.AgeKnown, l.OldestMs, want)
		}
	}
	if all.BytesRead == 0 {
		t.Fatal("dating four groups read nothing")
	}

	// A budget of one byte lets one batch be read: one group is dated,
	// the others keep their record lag and get no age.
	one := n.b.GroupLags(t.Context(), broker.LagBudget{MaxGroups: 100, Bytes: 1})
	dated := 0
	for i, l := range one.Lags {
		if l.Records != all.Lags[i].Records {
			t.Errorf("group %s: %d records under the budget, %d without", l.Group, l.Records, all.Lags[i].Records)
		}
		if l.AgeKnown {
			dated++
		}
	}
	if dated != 1 || one.BytesRead == 0 || one.BytesRead >= all.BytesRead {
		t.Errorf("a one-byte budget dated %d groups reading %d bytes (unbounded: %d), want 1 group and one batch", dated, one.BytesRead, all.BytesRead)
	}
}

func TestGroupLagsStopWhenCancelled(t *testing.T) {
	n := lagNode(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep := n.b.GroupLags(ctx, broker.LagBudget{MaxGroups: 100, Bytes: 1 << 20})
	if !rep.Cut || len(rep.Lags) != 0 || rep.BytesRead != 0 {
		t.Errorf("a cancelled computation: %+v, want cut with nothing read", rep)
	}
	capped := n.b.GroupLags(t.Context(), broker.LagBudget{MaxGroups: 2, Bytes: 1 << 20})
	if len(capped.Lags) != 2 || !capped.More {
		t.Errorf("capped at 2: %d groups, more %v", len(capped.Lags), capped.More)
	}
}
