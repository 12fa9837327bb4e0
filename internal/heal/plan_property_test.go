package heal_test

// The planner on random clusters (nodes in zones, some dead past the
// grace, some down within it, some with full or failing disks; segments
// with random replica lists, factors and damaged copies). After applying
// every planned task (add the targets, then drop what it drops):
//   - every segment with a healthy source is back at its factor, or is
//     reported short of nodes or refused by its constraints;
//   - no target is down or has a full or failing disk; a target holding
//     the segment is a damaged holder rebuilding its copy, chosen only when
//     the nodes without a copy cannot make up the factor; no list names a
//     node twice;
//   - a source is a live, undamaged holder;
//   - a damaged copy is dropped only when the factor is met without it,
//     a rebuilt one never, and a segment with no healthy copy gets no
//     task at all (S3, S4);
//   - a segment is left short only when the usable nodes (without a copy,
//     or holding a damaged one) are too few, or hard constraints refuse;
//   - hard constraints hold on every new set;
//   - the plan does not depend on the order of its inputs.

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/placement"
)

type cluster struct {
	in  heal.Input
	cfg heal.Config
	// facts about each node, for the checks
	live, usable, dead map[uint64]bool
	zone               map[uint64]string
}

func drawCluster(t *rapid.T) cluster {
	c := cluster{live: map[uint64]bool{}, usable: map[uint64]bool{}, dead: map[uint64]bool{}, zone: map[uint64]string{}}
	c.cfg = heal.Config{DeadAfterMs: grace, MaxTasksPerNode: 1 << 20, MaxTasks: 1 << 20}
	if rapid.Bool().Draw(t, "spread") {
		c.cfg.Constraints = placement.Constraints{SpreadBy: "zone", MinDomains: rapid.IntRange(0, 3).Draw(t, "min_domains"),
			Mode: rapid.SampledFrom([]placement.Mode{placement.Soft, placement.Hard}).Draw(t, "mode")}
	}
	c.in.Now = 10 * grace
	n := rapid.IntRange(1, 12).Draw(t, "nodes")
	for id := uint64(1); id <= uint64(n); id++ {
		zone := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "zone")
		c.zone[id] = zone
		attrs := map[string]string{"zone": zone}
		switch rapid.IntRange(0, 5).Draw(t, "fate") {
		case 0:
			c.dead[id] = true
			c.in.Down = append(c.in.Down, heal.Down{ID: id, SinceMs: c.in.Now - grace - 1, Attributes: attrs})
		case 1:
			c.in.Down = append(c.in.Down, heal.Down{ID: id, SinceMs: c.in.Now - 1, Attributes: attrs})
		default:
			node := heal.Node{ID: id, Attributes: attrs, Full: rapid.IntRange(0, 7).Draw(t, "full") == 0,
				Failing: rapid.IntRange(0, 7).Draw(t, "failing") == 0}
			c.live[id] = true
			c.usable[id] = !node.Full && !node.Failing
			c.in.Live = append(c.in.Live, node)
		}
	}
	for id := uint64(1); id <= uint64(rapid.IntRange(1, 15).Draw(t, "segments")); id++ {
		s := seg(id, rapid.IntRange(0, 5).Draw(t, "factor"))
		s.Replicas = rapid.SliceOfNDistinct(rapid.Uint64Range(1, uint64(n)), 1, 5, rapid.ID[uint64]).Draw(t, "replicas")
		for _, r := range s.Replicas {
			if c.live[r] && rapid.IntRange(0, 3).Draw(t, "damaged") == 0 {
				s.Damaged = append(s.Damaged, r)
			}
		}
		c.in.Segments = append(c.in.Segments, s)
	}
	return c
}

func factorOf(s heal.Segment) int {
	if s.Factor <= 0 {
		return placement.DefaultFactor
	}
	return s.Factor
}

func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := drawCluster(t)
		p, err := heal.PlanHeals(c.cfg, c.in)
		if err != nil {
			t.Fatal(err)
		}
		tasks := make(map[uint64]heal.Assignment)
		for _, a := range p.Tasks {
			if _, twice := tasks[a.Seal.Segment]; twice {
				t.Fatalf("segment %d planned twice", a.Seal.Segment)
			}
			tasks[a.Seal.Segment] = a
		}
		for _, s := range c.in.Segments {
			checkSegment(t, c, p, s, tasks[s.Seal.Segment])
		}
		checkOrderFree(t, c, p)
	})
}

func checkSegment(t *rapid.T, c cluster, p heal.Plan, s heal.Segment, a heal.Assignment) {
	healthy, counted := 0, 0
	for _, r := range s.Replicas {
		switch {
		case c.live[r] && !slices.Contains(s.Damaged, r):
			healthy++
			counted++
		case !c.live[r] && !c.dead[r]:
			counted++
		}
	}
	planned := len(a.Targets) > 0 || len(a.Drop) > 0
	if healthy == 0 && planned {
		t.Fatalf("segment %d has no healthy copy but got %+v", s.Seal.Segment, a)
	}
	if len(a.Targets) > 0 && (!c.live[a.Source] || !slices.Contains(s.Replicas, a.Source) || slices.Contains(s.Damaged, a.Source)) {
		t.Fatalf("segment %d: source %d is not a live healthy holder", s.Seal.Segment, a.Source)
	}
	checkTargets(t, c, s, a, counted)
	after := slices.Clone(s.Replicas)
	for _, tg := range a.Targets {
		if !slices.Contains(a.Rebuild, tg) {
			after = append(after, tg)
		}
	}
	slices.Sort(after)
	if len(slices.Compact(after)) != len(s.Replicas)+len(a.Targets)-len(a.Rebuild) {
		t.Fatalf("segment %d: a node twice in %v + %v", s.Seal.Segment, s.Replicas, a.Targets)
	}
	if len(a.Drop) > 0 && healthy+len(a.Targets) < factorOf(s) {
		t.Fatalf("segment %d: drops %v with %d healthy copies of %d", s.Seal.Segment, a.Drop, healthy+len(a.Targets), factorOf(s))
	}
	for _, r := range a.Rebuild {
		if slices.Contains(a.Drop, r) {
			t.Fatalf("segment %d: node %d rebuilds its copy and is dropped", s.Seal.Segment, r)
		}
	}
	checkConstraints(t, c, s, a)
	if healthy == 0 || counted >= factorOf(s) {
		return
	}
	// A segment with a healthy source is back at its factor, or says why not.
	if counted+len(a.Targets) >= factorOf(s) {
		return
	}
	usable := 0
	for id := range c.usable {
		if c.usable[id] && (!slices.Contains(s.Replicas, id) || slices.Contains(s.Damaged, id)) {
			usable++
		}
	}
	for _, r := range p.Reports {
		if r.Segment != s.Seal.Segment {
			continue
		}
		if (r.Problem == heal.ShortOfNodes || r.Problem == heal.NoTarget) && counted+usable < factorOf(s) || r.Problem == heal.DomainsRefused {
			return
		}
	}
	t.Fatalf("segment %d: %d of %d copies after %+v, reports %+v", s.Seal.Segment, counted+len(a.Targets), factorOf(s), a, p.Reports)
}

// checkTargets: every target is usable; one that holds the segment
// holds a damaged copy it rebuilds, and only when the usable nodes
// without a copy are too few (or hard constraints refused them alone).
func checkTargets(t *rapid.T, c cluster, s heal.Segment, a heal.Assignment, counted int) {
	fresh := 0
	for id, ok := range c.usable {
		if ok && !slices.Contains(s.Replicas, id) {
			fresh++
		}
	}
	for _, tg := range a.Targets {
		holder := slices.Contains(s.Replicas, tg)
		switch {
		case !c.usable[tg]:
			t.Fatalf("segment %d: target %d is not a usable node (%+v)", s.Seal.Segment, tg, s)
		case holder != slices.Contains(a.Rebuild, tg) || holder && !slices.Contains(s.Damaged, tg):
			t.Fatalf("segment %d: target %d holds a copy but does not rebuild a damaged one (%+v, %+v)", s.Seal.Segment, tg, s, a)
		}
	}
	if len(a.Rebuild) > 0 && counted+fresh >= factorOf(s) && c.cfg.Constraints.Mode != placement.Hard {
		t.Fatalf("segment %d: rebuilds %v while %d nodes without a copy could take one", s.Seal.Segment, a.Rebuild, fresh)
	}
}

// checkConstraints: in hard mode a new set covers MinDomains zones, or
// no more zones than the nodes it could use cover.
func checkConstraints(t *rapid.T, c cluster, s heal.Segment, a heal.Assignment) {
	k := c.cfg.Constraints
	if len(a.Targets) == 0 || k.Mode != placement.Hard || k.MinDomains == 0 {
		return
	}
	zones := map[string]bool{}
	for _, r := range append(slices.Clone(s.Replicas), a.Targets...) {
		damaged := c.live[r] && slices.Contains(s.Damaged, r) && !slices.Contains(a.Rebuild, r)
		if !c.dead[r] && !damaged {
			zones[c.zone[r]] = true
		}
	}
	if len(zones) < k.MinDomains {
		t.Fatalf("segment %d: hard min_domains %d, new set covers %v", s.Seal.Segment, k.MinDomains, zones)
	}
}

// checkOrderFree plans again with every input list reversed.
func checkOrderFree(t *rapid.T, c cluster, p heal.Plan) {
	in := c.in
	in.Live = slices.Clone(in.Live)
	in.Down = slices.Clone(in.Down)
	in.Segments = slices.Clone(in.Segments)
	slices.Reverse(in.Live)
	slices.Reverse(in.Down)
	slices.Reverse(in.Segments)
	q, err := heal.PlanHeals(c.cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p) != fmt.Sprint(q) {
		t.Fatalf("the plan depends on input order:\n%+v\n%+v", p, q)
	}
}
