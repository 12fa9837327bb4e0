package broker

import "testing"

// A copy is unchecked unless something is known against it: no state
// claims a check passed, sealed and replicated or not.
func TestCopyStateNeverClaimsAPassedCheck(t *testing.T) {
	live := map[uint64]bool{1: true, 2: true}
	sealed := &SegmentDescription{ID: 5, Replicas: []string{"node-1", "node-2", "node-3"}, damaged: []string{"node-2"}}
	active := &SegmentDescription{ID: 6, Active: true, Replicas: []string{"node-1"}}
	for _, c := range []struct {
		s              *SegmentDescription
		node           string
		found, filling bool
		want           string
	}{
		{sealed, "node-1", false, false, CopyUnchecked},
		{sealed, "node-2", false, false, CopyDamaged},
		{sealed, "node-3", false, false, CopyMissing},
		{sealed, "node-1", true, false, CopyDamaged},
		{sealed, "node-1", true, true, CopyHealing},
		{active, "node-1", false, false, CopyUnchecked},
	} {
		if got := copyState(c.s, c.node, c.found, c.filling, live); got != c.want {
			t.Errorf("segment %d on %s (found damaged %v, filling %v): %s, want %s", c.s.ID, c.node, c.found, c.filling, got, c.want)
		}
	}
}
