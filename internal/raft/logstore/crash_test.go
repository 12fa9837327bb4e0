package logstore

// Crashes: a process killed at every operation that changes the disk, and
// random sequences of kill -9s, reopens, more Saves and power losses.
// Every acknowledged write must survive; an interrupted one may survive
// whole or not at all (each write is one committed batch); and what Open
// recovered must itself be durable, since Storage serves it at once.

import (
	"flag"
	"fmt"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// crashSeeds is how many seeds TestKillThenPowerLoss runs: a few in the
// suite, more for a soak (go test -run TestKillThenPowerLoss
// ./internal/raft/logstore -logstore.seeds=2000).
var crashSeeds = flag.Int("logstore.seeds", 12, "seeds for the kill -9 and power-loss test")

// workload returns ops generated against a model, and the rendering of
// the model after each prefix: states[k] is the state after ops[:k].
func workload(seed uint64, n int) (ops []op, states []string) {
	rng := newRand(seed)
	g := gen{intn: rng.IntN, groups: 4, bigEvery: 6}
	m := model{}
	states = []string{m.render()}
	for range n {
		o := g.next(m)
		_ = m.apply(o) // a refused op leaves the model as it was
		ops = append(ops, o)
		states = append(states, m.render())
	}
	return ops, states
}

func TestCrashAtEveryWritePoint(t *testing.T) {
	opts := Options{FileBytes: 2 << 10}
	ops, states := workload(7, 60)
	rng := newRand(99)
	rotations := 0
	for kill := 0; ; kill++ {
		k := newKillDisk(vfs.NewMem(), kill)
		done, seq := runUntilKilled(t, k, opts, ops)
		if !k.killed() {
			rotations = int(seq) - 1
			break
		}
		img := k.kill()
		variants := map[string]*vfs.MemFS{
			"kill -9":                 img.Clone(),
			"power loss, synced only": img.CrashClone(),
		}
		for i := range 3 {
			variants[fmt.Sprint("power loss, torn ", i)] = img.PowerLoss(rng)
		}
		for name, fs := range variants {
			got := reopenDurably(t, fs, opts, fmt.Sprintf("kill at change %d, %s", kill, name))
			if got != states[done] && got != states[min(done+1, len(ops))] {
				t.Fatalf("kill at change %d (%d ops done, next %v), %s: recovered neither state: %s",
					kill, done, ops[min(done, len(ops)-1)], name, firstDiff(got, states[done]))
			}
		}
	}
	if rotations < 3 {
		t.Fatalf("the workload rotated %d times; it must cross rotations", rotations)
	}
}

// runUntilKilled opens a store and runs ops until one fails for any reason
// but a refusal. It returns how many ops returned and the last file
// sequence number.
func runUntilKilled(t *testing.T, k *killDisk, opts Options, ops []op) (int, uint64) {
	t.Helper()
	s, err := Open(k.fs, dir, opts)
	if err != nil {
		if !k.killed() {
			t.Fatalf("Open failed with no kill: %v", err)
		}
		return 0, 0
	}
	defer s.Close()
	m := model{}
	for i, o := range ops {
		serr := o.run(s)
		if serr != nil && k.killed() {
			return i, s.seq
		}
		if merr := m.apply(o); !sameRefusal(serr, merr) {
			t.Fatalf("op %d %v: store says %v, model says %v", i, o, serr, merr)
		}
	}
	return len(ops), s.seq
}

// reopenDurably opens the store on fs, then again on what a power loss
// right after that Open would leave, and returns the state; both must
// agree, because Open makes what it recovers durable.
func reopenDurably(t *testing.T, fs *vfs.MemFS, opts Options, what string) string {
	t.Helper()
	s, err := Open(fs, dir, opts)
	if err != nil {
		t.Fatalf("%s: Open: %v", what, err)
	}
	got := renderStore(s)
	s2, err := Open(fs.CrashClone(), dir, opts)
	if err != nil {
		t.Fatalf("%s: Open after a power loss following Open: %v", what, err)
	}
	if again := renderStore(s2); again != got {
		t.Fatalf("%s: what Open recovered was not durable: %s", what, firstDiff(again, got))
	}
	mustClose(t, s2)
	mustClose(t, s)
	return got
}

// history is what a sequence of processes has acknowledged: accepted ops
// in order, the model they give, and an op whose process died during it,
// which the next successful Open may or may not show.
type history struct {
	accepted []op
	model    model
	inflight *op
}

// resolve checks a freshly opened store against the history and settles
// the op in flight.
func (h *history) resolve(t tb, s *Store, what string) {
	t.Helper()
	got := renderStore(s)
	if got == h.model.render() {
		h.inflight = nil
		return
	}
	if h.inflight != nil {
		with := replayModel(t, append(h.accepted[:len(h.accepted):len(h.accepted)], *h.inflight))
		if got == with.render() {
			h.accepted, h.model, h.inflight = append(h.accepted, *h.inflight), with, nil
			return
		}
	}
	t.Fatalf("%s: recovered state is not the acknowledged one: %s", what, firstDiff(got, h.model.render()))
}

// round is one process: Open (it may die there), check, work until the
// kill or the end of its ops. It returns the kill -9 image.
func (h *history) round(t *testing.T, k *killDisk, g gen, opts Options, n int, what string) *vfs.MemFS {
	t.Helper()
	s, err := Open(k.fs, dir, opts)
	if err != nil {
		if !k.killed() {
			t.Fatalf("%s: Open failed with no kill: %v", what, err)
		}
		return k.kill()
	}
	defer s.Close()
	h.resolve(t, s, what)
	for range n {
		o := g.next(h.model)
		serr := o.run(s)
		if serr != nil && k.killed() {
			h.inflight = &o
			break
		}
		if merr := h.model.apply(o); !sameRefusal(serr, merr) {
			t.Fatalf("%s: %v: store says %v, model says %v", what, o, serr, merr)
		}
		if serr == nil {
			h.accepted = append(h.accepted, o)
		}
	}
	return k.kill()
}

func TestKillThenPowerLoss(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*crashSeeds); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := newRand(seed)
			g := gen{intn: rng.IntN, groups: 5, bigEvery: 10}
			opts := Options{FileBytes: int64(1<<10 + rng.IntN(4<<10))}
			h := &history{model: model{}}
			mem := vfs.NewMem()
			for r := range 10 {
				// Skewed towards early kills, so a process often dies
				// during Open or before its first fsync.
				k := newKillDisk(mem, rng.IntN(1+rng.IntN(150)))
				mem = h.round(t, k, g, opts, 5+rng.IntN(25), fmt.Sprint("round ", r))
				if rng.IntN(3) == 0 {
					mem = mem.PowerLoss(rng)
				}
			}
			s := mustOpen(t, mem.PowerLoss(rng), opts)
			h.resolve(t, s, "after the last power loss")
			mustClose(t, s)
		})
	}
}
