package heal_test

// A task whose target is a damaged holder rebuilding its own copy: the
// fresh copy is verified before any command, the holder then leaves the
// list (which clears its damage mark) and rejoins it, and only then are
// the other replaced copies dropped. The rebuilding holder's copy is
// never deleted while the list still names it.

import (
	"errors"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

// rebuildAssignment: node 1 is whole, node 2 is dead, node 3's copy is
// damaged and every live node holds a copy; node 3 rebuilds from 1.
func rebuildAssignment() heal.Assignment {
	return heal.Assignment{Seal: taskSeal, Source: 1, Targets: []uint64{3}, Replicas: []uint64{3, 1, 2},
		Drop: []uint64{2}, Damaged: []uint64{3}, Rebuild: []uint64{3}}
}

func rebuilt(t *testing.T, a heal.Assignment) *heal.Task {
	t.Helper()
	task := newTask(t, a, 0)
	ok(t, task.Start(1))
	ok(t, task.Copied(2, 3, wholeCopy))
	wantState(t, task, heal.Verified, heal.NoReason)
	return task
}

func wantCommand(t *testing.T, task *heal.Task, now int64, expect, replicas []uint64) {
	t.Helper()
	cmd, submit := task.Submit(now)
	if !submit || cmd.Segment != taskSeal.Segment || !slices.Equal(cmd.Expect, expect) || !slices.Equal(cmd.Replicas, replicas) {
		t.Fatalf("command %+v (%v), want %v → %v", cmd, submit, expect, replicas)
	}
}

func TestTaskRebuildsADamagedHolder(t *testing.T) {
	task := newTask(t, rebuildAssignment(), 0)
	if _, submit := task.Submit(0); submit {
		t.Fatal("a list submitted before the fresh copy is verified")
	}
	ok(t, task.Start(1))
	ok(t, task.Copied(2, 3, wholeCopy))
	wantState(t, task, heal.Verified, heal.NoReason)

	// The holder leaves the list (its mark with it), the healthy copy and
	// the dead one stay.
	wantCommand(t, task, 3, []uint64{3, 1, 2}, []uint64{1, 2})
	wantCommand(t, task, 4, []uint64{3, 1, 2}, []uint64{1, 2}) // repeated until answered
	ok(t, task.Recorded(5, nil))
	wantState(t, task, heal.Verified, heal.NoReason)

	// It rejoins with its verified copy, then the dead copy leaves.
	wantCommand(t, task, 6, []uint64{1, 2}, []uint64{1, 2, 3})
	ok(t, task.Recorded(7, nil))
	wantState(t, task, heal.Recorded, heal.NoReason)
	wantCommand(t, task, 8, []uint64{1, 2, 3}, []uint64{1, 3})
	ok(t, task.Recorded(9, nil))
	wantState(t, task, heal.Done, heal.NoReason)
	if task.Deletable() != nil {
		t.Fatalf("deletable %v: the rebuilt copy is listed, the dead one is its node's", task.Deletable())
	}
}

// Next to a fresh target, the rebuilding holder rejoins in the same
// command that adds the fresh one.
func TestTaskRebuildsBesideAFreshTarget(t *testing.T) {
	a := heal.Assignment{Seal: taskSeal, Source: 1, Targets: []uint64{4, 3}, Replicas: []uint64{1, 2, 3},
		Drop: []uint64{2}, Damaged: []uint64{2, 3}, Rebuild: []uint64{3}}
	task := newTask(t, a, 0)
	ok(t, task.Start(1))
	ok(t, task.Copied(2, 4, wholeCopy))
	ok(t, task.Copied(3, 3, wholeCopy))
	wantCommand(t, task, 4, []uint64{1, 2, 3}, []uint64{1, 2})
	ok(t, task.Recorded(5, nil))
	wantCommand(t, task, 6, []uint64{1, 2}, []uint64{1, 2, 4, 3})
	ok(t, task.Recorded(7, nil))
	wantCommand(t, task, 8, []uint64{1, 2, 4, 3}, []uint64{1, 4, 3})
	ok(t, task.Recorded(9, nil))
	if !slices.Equal(task.Deletable(), []uint64{2}) {
		t.Fatalf("deletable %v, want the dropped damaged copy", task.Deletable())
	}
}

// While the list names the rebuilding holder its copy is kept, whatever
// the failure; once it left the list and the rejoin was refused, nothing
// names the copy and it may go.
func TestTaskRebuildCleanup(t *testing.T) {
	task := newTask(t, rebuildAssignment(), 0)
	ok(t, task.Start(1))
	ok(t, task.Copied(2, 3, heal.Verdict{Outcome: heal.Damaged, At: 10}))
	wantState(t, task, heal.Failed, heal.CopyDamaged)
	if c := task.Cleanup(); c != nil {
		t.Fatalf("cleanup %v of a holder the list still names", c)
	}

	task = rebuilt(t, rebuildAssignment())
	task.Submit(3)
	ok(t, task.Recorded(4, errors.New("replicas changed")))
	wantState(t, task, heal.Failed, heal.RecordRefused)
	if c := task.Cleanup(); c != nil {
		t.Fatalf("cleanup %v after the leave was refused", c)
	}

	task = rebuilt(t, rebuildAssignment())
	task.Submit(3)
	ok(t, task.Recorded(4, nil))
	task.Submit(5)
	ok(t, task.Recorded(6, errors.New("replicas changed")))
	wantState(t, task, heal.Failed, heal.RecordRefused)
	if c := task.Cleanup(); !slices.Equal(c, []uint64{3}) {
		t.Fatalf("cleanup %v after the rejoin was refused, want [3]", c)
	}

	task = rebuilt(t, rebuildAssignment())
	task.Submit(3)
	task.Tick(3 + taskCfg.RecordTimeoutMs)
	wantState(t, task, heal.Failed, heal.RecordUnknown)
	if c := task.Cleanup(); c != nil {
		t.Fatalf("cleanup %v after an unanswered leave", c)
	}
}

func TestNewTaskRefusesABadRebuild(t *testing.T) {
	for name, change := range map[string]func(*heal.Assignment){
		"not a target": func(a *heal.Assignment) { a.Rebuild = []uint64{1} },
		"not a holder": func(a *heal.Assignment) { a.Targets, a.Rebuild = []uint64{4}, []uint64{4} },
		"dropped":      func(a *heal.Assignment) { a.Drop = []uint64{2, 3} },
	} {
		a := rebuildAssignment()
		change(&a)
		if _, err := heal.NewTask(a, taskCfg, 0); err == nil {
			t.Errorf("%s: accepted %+v", name, a)
		}
	}
}
