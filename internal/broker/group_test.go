package broker

import (
	"context"
	"testing"
)

// TestGroupResumesAfterManySplits: a group commits its position, the
// topic then splits several times without it reading, and it resumes. Its
// commits carry a wide entry for an ancestor beside narrower, further
// entries for the same ancestor; the stored position must keep both, or
// the group re-reads records it already had.
func TestGroupResumesAfterManySplits(t *testing.T) {
	b := openTestBroker(t, t.TempDir())
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTopic(ctx, "r", 8, 1); err != nil {
		t.Fatal(err)
	}
	acked := &ackLog{byKey: map[string][]int{}}
	next := map[string]int{}
	split := func(n int) {
		for i := 0; i < n; i++ {
			produceRound(t, b, "r", 64, next, acked)
			if _, err := b.SplitRange(ctx, "r", 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	split(2)
	g := "billing"
	grouped := newReader(t, b, "r")
	grouped.group, grouped.commit = &g, true
	grouped.drain()
	split(5)
	grouped.drain()
	grouped.check("group", acked)
}
