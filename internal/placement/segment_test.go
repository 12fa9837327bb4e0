package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// racked returns nodes 1..n with rack attributes taken in turn from racks.
func racked(n int, racks ...string) []Node {
	out := nodesN(n)
	for i := range out {
		out[i].Attributes = map[string]string{"rack": racks[i%len(racks)]}
	}
	return out
}

func rackOf(nodes []Node, id uint64) string {
	for _, n := range nodes {
		if n.ID == id {
			return n.Attributes["rack"]
		}
	}
	return "?"
}

// TestPlaceSegmentGolden pins the HRW ranking of segments.
func TestPlaceSegmentGolden(t *testing.T) {
	want := [][]uint64{{4, 1, 2}, {2, 5, 3}, {2, 1, 3}, {1, 4, 5}}
	for s, w := range want {
		p, err := PlaceSegment(Request{Topic: "orders", Range: 1, Segment: uint64(s), Nodes: nodesN(5)})
		if err != nil || !slices.Equal(p.Replicas, w) {
			t.Errorf("segment %d: %v, %v; want %v", s, p.Replicas, err, w)
		}
	}
}

func TestPlaceSegmentRefusals(t *testing.T) {
	cases := []struct {
		name string
		req  Request
		want error
	}{
		{"no nodes", Request{}, ErrNoNodes},
		{"duplicate node", Request{Nodes: append(nodesN(2), Node{ID: 2})}, ErrInvalidRequest},
		{"too many nodes", Request{Nodes: nodesN(MaxNodes + 1)}, ErrInvalidRequest},
		{"min_domains without spread_by", Request{Nodes: nodesN(3), Constraints: Constraints{MinDomains: 2}}, ErrInvalidRequest},
		{"negative skew", Request{Nodes: nodesN(3), Constraints: Constraints{MaxSkew: -1}}, ErrInvalidRequest},
		{"unknown mode", Request{Nodes: nodesN(3), Constraints: Constraints{Mode: 7}}, ErrInvalidRequest},
		{"hard, two racks for three domains", Request{Nodes: racked(6, "a", "b"),
			Constraints: Constraints{SpreadBy: "rack", MinDomains: 3, Mode: Hard}}, ErrInsufficientDomains},
		{"hard, factor below min_domains", Request{Nodes: racked(6, "a", "b", "c"), Factor: 2,
			Constraints: Constraints{SpreadBy: "rack", MinDomains: 3, Mode: Hard}}, ErrInsufficientDomains},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlaceSegment(c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("PlaceSegment = %v, %v; want %v", p, err, c.want)
			}
		})
	}
}

// TestHardRefusalSaysWhy: the refusal names the attribute, the need and
// what the live nodes offer, so an operator can act on it.
func TestHardRefusalSaysWhy(t *testing.T) {
	_, err := PlaceSegment(Request{Nodes: racked(4, "a", "b"), Constraints: Constraints{SpreadBy: "rack", MinDomains: 3, Mode: Hard}})
	for _, part := range []string{`min_domains 3 by "rack"`, "got 2", `span 2 ("a", "b")`} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("error %v does not say %q", err, part)
		}
	}
	_, err = PlaceSegment(Request{Nodes: racked(6, "a", "b", "c"), Factor: 2, Constraints: Constraints{SpreadBy: "rack", MinDomains: 3, Mode: Hard}})
	if err == nil || !strings.Contains(err.Error(), "replication factor is 2") {
		t.Errorf("error %v does not blame the factor", err)
	}
}

func TestSpreadBy(t *testing.T) {
	cases := []struct {
		name    string
		nodes   []Node
		factor  int
		min     int
		mode    Mode
		domains int
		violate bool
	}{
		{"three racks, factor 3", racked(9, "a", "b", "c"), 3, 3, Hard, 3, false},
		{"two racks, factor 3, soft", racked(6, "a", "b"), 3, 3, Soft, 2, true},
		{"four racks, factor 3", racked(8, "a", "b", "c", "d"), 3, 2, Hard, 3, false},
		{"one node per rack, factor clamped", racked(2, "a", "b"), 3, 2, Hard, 2, false},
		{"missing attribute is its own domain", append(racked(2, "a"), Node{ID: 10}), 3, 2, Hard, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seg := range uint64(20) {
				req := Request{Topic: "t", Segment: seg, Nodes: c.nodes, Factor: c.factor,
					Constraints: Constraints{SpreadBy: "rack", MinDomains: c.min, Mode: c.mode}}
				p, err := PlaceSegment(req)
				if err != nil {
					t.Fatalf("segment %d: %v", seg, err)
				}
				racks := make(map[string]bool)
				for _, id := range p.Replicas {
					racks[rackOf(c.nodes, id)] = true
				}
				if p.Domains != c.domains || len(racks) != c.domains {
					t.Fatalf("segment %d: %v covers %d racks (reported %d), want %d", seg, p.Replicas, len(racks), p.Domains, c.domains)
				}
				if (p.Violation != nil) != c.violate {
					t.Fatalf("segment %d: violation %+v, want %v", seg, p.Violation, c.violate)
				}
			}
		})
	}
}

// TestSoftViolationReport: the report carries need, got and the reason.
func TestSoftViolationReport(t *testing.T) {
	p, err := PlaceSegment(Request{Nodes: racked(6, "a", "b"), Constraints: Constraints{SpreadBy: "rack", MinDomains: 3}})
	if err != nil || p.Violation == nil {
		t.Fatalf("PlaceSegment = %+v, %v; want a soft violation", p, err)
	}
	if v := p.Violation; v.Need != 3 || v.Got != 2 || !strings.Contains(v.Reason, `"rack"`) {
		t.Fatalf("violation %+v", v)
	}
	if len(p.Replicas) != 3 {
		t.Fatalf("soft placement gave up replicas: %v", p.Replicas)
	}
}

// TestSkewAvoidsLoadedNode: a node far above the least loaded one is left
// out while enough nodes are within the cap, and taken when they are not.
func TestSkewAvoidsLoadedNode(t *testing.T) {
	nodes := nodesN(5)
	for seg := range uint64(50) {
		req := Request{Topic: "t", Segment: seg, Nodes: nodes,
			Constraints: Constraints{MaxSkew: 2},
			Load:        Load{Replicas: map[uint64]int{1: 10, 2: 3, 3: 3, 4: 3, 5: 3}}}
		p, err := PlaceSegment(req)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(p.Replicas, 1) {
			t.Fatalf("segment %d: loaded node 1 placed: %v", seg, p.Replicas)
		}
		// Only two nodes within the cap: the factor is kept, the least
		// loaded of the others fills it.
		req.Load.Replicas = map[uint64]int{1: 10, 2: 9, 3: 0, 4: 0, 5: 8}
		p, err = PlaceSegment(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(slices.Values(p.Replicas)); !slices.Equal(got, []uint64{3, 4, 5}) {
			t.Fatalf("segment %d: %v, want 3, 4 and the least loaded other, 5", seg, p.Replicas)
		}
	}
}

// TestSkewMovesPrimary: among the chosen replicas, one with many primaries
// does not lead when another is within the cap.
func TestSkewMovesPrimary(t *testing.T) {
	nodes := nodesN(3)
	for seg := range uint64(30) {
		req := Request{Topic: "t", Segment: seg, Nodes: nodes, Constraints: Constraints{MaxSkew: 1}}
		plain, _ := PlaceSegment(req)
		req.Load.Primaries = map[uint64]int{plain.Replicas[0]: 5}
		p, err := PlaceSegment(req)
		if err != nil {
			t.Fatal(err)
		}
		if p.Replicas[0] == plain.Replicas[0] {
			t.Fatalf("segment %d: loaded primary %d kept the lead: %v", seg, plain.Replicas[0], p.Replicas)
		}
		if !slices.Equal(slices.Sorted(slices.Values(p.Replicas)), slices.Sorted(slices.Values(plain.Replicas))) {
			t.Fatalf("segment %d: the set changed: %v vs %v", seg, p.Replicas, plain.Replicas)
		}
	}
}

// TestStripe: successive segments of one range spread over the cluster:
// every node leads some segment and the sets differ.
func TestStripe(t *testing.T) {
	nodes := nodesN(6)
	primaries := make(map[uint64]int)
	sets := make(map[string]bool)
	for seg := range uint64(60) {
		p, err := PlaceSegment(Request{Topic: "orders", Range: 3, Segment: seg, Nodes: nodes})
		if err != nil {
			t.Fatal(err)
		}
		primaries[p.Replicas[0]]++
		sets[fmt.Sprint(slices.Sorted(slices.Values(p.Replicas)))] = true
	}
	if len(primaries) != len(nodes) {
		t.Fatalf("60 segments were led by only %v", primaries)
	}
	if len(sets) < 5 {
		t.Fatalf("60 segments used only %d replica sets", len(sets))
	}
}

func TestReplace(t *testing.T) {
	nodes := racked(6, "a", "b", "c") // racks: 1a 2b 3c 4a 5b 6c
	spread := Constraints{SpreadBy: "rack", MinDomains: 3, Mode: Hard}
	cases := []struct {
		name    string
		current []uint64
		dead    []uint64
		live    []Node
		keep    []uint64 // the result starts with these, in order
		wantLen int
	}{
		{"nothing dead keeps the set", []uint64{1, 2, 3}, nil, nodes, []uint64{1, 2, 3}, 3},
		{"dead primary: next survivor leads", []uint64{1, 2, 3}, []uint64{1}, nodes, []uint64{2, 3}, 3},
		{"dead follower", []uint64{1, 2, 3}, []uint64{3}, nodes, []uint64{1, 2}, 3},
		{"not live counts as dead", []uint64{1, 2, 3}, nil, slices.Delete(slices.Clone(nodes), 1, 2), []uint64{1, 3}, 3},
		{"larger than factor keeps all survivors", []uint64{1, 2, 3, 4}, nil, nodes, []uint64{1, 2, 3, 4}, 4},
		{"all dead: placed afresh", []uint64{1, 2, 3}, []uint64{1, 2, 3}, nodes, nil, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := Request{Topic: "t", Segment: 9, Nodes: c.live, Constraints: spread}
			p, err := Replace(c.current, c.dead, req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Replicas[:len(c.keep)], c.keep) || len(p.Replicas) != c.wantLen {
				t.Fatalf("Replace(%v, dead %v) = %v, want %v first and %d in all", c.current, c.dead, p.Replicas, c.keep, c.wantLen)
			}
			for _, id := range p.Replicas {
				if slices.Contains(c.dead, id) {
					t.Fatalf("dead node %d placed: %v", id, p.Replicas)
				}
			}
			if p.Domains != 3 {
				t.Fatalf("%v covers %d racks, want 3", p.Replicas, p.Domains)
			}
		})
	}
}

// TestReplaceFillsMissingDomain: the replacement of a dead node comes from
// the rack the survivors lack, even when HRW prefers another rack.
func TestReplaceFillsMissingDomain(t *testing.T) {
	nodes := racked(9, "a", "b", "c")
	for seg := range uint64(30) {
		p, err := Replace([]uint64{1, 2, 3}, []uint64{3}, Request{Topic: "t", Segment: seg, Nodes: nodes,
			Constraints: Constraints{SpreadBy: "rack"}})
		if err != nil {
			t.Fatal(err)
		}
		if added := p.Replicas[2]; rackOf(nodes, added) != "c" {
			t.Fatalf("segment %d: added node %d in rack %s, want rack c", seg, added, rackOf(nodes, added))
		}
	}
}
