package heal_test

// The planner on small clusters written out by hand: which segments get a
// task, from which source to which targets, what is dropped and what is
// reported, with the grace, the disks, the constraints, the budgets and
// the segments already healing. plan_property_test.go checks the same
// rules on random clusters.

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/placement"
)

const grace = 60_000

func liveNodes(ids ...uint64) []heal.Node {
	out := make([]heal.Node, len(ids))
	for i, id := range ids {
		out[i] = heal.Node{ID: id}
	}
	return out
}

func seg(id uint64, factor int, replicas ...uint64) heal.Segment {
	return heal.Segment{Seal: heal.Seal{Segment: id, End: 10, Records: 10, Bytes: 100}, Topic: "t", Range: 1,
		Replicas: replicas, Factor: factor}
}

func plan(t *testing.T, cfg heal.Config, in heal.Input) heal.Plan {
	t.Helper()
	if cfg.DeadAfterMs == 0 {
		cfg.DeadAfterMs = grace
	}
	p, err := heal.PlanHeals(cfg, in)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantReport(t *testing.T, p heal.Plan, segment uint64, pr heal.Problem) heal.Report {
	t.Helper()
	for _, r := range p.Reports {
		if r.Segment == segment && r.Problem == pr {
			return r
		}
	}
	t.Fatalf("no %v report for segment %d in %+v", pr, segment, p.Reports)
	return heal.Report{}
}

func TestPlanHealsAroundADeadNode(t *testing.T) {
	in := heal.Input{Now: grace, Segments: []heal.Segment{seg(1, 3, 1, 2, 3)}, Live: liveNodes(1, 2, 4, 5),
		Down: []heal.Down{{ID: 3, SinceMs: 0}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 1 || len(p.Reports) != 0 {
		t.Fatalf("plan %+v", p)
	}
	a := p.Tasks[0]
	if (a.Source != 1 && a.Source != 2) || len(a.Targets) != 1 || (a.Targets[0] != 4 && a.Targets[0] != 5) {
		t.Fatalf("task %+v", a)
	}
	if !slices.Equal(a.Drop, []uint64{3}) || len(a.Damaged) != 0 || !slices.Equal(a.Replicas, []uint64{1, 2, 3}) {
		t.Fatalf("task %+v: the dead copy leaves after the new one is recorded", a)
	}
}

// Within the grace a down node's copy still counts: nothing is copied.
func TestPlanWaitsOutTheGrace(t *testing.T) {
	in := heal.Input{Now: grace - 1, Segments: []heal.Segment{seg(1, 3, 1, 2, 3), seg(2, 3, 2, 3, 4)},
		Live: liveNodes(1, 4, 5), Down: []heal.Down{{ID: 2, SinceMs: 0}, {ID: 3, SinceMs: 0}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 0 || len(p.Reports) != 0 {
		t.Fatalf("plan %+v", p)
	}
	// A node nobody reports is not taken for dead either, but the wait
	// for it, which only membership or an operator can end, is reported.
	in = heal.Input{Now: 10 * grace, Segments: []heal.Segment{seg(1, 3, 1, 2, 99)}, Live: liveNodes(1, 2, 3)}
	p = plan(t, heal.Config{}, in)
	if len(p.Tasks) != 0 || len(p.Reports) != 1 {
		t.Fatalf("healed around an unknown node: %+v", p)
	}
	wantReport(t, p, 1, heal.Unknown)
}

// An unknown holder is reported only where the segment needs its copy:
// not when the healthy copies make the factor alone, and apart from the
// nodes down within the grace, which are Waiting.
func TestPlanReportsUnknownHoldersOnlyWhereTheyCount(t *testing.T) {
	in := heal.Input{Now: grace - 1, Live: liveNodes(1, 2, 3), Down: []heal.Down{{ID: 4, SinceMs: 0}},
		Segments: []heal.Segment{seg(1, 2, 1, 2, 99), seg(2, 3, 99, 4), seg(3, 2, 98, 99)}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v", p)
	}
	if r := wantReport(t, p, 2, heal.Waiting); !strings.Contains(r.Detail, "[4]") {
		t.Fatalf("waiting report %+v names more than the node down", r)
	}
	r2, r3 := wantReport(t, p, 2, heal.Unknown), wantReport(t, p, 3, heal.Unknown)
	if !strings.Contains(r2.Detail, "[99]") || !strings.Contains(r3.Detail, "[98 99]") {
		t.Fatalf("unknown reports %+v %+v", r2, r3)
	}
	if len(p.Reports) != 3 {
		t.Fatalf("reports %+v: segment 1 has its factor in healthy copies", p.Reports)
	}
}

func TestPlanReplacesADamagedCopy(t *testing.T) {
	s := seg(1, 3, 1, 2, 3)
	s.Damaged = []uint64{2}
	s.Verified = []uint64{3}
	p := plan(t, heal.Config{}, heal.Input{Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 3, 4)})
	if len(p.Tasks) != 1 {
		t.Fatalf("plan %+v", p)
	}
	a := p.Tasks[0]
	if a.Source != 3 || !slices.Equal(a.Targets, []uint64{4}) || !slices.Equal(a.Drop, []uint64{2}) || !slices.Equal(a.Damaged, []uint64{2}) {
		t.Fatalf("task %+v: a verified source, the one node without a copy, then drop the damaged one", a)
	}
}

// With only damaged copies left nothing is copied or dropped: they are
// kept and reported.
func TestPlanKeepsTheLastDamagedCopies(t *testing.T) {
	s := seg(1, 3, 1, 2, 3)
	s.Damaged = []uint64{1, 2}
	in := heal.Input{Now: grace, Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 4), Down: []heal.Down{{ID: 3}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v", p)
	}
	wantReport(t, p, 1, heal.NoHealthySource)
}

func TestPlanReportsLostAndWaiting(t *testing.T) {
	in := heal.Input{Now: grace, Segments: []heal.Segment{seg(1, 2, 1, 2), seg(2, 2, 1, 3)}, Live: liveNodes(4, 5),
		Down: []heal.Down{{ID: 1, SinceMs: 0}, {ID: 2, SinceMs: 0}, {ID: 3, SinceMs: 1}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v", p)
	}
	wantReport(t, p, 1, heal.Lost)
	wantReport(t, p, 2, heal.Waiting)
}

func TestPlanAvoidsFullFailingAndHoldingNodes(t *testing.T) {
	s := seg(1, 4, 1, 2, 3)
	s.Damaged = []uint64{3}
	// Node 3's full disk keeps it from rebuilding its damaged copy.
	live := []heal.Node{{ID: 1}, {ID: 2}, {ID: 3, Full: true}, {ID: 4, Full: true}, {ID: 5, Failing: true}, {ID: 6}}
	p := plan(t, heal.Config{}, heal.Input{Segments: []heal.Segment{s}, Live: live})
	if len(p.Tasks) != 1 || !slices.Equal(p.Tasks[0].Targets, []uint64{6}) {
		t.Fatalf("plan %+v: only node 6 may take a copy", p)
	}
	// Two copies were needed and one placed: short, and nothing dropped.
	if p.Tasks[0].Drop != nil {
		t.Fatalf("dropped %v while short of the factor", p.Tasks[0].Drop)
	}
	wantReport(t, p, 1, heal.ShortOfNodes)

	p = plan(t, heal.Config{}, heal.Input{Segments: []heal.Segment{s}, Live: live[:5]})
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v", p)
	}
	wantReport(t, p, 1, heal.NoTarget)
}

// A full disk's copy still counts and still serves as a source.
func TestPlanFullDiskStillServes(t *testing.T) {
	in := heal.Input{Now: grace, Segments: []heal.Segment{seg(1, 2, 1, 2)}, Live: []heal.Node{{ID: 1, Full: true}, {ID: 3}},
		Down: []heal.Down{{ID: 2}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 1 || p.Tasks[0].Source != 1 || !slices.Equal(p.Tasks[0].Targets, []uint64{3}) {
		t.Fatalf("plan %+v", p)
	}
}

func zoned(zones map[uint64]string) []heal.Node {
	var out []heal.Node
	for id := uint64(1); id <= uint64(len(zones)); id++ {
		out = append(out, heal.Node{ID: id, Attributes: map[string]string{"zone": zones[id]}})
	}
	return out
}

func TestPlanHonoursSpread(t *testing.T) {
	// Survivors in zones a and b; the new copy must go to zone c.
	live := zoned(map[uint64]string{1: "a", 2: "b", 3: "a", 4: "b", 5: "c", 6: "a"})
	in := heal.Input{Now: grace, Segments: []heal.Segment{seg(1, 3, 1, 2, 9)}, Live: live, Down: []heal.Down{{ID: 9}}}
	cfg := heal.Config{Constraints: placement.Constraints{SpreadBy: "zone", MinDomains: 3, Mode: placement.Hard}}
	p := plan(t, cfg, in)
	if len(p.Tasks) != 1 || !slices.Equal(p.Tasks[0].Targets, []uint64{5}) {
		t.Fatalf("plan %+v", p)
	}
	// Without zone c: hard refuses, soft places and reports.
	in.Live = live[:4]
	p = plan(t, cfg, in)
	if len(p.Tasks) != 0 {
		t.Fatalf("hard mode placed %+v", p.Tasks)
	}
	if r := wantReport(t, p, 1, heal.DomainsRefused); !strings.Contains(r.Detail, "min_domains") {
		t.Fatalf("report %+v", r)
	}
	cfg.Constraints.Mode = placement.Soft
	p = plan(t, cfg, in)
	if len(p.Tasks) != 1 {
		t.Fatalf("soft mode: %+v", p)
	}
	wantReport(t, p, 1, heal.DomainsViolated)
}

func TestPlanBudgets(t *testing.T) {
	down := []heal.Down{{ID: 9}}
	segs := []heal.Segment{seg(1, 2, 1, 9), seg(2, 2, 1, 9), seg(3, 2, 1, 9), seg(4, 2, 2, 9)}
	in := heal.Input{Now: grace, Segments: segs, Live: liveNodes(1, 2, 3, 4, 5, 6), Down: down}

	// Node 1 is the only source of segments 1-3: two at a time.
	p := plan(t, heal.Config{MaxTasksPerNode: 2}, in)
	if len(p.Tasks) != 3 {
		t.Fatalf("plan %+v", p)
	}
	wantReport(t, p, 3, heal.Busy)
	for _, a := range p.Tasks {
		if a.Seal.Segment == 3 {
			t.Fatal("segment 3 planned past its source's budget")
		}
	}

	p = plan(t, heal.Config{MaxTasks: 2, MaxTasksPerNode: 10}, in)
	if len(p.Tasks) != 2 {
		t.Fatalf("plan %+v", p)
	}
	wantReport(t, p, 3, heal.OverBudget)

	// A segment already healing is not planned again, and its task uses
	// the budget.
	in.InFlight = []heal.Assignment{{Seal: heal.Seal{Segment: 1}, Source: 1, Targets: []uint64{3}}}
	p = plan(t, heal.Config{MaxTasksPerNode: 2}, in)
	for _, a := range p.Tasks {
		if a.Seal.Segment == 1 {
			t.Fatal("a segment in flight planned again")
		}
	}
	if len(p.Tasks) != 2 {
		t.Fatalf("plan %+v", p)
	}
}

// The most endangered segments take the budget first.
func TestPlanMostEndangeredFirst(t *testing.T) {
	segs := []heal.Segment{seg(1, 3, 1, 2, 9), seg(2, 3, 1, 8, 9)}
	in := heal.Input{Now: grace, Segments: segs, Live: liveNodes(1, 2, 3, 4, 5), Down: []heal.Down{{ID: 8}, {ID: 9}}}
	p := plan(t, heal.Config{MaxTasks: 1}, in)
	if len(p.Tasks) != 1 || p.Tasks[0].Seal.Segment != 2 || len(p.Tasks[0].Targets) != 2 {
		t.Fatalf("plan %+v", p)
	}
}

// A segment back at its factor whose list still names a dead or damaged
// copy gets a task that only drops it.
func TestPlanDropsStaleEntries(t *testing.T) {
	s := seg(1, 2, 1, 2, 3, 4)
	s.Damaged = []uint64{4}
	in := heal.Input{Now: grace, Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 4), Down: []heal.Down{{ID: 3}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 1 || p.Tasks[0].Targets != nil || !slices.Equal(p.Tasks[0].Drop, []uint64{3, 4}) {
		t.Fatalf("plan %+v", p)
	}
}

func TestPlanRefusesDuplicateNodes(t *testing.T) {
	for _, in := range []heal.Input{
		{Live: liveNodes(1, 1)},
		{Live: liveNodes(1), Down: []heal.Down{{ID: 1}}},
	} {
		if _, err := heal.PlanHeals(heal.Config{}, in); !errors.Is(err, heal.ErrInvalidInput) {
			t.Errorf("%+v: %v", in, err)
		}
	}
	if _, err := heal.PlanHeals(heal.Config{MaxTasks: -1}, heal.Input{}); err == nil {
		t.Error("a negative budget accepted")
	}
}
