package control

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRemoveOfAnUnregisteredNodeIsRefused: removing an id the cluster
// never registered is refused with a reason naming it and changes
// nothing; removing a node that was removed already succeeds again.
func TestRemoveOfAnUnregisteredNodeIsRefused(t *testing.T) {
	c := threeNodes(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.node(2).Remove(ctx, 33)
	if err == nil || isUnavailable(err) || !strings.Contains(err.Error(), "node 33 is not registered") {
		t.Fatalf("Remove(33), never registered: %v, want a refusal naming node 33", err)
	}
	c.stopNode(3)
	if err := c.node(2).Remove(ctx, 3); err != nil {
		t.Fatalf("Remove(3), down: %v\n%s", err, c.describe())
	}
	if err := c.node(1).Remove(ctx, 3); err != nil {
		t.Fatalf("Remove(3) again, already removed: %v", err)
	}
	if reg, _ := c.node(1).Registry(); len(reg.Nodes) != 2 {
		t.Fatalf("registry after the removals: %+v", reg.Nodes)
	}
}
