package heal_test

// The heal task's state machine, event by event with the time as input:
// every transition of placed → filling → verified → recorded → done, and
// every way to failed (timeouts in each state, a lost source or target, a
// damaged, short or unreadable copy, a refused or unanswered record), with
// what each outcome allows: the list submitted only once the targets are
// verified (S3), the replaced copies dropped only after that list is
// recorded, partial copies cleaned up only when no command named them,
// and damaged files deleted only once their drop is recorded (S4).

import (
	"errors"
	"slices"
	"testing"

	"github.com/malachi-log/malachi/internal/heal"
)

var taskCfg = heal.TaskConfig{StartTimeoutMs: 100, StallTimeoutMs: 1000, RecordTimeoutMs: 500}

var taskSeal = heal.Seal{Segment: 9, Base: 0, End: 30, Records: 30, Bytes: 3000, ContentHash: 77}

// assignment: node 1 survives, node 2 is dead, node 3's copy is damaged;
// copy from 1 to 4 and 5, then drop 2 and 3.
func assignment() heal.Assignment {
	return heal.Assignment{Seal: taskSeal, Source: 1, Targets: []uint64{4, 5}, Replicas: []uint64{1, 2, 3},
		Drop: []uint64{2, 3}, Damaged: []uint64{3}}
}

func newTask(t *testing.T, a heal.Assignment, now int64) *heal.Task {
	t.Helper()
	task, err := heal.NewTask(a, taskCfg, now)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func wantState(t *testing.T, task *heal.Task, s heal.State, r heal.Reason) {
	t.Helper()
	if got, reason, detail := task.State(); got != s || reason != r {
		t.Fatalf("state %v (%v: %s), want %v (%v)", got, reason, detail, s, r)
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var wholeCopy = heal.Verdict{Outcome: heal.Whole, At: 30, Records: 30, Bytes: 3000}

// filled drives a task to Verified at time 20.
func filled(t *testing.T) *heal.Task {
	t.Helper()
	task := newTask(t, assignment(), 0)
	ok(t, task.Start(10))
	ok(t, task.Copied(15, 4, wholeCopy))
	wantState(t, task, heal.Filling, heal.NoReason)
	ok(t, task.Copied(20, 5, wholeCopy))
	wantState(t, task, heal.Verified, heal.NoReason)
	return task
}

func TestTaskHappyPath(t *testing.T) {
	task := newTask(t, assignment(), 0)
	wantState(t, task, heal.Placed, heal.NoReason)
	if _, submit := task.Submit(0); submit {
		t.Fatal("a placed task submits a list")
	}
	ok(t, task.Start(10))
	wantState(t, task, heal.Filling, heal.NoReason)
	ok(t, task.Progress(500, 4))
	ok(t, task.Copied(900, 4, wholeCopy))
	ok(t, task.Copied(1000, 5, wholeCopy))
	wantState(t, task, heal.Verified, heal.NoReason)

	add, submit := task.Submit(1000)
	if !submit || add.Segment != 9 || !slices.Equal(add.Expect, []uint64{1, 2, 3}) || !slices.Equal(add.Replicas, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("first command %+v, %v: the targets are added, nothing removed", add, submit)
	}
	if again, _ := task.Submit(1100); !slices.Equal(again.Replicas, add.Replicas) {
		t.Fatalf("resubmitted %+v", again)
	}
	if task.Deletable() != nil {
		t.Fatal("a damaged copy deletable before its drop is recorded")
	}
	ok(t, task.Recorded(1200, nil))
	wantState(t, task, heal.Recorded, heal.NoReason)

	drop, submit := task.Submit(1200)
	if !submit || !slices.Equal(drop.Expect, []uint64{1, 2, 3, 4, 5}) || !slices.Equal(drop.Replicas, []uint64{1, 4, 5}) {
		t.Fatalf("second command %+v, %v: the replaced copies leave", drop, submit)
	}
	if task.Deletable() != nil {
		t.Fatal("a damaged copy deletable while its drop is unanswered")
	}
	ok(t, task.Recorded(1300, nil))
	wantState(t, task, heal.Done, heal.NoReason)
	if !task.Finished() || !slices.Equal(task.Deletable(), []uint64{3}) || task.Cleanup() != nil {
		t.Fatalf("done: deletable %v, cleanup %v", task.Deletable(), task.Cleanup())
	}
}

// With nothing to drop, the recorded list finishes the task.
func TestTaskWithoutDropsIsDoneWhenRecorded(t *testing.T) {
	a := assignment()
	a.Drop, a.Damaged = nil, nil
	task := newTask(t, a, 0)
	ok(t, task.Start(0))
	ok(t, task.Copied(1, 4, wholeCopy))
	ok(t, task.Copied(2, 5, wholeCopy))
	if _, submit := task.Submit(3); !submit {
		t.Fatal("nothing submitted")
	}
	ok(t, task.Recorded(4, nil))
	wantState(t, task, heal.Done, heal.NoReason)
}

// An assignment that only drops starts Recorded.
func TestTaskDropOnly(t *testing.T) {
	task := newTask(t, heal.Assignment{Seal: taskSeal, Replicas: []uint64{1, 2, 3, 4}, Drop: []uint64{4}, Damaged: []uint64{4}}, 0)
	wantState(t, task, heal.Recorded, heal.NoReason)
	cmd, submit := task.Submit(0)
	if !submit || !slices.Equal(cmd.Replicas, []uint64{1, 2, 3}) {
		t.Fatalf("drop: %+v", cmd)
	}
	ok(t, task.Recorded(1, nil))
	if !slices.Equal(task.Deletable(), []uint64{4}) {
		t.Fatalf("deletable %v", task.Deletable())
	}
}

func TestTaskCopyFailures(t *testing.T) {
	cases := map[string]struct {
		v      heal.Verdict
		reason heal.Reason
	}{
		"damaged":     {heal.Verdict{Outcome: heal.Damaged, At: 12, Reason: "crc"}, heal.CopyDamaged},
		"short":       {heal.Verdict{Outcome: heal.Short, At: 20}, heal.CopyDamaged},
		"unreadable":  {heal.Verdict{Outcome: heal.Unreadable}, heal.CopyUnreadable},
		"other count": {heal.Verdict{Outcome: heal.Whole, Records: 29, Bytes: 3000}, heal.CopyDamaged},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			task := newTask(t, assignment(), 0)
			ok(t, task.Start(1))
			ok(t, task.Copied(2, 4, wholeCopy))
			ok(t, task.Copied(3, 5, c.v))
			wantState(t, task, heal.Failed, c.reason)
			if !slices.Equal(task.Cleanup(), []uint64{4, 5}) || task.Deletable() != nil {
				t.Fatalf("cleanup %v, deletable %v", task.Cleanup(), task.Deletable())
			}
		})
	}
}

func TestTaskTimeouts(t *testing.T) {
	t.Run("placed", func(t *testing.T) {
		task := newTask(t, assignment(), 0)
		task.Tick(99)
		wantState(t, task, heal.Placed, heal.NoReason)
		task.Tick(100)
		wantState(t, task, heal.Failed, heal.StartTimeout)
		if len(task.Cleanup()) != 2 {
			t.Fatal("no cleanup after a start timeout")
		}
	})
	t.Run("filling", func(t *testing.T) {
		task := newTask(t, assignment(), 0)
		ok(t, task.Start(10))
		ok(t, task.Progress(900, 5))
		task.Tick(1899)
		wantState(t, task, heal.Filling, heal.NoReason)
		task.Tick(1900)
		wantState(t, task, heal.Failed, heal.Stalled)
	})
	t.Run("verified, never submitted", func(t *testing.T) {
		task := filled(t)
		task.Tick(519)
		wantState(t, task, heal.Verified, heal.NoReason)
		task.Tick(520)
		wantState(t, task, heal.Failed, heal.RecordTimeout)
		if len(task.Cleanup()) != 2 {
			t.Fatal("a list never sent names no target: they may be cleaned up")
		}
	})
	t.Run("verified, submitted, no answer", func(t *testing.T) {
		task := filled(t)
		task.Submit(100)
		task.Tick(599)
		wantState(t, task, heal.Verified, heal.NoReason)
		task.Tick(600)
		wantState(t, task, heal.Failed, heal.RecordUnknown)
		if task.Cleanup() != nil {
			t.Fatal("targets cleaned up though the control plane may have recorded them")
		}
		if err := task.Recorded(700, nil); !errors.Is(err, heal.ErrWrongState) {
			t.Fatalf("an answer after the timeout: %v", err)
		}
	})
	t.Run("recorded, drop unanswered", func(t *testing.T) {
		task := filled(t)
		task.Submit(100)
		ok(t, task.Recorded(200, nil))
		task.Submit(300)
		task.Tick(800)
		wantState(t, task, heal.Failed, heal.RecordUnknown)
		if task.Cleanup() != nil || task.Deletable() != nil {
			t.Fatal("a recorded task's copies touched after a failed drop")
		}
	})
}

func TestTaskRecordRefused(t *testing.T) {
	task := filled(t)
	task.Submit(30)
	ok(t, task.Recorded(40, errors.New("replicas changed")))
	wantState(t, task, heal.Failed, heal.RecordRefused)
	// The refusal is an answer: nothing names the targets.
	if !slices.Equal(task.Cleanup(), []uint64{4, 5}) {
		t.Fatalf("cleanup after a refused list: %v", task.Cleanup())
	}
}

// A refused drop leaves the recorded targets alone and deletes nothing.
func TestTaskDropRefused(t *testing.T) {
	task := filled(t)
	task.Submit(30)
	ok(t, task.Recorded(40, nil))
	task.Submit(50)
	ok(t, task.Recorded(60, errors.New("replicas changed")))
	wantState(t, task, heal.Failed, heal.RecordRefused)
	if task.Cleanup() != nil || task.Deletable() != nil {
		t.Fatalf("cleanup %v, deletable %v after a refused drop", task.Cleanup(), task.Deletable())
	}
}

func TestTaskNodeDown(t *testing.T) {
	t.Run("source while filling", func(t *testing.T) {
		task := newTask(t, assignment(), 0)
		ok(t, task.Start(1))
		task.NodeDown(2, 1)
		wantState(t, task, heal.Failed, heal.SourceLost)
	})
	t.Run("target while placed", func(t *testing.T) {
		task := newTask(t, assignment(), 0)
		task.NodeDown(2, 5)
		wantState(t, task, heal.Failed, heal.TargetLost)
	})
	t.Run("target before submit", func(t *testing.T) {
		task := filled(t)
		task.NodeDown(30, 4)
		wantState(t, task, heal.Failed, heal.TargetLost)
	})
	t.Run("source once verified", func(t *testing.T) {
		task := filled(t)
		task.NodeDown(30, 1)
		wantState(t, task, heal.Verified, heal.NoReason)
	})
	t.Run("target after submit", func(t *testing.T) {
		task := filled(t)
		task.Submit(30)
		task.NodeDown(31, 4)
		wantState(t, task, heal.Verified, heal.NoReason)
	})
	t.Run("another node", func(t *testing.T) {
		task := newTask(t, assignment(), 0)
		task.NodeDown(1, 77)
		wantState(t, task, heal.Placed, heal.NoReason)
	})
}

func TestTaskRefusesEventsOutOfState(t *testing.T) {
	task := newTask(t, assignment(), 0)
	for name, err := range map[string]error{
		"progress while placed": task.Progress(1, 4),
		"copied while placed":   task.Copied(1, 4, wholeCopy),
		"recorded while placed": task.Recorded(1, nil),
	} {
		if !errors.Is(err, heal.ErrWrongState) {
			t.Errorf("%s: %v", name, err)
		}
	}
	ok(t, task.Start(1))
	for name, err := range map[string]error{
		"start twice":            task.Start(2),
		"copied by a stranger":   task.Copied(2, 9, wholeCopy),
		"progress by the source": task.Progress(2, 1),
		"recorded before submit": task.Recorded(2, nil),
	} {
		if !errors.Is(err, heal.ErrWrongState) {
			t.Errorf("%s: %v", name, err)
		}
	}
	wantState(t, task, heal.Filling, heal.NoReason)
}

func TestNewTaskRefusals(t *testing.T) {
	if _, err := heal.NewTask(heal.Assignment{Seal: taskSeal, Replicas: []uint64{1}}, taskCfg, 0); err == nil {
		t.Error("a task with nothing to do")
	}
	if _, err := heal.NewTask(assignment(), heal.TaskConfig{}, 0); err == nil {
		t.Error("zero timeouts")
	}
}

// A failover seal records no counts: a whole verdict is enough.
func TestTaskUncountedSeal(t *testing.T) {
	a := assignment()
	a.Seal = heal.Seal{Segment: 9, Base: 0, End: 30}
	a.Targets = []uint64{4}
	task := newTask(t, a, 0)
	ok(t, task.Start(1))
	ok(t, task.Copied(2, 4, heal.Verdict{Outcome: heal.Whole, At: 30, Records: 17, Bytes: 999}))
	wantState(t, task, heal.Verified, heal.NoReason)
}
