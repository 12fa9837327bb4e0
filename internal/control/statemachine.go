package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/malachi-log/malachi/internal/metadata"
)

// groupSM is the raft.StateMachine of one control group: a metadata.State
// (a vnode's shard of topics, or the root's users, ACLs and cluster id),
// the registry (root only) and the table of recent request ids. The host
// calls Apply, Snapshot and Restore from its cycle, one at a time; readers
// take mu's read side through the Node's View methods.
type groupSM struct {
	group  uint64
	root   bool
	notify *notifier

	mu    sync.RWMutex
	st    *metadata.State
	reg   *Registry // root only; nil on a joining replica until its first snapshot
	dedup dedupTable
	// moved is closed by the next Apply or Restore, for callers waiting
	// for the replica to reach an index (Node.waitApplied); nil while no
	// one waits.
	moved chan struct{}
}

// notifier carries what an applied entry tells the rest of the node. Its
// functions run on the host's cycle and must not block.
type notifier struct {
	applied  func(group uint64, cmd metadata.Command, res metadata.Result)
	restored func(group uint64)
	registry func(reg *Registry) // a copy, after every registry change or restore
}

func newGroupSM(group uint64, n *notifier) *groupSM {
	sm := &groupSM{group: group, root: group == RootGroup, notify: n, dedup: newDedupTable(maxDedup)}
	if sm.root {
		sm.st = metadata.New()
	} else {
		sm.st = metadata.NewShard(uint16(group))
	}
	return sm
}

// Apply applies one committed entry. It is deterministic and never
// panics: an entry that does not decode, or a command of the wrong group,
// is answered with a refusal on every replica alike.
func (sm *groupSM) Apply(_ uint64, data []byte) []byte {
	var e entry
	if err := json.Unmarshal(data, &e); err != nil || (e.Meta == nil) == (e.Reg == nil) {
		return encodeOutcome(outcome{Err: string(metadata.ErrUnknownCommand)})
	}
	key := dedupKey{origin: e.Origin, req: e.Req}
	sm.mu.Lock()
	if prev, ok := sm.dedup.get(key); ok {
		sm.wakeLocked()
		sm.mu.Unlock()
		return prev
	}
	var out outcome
	var res metadata.Result
	var reg *Registry
	if e.Meta != nil {
		res = sm.applyMeta(e.Meta)
		out = outcomeOf(res)
	} else {
		out, reg = sm.applyReg(e.Reg)
	}
	b := encodeOutcome(out)
	if e.Req != 0 {
		sm.dedup.put(key, b)
	}
	sm.wakeLocked()
	sm.mu.Unlock()
	if e.Meta != nil && sm.notify.applied != nil {
		sm.notify.applied(sm.group, *e.Meta, res)
	}
	if reg != nil && sm.notify.registry != nil {
		sm.notify.registry(reg)
	}
	return b
}

// applyMeta refuses a command of the other kind of group, so that no
// replica ever puts a topic in the root or a user in a vnode.
func (sm *groupSM) applyMeta(c *metadata.Command) metadata.Result {
	if rootKinds[c.Kind] != sm.root {
		return metadata.Result{Err: metadata.ErrInvalidCommand}
	}
	return sm.st.Apply(*c)
}

// applyReg applies a registry command; on success it returns the new
// registry (a copy) with the outcome.
func (sm *groupSM) applyReg(c *regCommand) (outcome, *Registry) {
	if sm.reg == nil {
		return outcome{Err: errUnknownReg.Error()}, nil
	}
	if err := sm.reg.apply(c); err != nil {
		return outcome{Err: err.Error()}, nil
	}
	reg := sm.reg.Clone()
	return outcome{Registry: reg.Clone()}, reg
}

// image is a control group's snapshot.
type image struct {
	Format   int             `json:"format"`
	Group    uint64          `json:"group"`
	Meta     json.RawMessage `json:"meta"`
	Registry *Registry       `json:"registry,omitempty"`
	Dedup    []dedupRecord   `json:"dedup,omitempty"`
}

const imageFormat = 1

// Snapshot encodes the group's state deterministically.
func (sm *groupSM) Snapshot() ([]byte, error) {
	sm.mu.RLock()
	defer sm.mu.RUnlock()
	meta, err := sm.st.Snapshot()
	if err != nil {
		return nil, err
	}
	return json.Marshal(image{Format: imageFormat, Group: sm.group, Meta: meta, Registry: sm.reg, Dedup: sm.dedup.records()})
}

var errBadImage = errors.New("control: bad group snapshot")

// Restore replaces the state with a snapshot's, checking that it belongs
// to this group.
func (sm *groupSM) Restore(data []byte) error {
	var img image
	if err := json.Unmarshal(data, &img); err != nil {
		return fmt.Errorf("%w: %v", errBadImage, err)
	}
	if img.Format != imageFormat || img.Group != sm.group || (img.Registry != nil) != sm.root {
		return fmt.Errorf("%w: format %d, group %d (want %d)", errBadImage, img.Format, img.Group, sm.group)
	}
	st, err := metadata.Restore(img.Meta)
	if err != nil {
		return err
	}
	if !sm.root && uint64(st.Shard()) != sm.group {
		return fmt.Errorf("%w: shard %d in group %d", errBadImage, st.Shard(), sm.group)
	}
	var reg *Registry
	if img.Registry != nil {
		if err := img.Registry.validate(); err != nil {
			return err
		}
		reg = img.Registry
		reg.place() // repairs voter sets the node list does not support
	}
	dedup, err := dedupFrom(img.Dedup, maxDedup)
	if err != nil {
		return err
	}
	sm.mu.Lock()
	sm.st, sm.reg, sm.dedup = st, reg, dedup
	sm.wakeLocked()
	sm.mu.Unlock()
	if sm.notify.restored != nil {
		sm.notify.restored(sm.group)
	}
	if reg != nil && sm.notify.registry != nil {
		sm.notify.registry(reg.Clone())
	}
	return nil
}

// wakeLocked wakes the callers waiting for the replica to move on.
func (sm *groupSM) wakeLocked() {
	if sm.moved != nil {
		close(sm.moved)
		sm.moved = nil
	}
}

// changed returns a channel closed at the next Apply or Restore.
func (sm *groupSM) changed() <-chan struct{} {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.moved == nil {
		sm.moved = make(chan struct{})
	}
	return sm.moved
}

// registry returns a copy of the root's registry, nil before it has one.
func (sm *groupSM) registry() *Registry {
	sm.mu.RLock()
	defer sm.mu.RUnlock()
	if sm.reg == nil {
		return nil
	}
	return sm.reg.Clone()
}

// view runs fn on the state under the read lock.
func (sm *groupSM) view(fn func(*metadata.State)) {
	sm.mu.RLock()
	defer sm.mu.RUnlock()
	fn(sm.st)
}
