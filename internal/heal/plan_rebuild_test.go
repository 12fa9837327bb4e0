package heal_test

// When every live node with a healthy disk already holds a copy and some
// copies are damaged, a damaged holder rebuilds its own copy from a
// healthy one; nodes without a copy are still preferred, and nothing is
// rebuilt without a healthy source.

import (
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

func TestPlanRebuildsWhenEveryNodeHoldsACopy(t *testing.T) {
	s := seg(1, 3, 1, 2, 3)
	s.Damaged = []uint64{2}
	p := plan(t, heal.Config{}, heal.Input{Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 3)})
	if len(p.Tasks) != 1 || len(p.Reports) != 0 {
		t.Fatalf("plan %+v", p)
	}
	a := p.Tasks[0]
	if a.Source == 2 || !slices.Equal(a.Targets, []uint64{2}) || !slices.Equal(a.Rebuild, []uint64{2}) || a.Drop != nil {
		t.Fatalf("task %+v: node 2 rebuilds from a healthy holder and is not dropped", a)
	}
	if _, err := heal.NewTask(a, taskCfg, 0); err != nil {
		t.Fatalf("the planned rebuild is not a valid task: %v", err)
	}
}

// A node lost and two damaged copies among four live nodes: the node
// without a copy is taken first, then one damaged holder rebuilds; the
// dead copy and the other damaged one leave once both are recorded.
func TestPlanPrefersNodesWithoutACopy(t *testing.T) {
	s := seg(1, 3, 1, 2, 3, 5)
	s.Damaged = []uint64{2, 3}
	in := heal.Input{Now: grace, Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 3, 4), Down: []heal.Down{{ID: 5}}}
	p := plan(t, heal.Config{}, in)
	if len(p.Tasks) != 1 {
		t.Fatalf("plan %+v", p)
	}
	a := p.Tasks[0]
	if a.Source != 1 || len(a.Targets) != 2 || !slices.Contains(a.Targets, 4) || len(a.Rebuild) != 1 {
		t.Fatalf("task %+v: node 4 and one damaged holder", a)
	}
	r := a.Rebuild[0]
	other := uint64(5 - r) // 2 or 3, whichever does not rebuild
	if !slices.Contains(a.Targets, r) || !slices.Equal(a.Drop, []uint64{5, other}) {
		t.Fatalf("task %+v: drop the dead copy and the damaged copy not rebuilt", a)
	}
}

func TestPlanRebuildNeedsAHealthySourceAndDisk(t *testing.T) {
	s := seg(1, 3, 1, 2, 3)
	s.Damaged = []uint64{1, 2, 3}
	p := plan(t, heal.Config{}, heal.Input{Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 3)})
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v: every copy is damaged", p)
	}
	wantReport(t, p, 1, heal.NoHealthySource)

	s.Damaged = []uint64{2}
	live := []heal.Node{{ID: 1}, {ID: 2, Failing: true}, {ID: 3}}
	p = plan(t, heal.Config{}, heal.Input{Segments: []heal.Segment{s}, Live: live})
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v: node 2's disk is failing", p)
	}
	wantReport(t, p, 1, heal.NoTarget)
}

// A rebuild takes the target's budget like any copy.
func TestPlanRebuildIsBudgeted(t *testing.T) {
	s := seg(1, 3, 1, 2, 3)
	s.Damaged = []uint64{3}
	busy := heal.Assignment{Seal: heal.Seal{Segment: 7}, Source: 1, Targets: []uint64{3}}
	in := heal.Input{Segments: []heal.Segment{s}, Live: liveNodes(1, 2, 3), InFlight: []heal.Assignment{busy}}
	p := plan(t, heal.Config{MaxTasksPerNode: 1}, in)
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v: node 3 is at its budget", p)
	}
	wantReport(t, p, 1, heal.Busy)
}
