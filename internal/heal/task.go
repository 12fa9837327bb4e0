package heal

import (
	"errors"
	"fmt"
	"slices"
)

// State is where a heal task stands.
type State uint8

const (
	// Placed: targets chosen; no copy has started.
	Placed State = iota
	// Filling: the targets are copying from the source.
	Filling
	// Verified: every target holds a copy verified against the seal;
	// the new replica list may be submitted.
	Verified
	// Recorded: the control plane recorded the list with the targets;
	// the copies being replaced may now leave it.
	Recorded
	// Done: everything is recorded; dropped damaged copies may be deleted.
	Done
	// Failed: the task stopped; Reason says why.
	Failed
)

func (s State) String() string {
	switch s {
	case Placed:
		return "placed"
	case Filling:
		return "filling"
	case Verified:
		return "verified"
	case Recorded:
		return "recorded"
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("state-%d", uint8(s))
}

// Reason says why a task failed.
type Reason uint8

const (
	NoReason Reason = iota
	// StartTimeout: no copy began within TaskConfig.StartTimeoutMs.
	StartTimeout
	// Stalled: a copy made no progress within TaskConfig.StallTimeoutMs.
	Stalled
	// SourceLost: the source went down before every target was filled.
	SourceLost
	// TargetLost: a target went down before its copy was recorded.
	TargetLost
	// CopyDamaged: a target's copy did not verify (damaged or short).
	CopyDamaged
	// CopyUnreadable: a target could not read back its copy to verify it.
	CopyUnreadable
	// RecordRefused: the control plane refused the new list (it changed
	// since the plan, or the segment is gone).
	RecordRefused
	// RecordUnknown: a submitted list got no answer in time; it may have
	// been recorded, so nothing is deleted on its account.
	RecordUnknown
	// RecordTimeout: the verified list was never submitted in time.
	RecordTimeout
)

func (r Reason) String() string {
	names := [...]string{"none", "start timeout", "stalled", "source lost", "target lost", "copy damaged",
		"copy unreadable", "record refused", "record unknown", "record timeout"}
	if int(r) < len(names) {
		return names[r]
	}
	return fmt.Sprintf("reason-%d", uint8(r))
}

// TaskConfig bounds how long a task may sit in each state.
type TaskConfig struct {
	StartTimeoutMs  int64 // Placed: until the first copy call
	StallTimeoutMs  int64 // Filling: between progress reports
	RecordTimeoutMs int64 // Verified and Recorded: until the control plane answers
}

// Validate checks that every timeout is positive.
func (c TaskConfig) Validate() error {
	if c.StartTimeoutMs <= 0 || c.StallTimeoutMs <= 0 || c.RecordTimeoutMs <= 0 {
		return fmt.Errorf("heal: task timeouts %d, %d and %d ms must be positive", c.StartTimeoutMs, c.StallTimeoutMs, c.RecordTimeoutMs)
	}
	return nil
}

// SetReplicas is the control-plane command a task submits: set segment
// Segment's replica list to Replicas if it is still Expect. The
// condition keeps a task planned on an old view from undoing a change
// made since (another heal, a failover moving the primary).
type SetReplicas struct {
	Segment  uint64
	Expect   []uint64
	Replicas []uint64
}

// ErrWrongState refuses an event a task cannot take in its state.
var ErrWrongState = errors.New("heal: event does not apply in this state")

// Task is one heal's state machine. The caller drives it with events
// and the time; it answers what to do next and never does it.
type Task struct {
	Assignment
	cfg      TaskConfig
	state    State
	reason   Reason
	detail   string
	deadline int64
	verified []bool // per target
	// submitted is set while a SetReplicas awaits its answer; sent
	// records that one ever went out, which forbids cleaning up.
	submitted, sent bool
	// cleared: the list without the rebuilding holders is recorded, so
	// their damage marks are gone and their fresh copies may be added.
	cleared bool
}

// NewTask starts the task for a, placed at now. An assignment with no
// targets only drops copies: it starts Recorded.
func NewTask(a Assignment, cfg TaskConfig, now int64) (*Task, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(a.Targets) == 0 && len(a.Drop) == 0 {
		return nil, fmt.Errorf("heal: segment %d: a task with no target and nothing to drop", a.Seal.Segment)
	}
	for _, id := range a.Rebuild {
		if !slices.Contains(a.Targets, id) || !slices.Contains(a.Replicas, id) || slices.Contains(a.Drop, id) {
			return nil, fmt.Errorf("heal: segment %d: node %d rebuilds its copy, so it must be a target and a holder and not be dropped",
				a.Seal.Segment, id)
		}
	}
	t := &Task{Assignment: a, cfg: cfg, verified: make([]bool, len(a.Targets))}
	if len(a.Targets) == 0 {
		t.enter(Recorded, now+cfg.RecordTimeoutMs)
	} else {
		t.enter(Placed, now+cfg.StartTimeoutMs)
	}
	return t, nil
}

// State answers the task's state, and for a failed task why.
func (t *Task) State() (State, Reason, string) { return t.state, t.reason, t.detail }

// Finished reports whether the task is Done or Failed.
func (t *Task) Finished() bool { return t.state == Done || t.state == Failed }

func (t *Task) enter(s State, deadline int64) {
	t.state, t.deadline = s, deadline
}

func (t *Task) fail(r Reason, format string, args ...any) {
	t.state, t.reason, t.detail = Failed, r, fmt.Sprintf(format, args...)
	t.submitted = false
}

// Start: the first copy call went out.
func (t *Task) Start(now int64) error {
	if t.state != Placed {
		return t.wrong("start")
	}
	t.enter(Filling, now+t.cfg.StallTimeoutMs)
	return nil
}

// Progress: a target received bytes; the stall deadline moves on.
func (t *Task) Progress(now int64, target uint64) error {
	if t.state != Filling || !slices.Contains(t.Targets, target) {
		return t.wrong("progress")
	}
	t.deadline = now + t.cfg.StallTimeoutMs
	return nil
}

// Copied: target finished its copy and verified it, with verdict v. A
// whole copy that matches the seal's counts counts; anything else fails
// the task. Once every target counts, the task is Verified.
func (t *Task) Copied(now int64, target uint64, v Verdict) error {
	i := slices.Index(t.Targets, target)
	if t.state != Filling || i < 0 {
		return t.wrong("copied")
	}
	switch {
	case v.Outcome == Unreadable:
		t.fail(CopyUnreadable, "node %d: %v", target, v)
		return nil
	case !v.Whole():
		t.fail(CopyDamaged, "node %d: %v", target, v)
		return nil
	case t.Seal.Counted() && (v.Records != t.Seal.Records || v.Bytes != t.Seal.Bytes):
		t.fail(CopyDamaged, "node %d verified %d records, %d bytes; the seal says %d, %d",
			target, v.Records, v.Bytes, t.Seal.Records, t.Seal.Bytes)
		return nil
	}
	t.verified[i] = true
	if !slices.Contains(t.verified, false) {
		t.enter(Verified, now+t.cfg.RecordTimeoutMs)
	} else {
		t.deadline = now + t.cfg.StallTimeoutMs
	}
	return nil
}

// Submit answers the command to send now, if any: in Verified the list
// with the targets added, in Recorded the list without the copies being
// replaced. Calling it again before the answer returns the same command.
//
// With holders rebuilding their copies, Verified first sends the list
// without them: the metadata clears a damage mark only when its holder
// leaves the list, and their fresh copies, verified already, must not be
// listed as damaged. Only a copy that counted for nothing leaves, and a
// healthy one (the source) stays, so no count of serving copies drops.
func (t *Task) Submit(now int64) (SetReplicas, bool) {
	base := slices.DeleteFunc(slices.Clone(t.Replicas), func(id uint64) bool { return slices.Contains(t.Rebuild, id) })
	added := appendNew(slices.Clone(base), t.Targets)
	switch t.state {
	case Verified:
		if !t.submitted {
			t.submitted, t.sent = true, true
			t.deadline = now + t.cfg.RecordTimeoutMs
		}
		if len(t.Rebuild) > 0 && !t.cleared {
			return SetReplicas{Segment: t.Seal.Segment, Expect: slices.Clone(t.Replicas), Replicas: base}, true
		}
		return SetReplicas{Segment: t.Seal.Segment, Expect: base, Replicas: added}, true
	case Recorded:
		if len(t.Drop) == 0 {
			return SetReplicas{}, false
		}
		if !t.submitted {
			t.submitted, t.sent = true, true
			t.deadline = now + t.cfg.RecordTimeoutMs
		}
		kept := slices.DeleteFunc(slices.Clone(added), func(id uint64) bool { return slices.Contains(t.Drop, id) })
		return SetReplicas{Segment: t.Seal.Segment, Expect: added, Replicas: kept}, true
	}
	return SetReplicas{}, false
}

// Recorded: the control plane answered the submitted command; err nil
// means it recorded it, an error that it refused it. A refusal fails the
// task, and a refused first command leaves the targets unnamed, so their
// copies may be cleaned up. NB: a call that failed without an answer is
// not a refusal; the caller lets the deadline pass (RecordUnknown).
func (t *Task) Recorded(now int64, err error) error {
	if !t.submitted || (t.state != Verified && t.state != Recorded) {
		return t.wrong("recorded")
	}
	t.submitted = false
	if err != nil {
		if t.state == Verified {
			t.sent = false
		}
		t.fail(RecordRefused, "%v", err)
		return nil
	}
	if t.state == Verified && len(t.Rebuild) > 0 && !t.cleared {
		t.cleared = true
		t.deadline = now + t.cfg.RecordTimeoutMs
		return nil
	}
	if t.state == Verified && len(t.Drop) > 0 {
		t.enter(Recorded, now+t.cfg.RecordTimeoutMs)
		return nil
	}
	t.enter(Done, 0)
	return nil
}

// NodeDown: membership says node is down. Before the targets are
// recorded, losing the source (while copies remain to be made) or a
// target fails the task; afterwards the planner heals around it.
func (t *Task) NodeDown(now int64, node uint64) {
	switch t.state {
	case Placed, Filling:
		if node == t.Source && slices.Contains(t.verified, false) {
			t.fail(SourceLost, "source node %d is down", node)
		} else if slices.Contains(t.Targets, node) {
			t.fail(TargetLost, "target node %d is down", node)
		}
	case Verified:
		if !t.sent && slices.Contains(t.Targets, node) {
			t.fail(TargetLost, "target node %d is down", node)
		}
	}
}

// Tick fails the task if its state's deadline passed.
func (t *Task) Tick(now int64) {
	if t.Finished() || now < t.deadline {
		return
	}
	switch t.state {
	case Placed:
		t.fail(StartTimeout, "no copy began within %d ms", t.cfg.StartTimeoutMs)
	case Filling:
		t.fail(Stalled, "no progress within %d ms", t.cfg.StallTimeoutMs)
	default:
		if t.submitted {
			t.fail(RecordUnknown, "the control plane did not answer within %d ms", t.cfg.RecordTimeoutMs)
		} else {
			t.fail(RecordTimeout, "not submitted within %d ms", t.cfg.RecordTimeoutMs)
		}
	}
}

// Cleanup answers the targets whose partial copies may be deleted: those
// of a task that failed before any command naming them was sent. After a
// send, even an unanswered one, the control plane may name them (S4). A
// rebuilding holder is listed until its clearing command is recorded, so
// its copy stays until then, whatever it holds; its next rebuild sets it
// aside.
func (t *Task) Cleanup() []uint64 {
	if t.state != Failed || t.sent {
		return nil
	}
	var out []uint64
	for _, id := range t.Targets {
		if t.cleared || !slices.Contains(t.Rebuild, id) {
			out = append(out, id)
		}
	}
	return out
}

// Deletable answers the dropped copies whose files may now be deleted:
// the damaged ones, once the list without them is recorded. Copies on
// dead nodes are their nodes' to delete when they return and find them
// unreferenced.
func (t *Task) Deletable() []uint64 {
	if t.state != Done {
		return nil
	}
	var out []uint64
	for _, id := range t.Drop {
		if slices.Contains(t.Damaged, id) {
			out = append(out, id)
		}
	}
	return out
}

func (t *Task) wrong(event string) error {
	return fmt.Errorf("%w: %s in %v (segment %d)", ErrWrongState, event, t.state, t.Seal.Segment)
}

// appendNew appends the ids of add that list lacks.
func appendNew(list, add []uint64) []uint64 {
	for _, id := range add {
		if !slices.Contains(list, id) {
			list = append(list, id)
		}
	}
	return list
}
