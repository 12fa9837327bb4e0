package placement

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func nodesN(n int) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = Node{ID: uint64(i + 1)}
	}
	return out
}

// TestVnodeReplicasGolden pins the HRW ranking of vnodes: replicas recorded
// by the control plane were chosen by it.
func TestVnodeReplicasGolden(t *testing.T) {
	want := [][]uint64{{3, 4, 5}, {4, 2, 1}, {1, 2, 3}, {3, 4, 2}}
	for v, w := range want {
		if got := VnodeReplicas(uint32(v), nodesN(5), 3); !slices.Equal(got, w) {
			t.Errorf("VnodeReplicas(%d, 1..5, 3) = %v, want %v", v, got, w)
		}
	}
}

func TestVnodeReplicasFactor(t *testing.T) {
	cases := []struct {
		nodes, factor, want int
	}{
		{5, 0, DefaultFactor}, {5, -1, DefaultFactor}, {5, 1, 1}, {5, 5, 5}, {5, 9, 5},
		{2, 3, 2}, {1, 3, 1}, {0, 3, 0},
	}
	for _, c := range cases {
		if got := VnodeReplicas(7, nodesN(c.nodes), c.factor); len(got) != c.want {
			t.Errorf("%d nodes, factor %d: %v, want %d replicas", c.nodes, c.factor, got, c.want)
		}
	}
	dup := append(nodesN(2), Node{ID: 1})
	if got := VnodeReplicas(7, dup, 3); len(got) != 2 || got[0] == got[1] {
		t.Errorf("a node listed twice: %v, want each node once", got)
	}
}

// drawNodes draws 1..max distinct node ids.
func drawNodes(t *rapid.T, max int) []Node {
	ids := rapid.SliceOfNDistinct(rapid.Uint64Range(1, 1<<20), 1, max, rapid.ID[uint64]).Draw(t, "ids")
	out := make([]Node, len(ids))
	for i, id := range ids {
		out[i] = Node{ID: id}
	}
	return out
}

func shuffled(t *rapid.T, nodes []Node) []Node {
	out := slices.Clone(nodes)
	for i := len(out) - 1; i > 0; i-- {
		j := rapid.IntRange(0, i).Draw(t, "swap")
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// TestVnodeReplicasProperties: deterministic whatever the input order, no
// duplicates, the factor clamped, only listed nodes, and the set is the
// top of the HRW ranking (a prefix of the set for a smaller factor).
func TestVnodeReplicasProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := drawNodes(t, 12)
		vnode := rapid.Uint32().Draw(t, "vnode")
		factor := rapid.IntRange(-1, 15).Draw(t, "factor")
		got := VnodeReplicas(vnode, nodes, factor)
		if again := VnodeReplicas(vnode, shuffled(t, nodes), factor); !slices.Equal(got, again) {
			t.Fatalf("input order changed the result: %v vs %v", got, again)
		}
		want := min(len(nodes), factor)
		if factor <= 0 {
			want = min(len(nodes), DefaultFactor)
		}
		if len(got) != want {
			t.Fatalf("%d replicas, want %d", len(got), want)
		}
		checkUniqueMembers(t, got, nodes)
		if len(got) > 1 {
			if fewer := VnodeReplicas(vnode, nodes, len(got)-1); !slices.Equal(fewer, got[:len(got)-1]) {
				t.Fatalf("factor %d gave %v, not a prefix of %v", len(got)-1, fewer, got)
			}
		}
	})
}

func checkUniqueMembers(t *rapid.T, ids []uint64, nodes []Node) {
	seen := make(map[uint64]bool)
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("node %d twice in %v", id, ids)
		}
		seen[id] = true
		if !slices.ContainsFunc(nodes, func(n Node) bool { return n.ID == id }) {
			t.Fatalf("node %d is not live", id)
		}
	}
}

// TestVnodeReplicasMinimalMovement: when a node joins, a vnode's set
// changes only if it picked the new node, and then by exactly that one
// member; when a node leaves, only the sets that held it change.
func TestVnodeReplicasMinimalMovement(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := drawNodes(t, 10)
		joiner := Node{ID: 1<<20 + rapid.Uint64Range(1, 100).Draw(t, "joiner")}
		factor := rapid.IntRange(1, 5).Draw(t, "factor")
		for v := range uint32(64) {
			before := VnodeReplicas(v, nodes, factor)
			after := VnodeReplicas(v, append(slices.Clone(nodes), joiner), factor)
			if !slices.Contains(after, joiner.ID) {
				if !slices.Equal(before, after) {
					t.Fatalf("vnode %d moved without picking the joiner: %v -> %v", v, before, after)
				}
				continue
			}
			if moved := diff(after, before); len(moved) != 1 || moved[0] != joiner.ID {
				t.Fatalf("vnode %d: %v -> %v, want only the joiner added", v, before, after)
			}
			if len(after) == len(before) && len(diff(before, after)) != 1 {
				t.Fatalf("vnode %d: %v -> %v, want one member displaced", v, before, after)
			}
		}
		if len(nodes) < 2 {
			return
		}
		leaver := nodes[rapid.IntRange(0, len(nodes)-1).Draw(t, "leaver")].ID
		rest := slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return n.ID == leaver })
		for v := range uint32(64) {
			before := VnodeReplicas(v, nodes, factor)
			after := VnodeReplicas(v, rest, factor)
			if !slices.Contains(before, leaver) {
				if !slices.Equal(before, after) {
					t.Fatalf("vnode %d moved without holding the leaver: %v -> %v", v, before, after)
				}
				continue
			}
			if lost := diff(before, after); len(lost) != 1 || lost[0] != leaver {
				t.Fatalf("vnode %d: %v -> %v, want only the leaver removed", v, before, after)
			}
		}
	})
}

// diff is the members of a not in b.
func diff(a, b []uint64) []uint64 {
	var out []uint64
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
