package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// TestLagScanIsBounded: describing a group reads at most a bounded number
// of ancestor records; past the bound the lag is estimated from offsets.
// With the bound at 0 nothing is read (reads of segment files fail), and
// the estimate for two children of a 40-record parent adds up to 40.
func TestLagScanIsBounded(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem, nil)
	b := openOn(t, faulty)
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "l", 8, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		mustProduce(t, b, "l", rec(fmt.Sprint("k", i), i))
	}
	if _, err := b.SplitRange(ctx, "l", 0); err != nil {
		t.Fatal(err)
	}
	g := "g"
	if err := b.SeekGroup(ctx, "l", g, nil); err != nil {
		t.Fatal(err)
	}
	exact, err := b.DescribeGroup("l", g)
	if err != nil || exact.Lag != 40 {
		t.Fatalf("exact lag %d, %v; want 40", exact.Lag, err)
	}
	faulty.SetRule(vfs.FailOn(vfs.OpRead, "/segments/", nil))
	plans, lin := b.plans(position{topicID: mustTopicID(t, b, "l")})
	var lag uint64
	scan := 0
	for i := range plans {
		n, err := b.rangeLag(&plans[i], nil, lin, &scan)
		if err != nil {
			t.Fatalf("estimate read a segment: %v", err)
		}
		lag += n
	}
	if lag != 40 {
		t.Fatalf("estimated lag %d, want 40", lag)
	}
}

func mustTopicID(t *testing.T, b *Broker, topic string) uint64 {
	t.Helper()
	id, err := b.topicID(topic)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
