package heal_test

// Nodes an operator removed from the cluster (Input.Removed): their copies
// are dead at once, whatever the grace and whatever membership still says
// of them, and are healed around exactly as a dead node's; a node merely
// missing from membership is still a doubt and its copies still count.

import (
	"errors"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

// forever is a grace no test outlives: only removal can make a copy dead.
const forever = int64(1) << 50

func TestPlanHealsAroundARemovedNodeAtOnce(t *testing.T) {
	cfg := heal.Config{DeadAfterMs: forever}
	for _, tc := range []struct {
		name string
		down []heal.Down
	}{
		{"unknown to membership", nil},
		{"down a moment ago", []heal.Down{{ID: 3, SinceMs: 1000}}},
	} {
		in := heal.Input{Now: 1000, Segments: []heal.Segment{seg(1, 3, 1, 2, 3)}, Live: liveNodes(1, 2, 4),
			Down: tc.down, Removed: []uint64{3}}
		p := plan(t, cfg, in)
		if len(p.Tasks) != 1 || len(p.Reports) != 0 {
			t.Fatalf("%s: plan %+v", tc.name, p)
		}
		a := p.Tasks[0]
		if !slices.Equal(a.Targets, []uint64{4}) || (a.Source != 1 && a.Source != 2) {
			t.Fatalf("%s: task %+v: copy from a live holder to the one node without a copy", tc.name, a)
		}
		if !slices.Equal(a.Drop, []uint64{3}) || !slices.Equal(a.Replicas, []uint64{1, 2, 3}) {
			t.Fatalf("%s: task %+v: the removed copy leaves once the new one is recorded", tc.name, a)
		}

		// The same node down as long, but not removed, is waited for;
		// one membership does not know is reported, since nothing but
		// membership or an operator ends that wait.
		in.Removed = nil
		p = plan(t, cfg, in)
		unknown := 0
		if tc.down == nil {
			unknown = 1
			wantReport(t, p, 1, heal.Unknown)
		}
		if len(p.Tasks) != 0 || len(p.Reports) != unknown {
			t.Fatalf("%s, not removed: plan %+v", tc.name, p)
		}
	}
}

// A list that already holds the factor in healthy copies just drops the
// removed one.
func TestPlanDropsARemovedCopy(t *testing.T) {
	in := heal.Input{Now: 1, Segments: []heal.Segment{seg(1, 2, 1, 2, 3)}, Live: liveNodes(1, 2), Removed: []uint64{3}}
	p := plan(t, heal.Config{DeadAfterMs: forever}, in)
	if len(p.Tasks) != 1 || p.Tasks[0].Targets != nil || !slices.Equal(p.Tasks[0].Drop, []uint64{3}) {
		t.Fatalf("plan %+v", p)
	}
}

// A segment whose only copy was on a removed node is reported lost; one
// whose only copy is on a node nobody reports still counts that copy,
// and says so.
func TestPlanReportsARemovedNodesOnlyCopyLost(t *testing.T) {
	in := heal.Input{Now: 1, Segments: []heal.Segment{seg(1, 1, 3), seg(2, 1, 9)}, Live: liveNodes(1, 2),
		Removed: []uint64{3}}
	p := plan(t, heal.Config{DeadAfterMs: forever}, in)
	if len(p.Tasks) != 0 {
		t.Fatalf("plan %+v", p)
	}
	wantReport(t, p, 1, heal.Lost)
	wantReport(t, p, 2, heal.Unknown)
	if len(p.Reports) != 2 {
		t.Fatalf("reports %+v: the copy on an unknown node counts", p.Reports)
	}
}

// Removing one node says nothing of another missing from membership.
func TestPlanRemovalIsNoGuessAboutOthers(t *testing.T) {
	in := heal.Input{Now: 1, Segments: []heal.Segment{seg(1, 3, 1, 2, 99)}, Live: liveNodes(1, 2, 3),
		Removed: []uint64{98}}
	if p := plan(t, heal.Config{DeadAfterMs: forever}, in); len(p.Tasks) != 0 {
		t.Fatalf("healed around an unknown node: %+v", p)
	}
}

// A node cannot be live and removed: the input contradicts itself.
func TestPlanRefusesALiveRemovedNode(t *testing.T) {
	in := heal.Input{Segments: []heal.Segment{seg(1, 3, 1, 2, 3)}, Live: liveNodes(1, 2, 3, 4), Removed: []uint64{3}}
	if _, err := heal.PlanHeals(heal.Config{}, in); !errors.Is(err, heal.ErrInvalidInput) {
		t.Fatalf("live and removed: %v", err)
	}
}
