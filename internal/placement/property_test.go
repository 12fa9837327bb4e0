package placement

import (
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

var racks = []string{"a", "b", "c", "d", "e", ""} // "" leaves the attribute out

func drawRackedNodes(t *rapid.T) []Node {
	nodes := drawNodes(t, 12)
	for i := range nodes {
		if r := rapid.SampledFrom(racks).Draw(t, "rack"); r != "" {
			nodes[i].Attributes = map[string]string{"rack": r}
		}
	}
	return nodes
}

func drawLoad(t *rapid.T, nodes []Node, label string) map[uint64]int {
	load := make(map[uint64]int)
	for _, n := range nodes {
		load[n.ID] = rapid.IntRange(0, 6).Draw(t, label)
	}
	return load
}

func drawRequest(t *rapid.T) Request {
	nodes := drawRackedNodes(t)
	req := Request{
		Topic:   rapid.StringN(0, 8, -1).Draw(t, "topic"),
		Range:   rapid.Uint64().Draw(t, "range"),
		Segment: rapid.Uint64().Draw(t, "segment"),
		Nodes:   nodes,
		Factor:  rapid.IntRange(-1, 6).Draw(t, "factor"),
	}
	if rapid.Bool().Draw(t, "spread") {
		req.SpreadBy = "rack"
		req.MinDomains = rapid.IntRange(0, 4).Draw(t, "min_domains")
		req.Mode = rapid.SampledFrom([]Mode{Soft, Hard}).Draw(t, "mode")
	}
	if req.MaxSkew = rapid.IntRange(0, 3).Draw(t, "max_skew"); req.MaxSkew > 0 {
		req.Load = Load{Replicas: drawLoad(t, nodes, "replicas"), Primaries: drawLoad(t, nodes, "primaries")}
	}
	return req
}

func distinctDomains(nodes []Node, attr string) int {
	seen := make(map[string]bool)
	for _, n := range nodes {
		seen[n.Attributes[attr]] = true
	}
	return len(seen)
}

// TestPlaceSegmentProperties: deterministic whatever the input order; no
// duplicate or unlisted node; the factor clamped; the spread as wide as
// the factor and the live domains allow; hard refuses exactly when
// min_domains is out of reach; soft never refuses and reports the
// shortfall exactly when there is one.
func TestPlaceSegmentProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		req := drawRequest(t)
		p, err := PlaceSegment(req)
		other := req
		other.Nodes = shuffled(t, req.Nodes)
		q, err2 := PlaceSegment(other)
		if !slices.Equal(p.Replicas, q.Replicas) || (err == nil) != (err2 == nil) {
			t.Fatalf("input order changed the result: %v %v vs %v %v", p.Replicas, err, q.Replicas, err2)
		}
		factor := clampFactor(req.Factor, len(req.Nodes))
		reach := 0
		if req.SpreadBy != "" {
			reach = min(factor, distinctDomains(req.Nodes, req.SpreadBy))
		}
		if req.Mode == Hard && reach < req.MinDomains {
			if !errors.Is(err, ErrInsufficientDomains) {
				t.Fatalf("hard, reach %d < min %d: got %v, %v", reach, req.MinDomains, p, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("PlaceSegment: %v", err)
		}
		if len(p.Replicas) != factor {
			t.Fatalf("%d replicas, want %d", len(p.Replicas), factor)
		}
		checkUniqueMembers(t, p.Replicas, req.Nodes)
		if p.Domains != reach {
			t.Fatalf("covers %d domains, want the most reachable, %d", p.Domains, reach)
		}
		if (p.Violation != nil) != (p.Domains < req.MinDomains) {
			t.Fatalf("violation %+v with %d of %d domains", p.Violation, p.Domains, req.MinDomains)
		}
	})
}

// TestPlaceSegmentMinimalMovement: without constraints or loads, a joining
// node changes a segment's set only where it is picked, displacing one
// member.
func TestPlaceSegmentMinimalMovement(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := drawNodes(t, 10)
		joiner := Node{ID: 1<<20 + 1}
		factor := rapid.IntRange(1, 5).Draw(t, "factor")
		for seg := range uint64(64) {
			before, err := PlaceSegment(Request{Topic: "t", Segment: seg, Nodes: nodes, Factor: factor})
			if err != nil {
				t.Fatal(err)
			}
			after, err := PlaceSegment(Request{Topic: "t", Segment: seg, Nodes: append(slices.Clone(nodes), joiner), Factor: factor})
			if err != nil {
				t.Fatal(err)
			}
			added := diff(after.Replicas, before.Replicas)
			switch {
			case len(added) == 0 && !slices.Equal(before.Replicas, after.Replicas):
				t.Fatalf("segment %d reordered without the joiner: %v -> %v", seg, before.Replicas, after.Replicas)
			case len(added) > 1 || len(added) == 1 && added[0] != joiner.ID:
				t.Fatalf("segment %d: %v -> %v, want at most the joiner added", seg, before.Replicas, after.Replicas)
			}
		}
	})
}

// TestSkewStaysBounded places many segments, feeding each placement back
// into the loads: the most loaded node never holds more than MaxSkew above
// the least loaded.
func TestSkewStaysBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := drawNodes(t, 9)
		skew := rapid.IntRange(1, 3).Draw(t, "max_skew")
		factor := rapid.IntRange(1, 4).Draw(t, "factor")
		load := Load{Replicas: map[uint64]int{}, Primaries: map[uint64]int{}}
		for seg := range uint64(100) {
			p, err := PlaceSegment(Request{Topic: "t", Segment: seg, Nodes: nodes, Factor: factor,
				Constraints: Constraints{MaxSkew: skew}, Load: load})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range p.Replicas {
				load.Replicas[id]++
			}
			load.Primaries[p.Replicas[0]]++
			low, high := minLoad(nodes, load.Replicas), 0
			for _, n := range nodes {
				high = max(high, load.Replicas[n.ID])
			}
			if high-low > skew {
				t.Fatalf("after segment %d: loads %v spread %d > max_skew %d", seg, load.Replicas, high-low, skew)
			}
		}
	})
}

// TestReplaceProperties: survivors come first in their order, no dead
// node is placed, no duplicates, and the set reaches the factor unless it
// already had more survivors.
func TestReplaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		req := drawRequest(t)
		req.Mode = Soft
		ids := make([]uint64, len(req.Nodes))
		for i, n := range req.Nodes {
			ids[i] = n.ID
		}
		current := rapid.SliceOfDistinct(rapid.SampledFrom(ids), rapid.ID[uint64]).Draw(t, "current")
		dead := rapid.SliceOfDistinct(rapid.SampledFrom(ids), rapid.ID[uint64]).Draw(t, "dead")
		p, err := Replace(current, dead, req)
		live := slices.DeleteFunc(slices.Clone(req.Nodes), func(n Node) bool { return slices.Contains(dead, n.ID) })
		if len(live) == 0 {
			if !errors.Is(err, ErrNoNodes) {
				t.Fatalf("every node dead: %v, %v", p, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		survivors := diff(current, dead)
		if !slices.Equal(p.Replicas[:len(survivors)], survivors) {
			t.Fatalf("Replace(%v, dead %v) = %v: survivors %v not kept first", current, dead, p.Replicas, survivors)
		}
		checkUniqueMembers(t, p.Replicas, live)
		if want := max(len(survivors), clampFactor(req.Factor, len(live))); len(p.Replicas) != want {
			t.Fatalf("%d replicas, want %d", len(p.Replicas), want)
		}
	})
}
