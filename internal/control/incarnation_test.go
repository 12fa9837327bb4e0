package control

import "testing"

// A node id registered with one data directory cannot come back with
// another (a replica that lost its state under its old id); the same
// incarnation, or a record that names none, re-registers as before.
// Once the node is removed its id is refused for good, whatever the
// incarnation: the machine comes back under a new id.
func TestRegistryRefusesAnotherIncarnation(t *testing.T) {
	r := newRegistry(4, 3, NodeRecord{ID: 1, Addr: "a1", Incarnation: "i1"})
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: 2, Addr: "a2", Incarnation: "i2"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: 2, Addr: "moved", Incarnation: "i2"}}); err != nil {
		t.Fatalf("same incarnation: %v", err)
	}
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: 2, Addr: "a2", Incarnation: "wiped"}}); err != errIncarnation {
		t.Fatalf("another incarnation: %v, want errIncarnation", err)
	}
	if n, _ := r.Node(2); n.Addr != "moved" || n.Incarnation != "i2" {
		t.Fatalf("a refused registration changed the record: %+v", n)
	}
	if err := r.apply(&regCommand{Kind: regRemove, Node: NodeRecord{ID: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: 2, Addr: "a2", Incarnation: "wiped"}}); err != errRemovedNode {
		t.Fatalf("after remove: %v, want errRemovedNode", err)
	}
	if err := r.apply(&regCommand{Kind: regRegister, Node: NodeRecord{ID: 3, Addr: "a2", Incarnation: "wiped"}}); err != nil {
		t.Fatalf("the same machine under a new id: %v", err)
	}
}
