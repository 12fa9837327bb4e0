package metastore

// Randomised crashes: commands applied one at a time and in concurrent
// bursts, snapshots and rotations, kill -9 at any disk operation (during
// Open, mid-batch, mid-rotation), reopen, more work, more kills, then a
// power loss with torn tails, sometimes with the newest snapshot damaged
// too. Every acknowledged command, and everything a reopen showed in View,
// must survive, in order, and the recovered state must be exactly that of a
// prefix of the log.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/vfs"
)

// crashSeeds is how many seeds TestKillThenPowerLoss runs: a few in the
// suite, more for a soak (go test -run TestKillThenPowerLoss
// ./internal/metastore -metastore.seeds=20000).
var crashSeeds = flag.Int("metastore.seeds", 16, "seeds for the kill -9 and power-loss test")

func TestKillThenPowerLoss(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*crashSeeds); seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := newCrashRun(t, seed)
			for range 6 {
				// One or more kill -9s, each followed by a reopen and more
				// work, then a power loss while the last process runs.
				for range 1 + r.rng.IntN(2) {
					r.mem = r.round()
				}
				r.mem = r.round().PowerLoss(r.rng)
				r.log.uncertain = true
				if r.rng.IntN(4) == 0 {
					r.damageNewestSnapshot()
				}
			}
			s := mustOpen(t, r.mem, metaDir, r.opts)
			r.checkOpened(s)
			mustClose(t, s)
		})
	}
}

// crashRun is one seed: the disk between processes and what the test knows.
type crashRun struct {
	t    *testing.T
	rng  *rand.Rand
	opts Options
	mem  *vfs.MemFS
	log  *history

	lastID  int64
	sent    map[int64][]byte // command id (its Now) -> its JSON
	refused map[int64]bool   // ids the state machine refused
}

// newCrashRun starts with one acknowledged topic, "base" (topic 1, range
// 1), that the offset commits refer to.
func newCrashRun(t *testing.T, seed uint64) *crashRun {
	rng := rand.New(rand.NewPCG(seed, seed))
	r := &crashRun{
		t: t, rng: rng, mem: vfs.NewMem(), log: newHistory(t),
		opts: Options{SnapshotEvery: 2 + rng.IntN(8)},
		sent: map[int64][]byte{}, refused: map[int64]bool{},
	}
	base := r.newCommand()
	base.Kind, base.Topic, base.Bits = metadata.KindCreateTopic, "base", 2
	r.sent[base.Now] = mustJSON(t, base)
	s := mustOpen(t, r.mem, metaDir, r.opts)
	mustApply(t, s, base)
	mustClose(t, s)
	r.log.add(r.sent, r.refused, [][]byte{r.sent[base.Now]})
	r.log.required = 1
	return r
}

// round is one process: open (it may die there), work, die. It returns
// the kill -9 image. The kill comes at a random disk operation or, if the
// work ends first, while a last burst is in flight.
func (r *crashRun) round() *vfs.MemFS {
	fs := newKillFS(r.mem)
	// Skewed towards early kills, so a process often dies during Open or
	// before its first fsync: what only Open can have made durable.
	fs.arm(afterOps(r.rng.IntN(1 + r.rng.IntN(150))))
	s, err := Open(fs, metaDir, r.opts)
	if err != nil {
		r.wantKilled(fs, err)
		return fs.killNow()
	}
	defer killedStore(s)
	r.checkOpened(s)
	var acked []int64
	for range 5 + r.rng.IntN(20) {
		acked = append(acked, r.step(s, fs)...)
	}
	wait := r.startApplies(s, fs, r.rng.IntN(4))
	img := fs.killNow()
	acked = append(acked, wait()...)
	r.log.add(r.sent, r.refused, fs.logged())
	r.log.requireAcked(acked)
	return img
}

// step applies one command, a concurrent burst (one group commit or
// several), or takes a snapshot. It returns the ids acknowledged.
func (r *crashRun) step(s *Store, fs *killFS) []int64 {
	switch x := r.rng.IntN(10); {
	case x < 5:
		return r.startApplies(s, fs, 1)()
	case x < 9:
		return r.startApplies(s, fs, 2+r.rng.IntN(6))()
	default:
		if err := s.Snapshot(); err != nil {
			r.wantKilled(fs, err)
		}
		return nil
	}
}

// startApplies applies n new commands concurrently; the returned function
// waits for them and returns the ids acknowledged.
func (r *crashRun) startApplies(s *Store, fs *killFS, n int) (wait func() []int64) {
	type outcome struct {
		id      int64
		err     error
		refused bool
	}
	out := make(chan outcome, n)
	var wg sync.WaitGroup
	for range n {
		c := r.randomCommand()
		wg.Go(func() {
			res, err := s.Apply(context.Background(), c)
			out <- outcome{c.Now, err, err == nil && res.Err != nil}
		})
	}
	return func() []int64 {
		wg.Wait()
		close(out)
		var acked []int64
		for o := range out {
			switch {
			case o.err != nil:
				r.wantKilled(fs, o.err)
			case o.refused:
				r.refused[o.id] = true
			default:
				acked = append(acked, o.id)
			}
		}
		return acked
	}
}

// damageNewestSnapshot flips a byte of the newest snapshot: a second fault
// on top of the power loss, which the previous snapshot and the logs kept
// since it must make up for.
func (r *crashRun) damageNewestSnapshot() {
	_, snaps, err := dirFiles(r.mem, metaDir)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(snaps) > 0 {
		damage(r.t, r.mem, filepath.Join(metaDir, snapName(snaps[len(snaps)-1])))
	}
}

// wantKilled fails the test unless err comes from the kill.
func (r *crashRun) wantKilled(fs *killFS, err error) {
	r.t.Helper()
	if fs.crashImage() == nil || !errors.Is(err, errKilled) {
		r.t.Fatalf("error without a kill: %v", err)
	}
}

func (r *crashRun) newCommand() metadata.Command {
	r.lastID++
	return metadata.Command{V: metadata.Version, Now: r.lastID}
}

// randomCommand returns a new command that changes the state whenever it
// is accepted, so every prefix of the log has its own state. Deletes of
// topics that are gone or never were are refused.
func (r *crashRun) randomCommand() metadata.Command {
	c := r.newCommand()
	switch x := r.rng.IntN(10); {
	case x < 4:
		c.Kind, c.Topic, c.Bits = metadata.KindCreateTopic, fmt.Sprint("t", c.Now), 2
	case x < 6:
		c.Kind, c.Topic, c.Group = metadata.KindCommitOffsets, "base", fmt.Sprint("g", r.rng.IntN(3))
		c.Entries = []metadata.GroupEntry{{Source: 1, SliceBits: 2, Offset: uint64(c.Now)}}
	case x < 8:
		c.Kind, c.User, c.PasswordHash = metadata.KindCreateUser, fmt.Sprint("u", c.Now), "h"
		c.Perms = []string{metadata.PermConsume}
	default:
		c.Kind, c.Topic = metadata.KindDeleteTopic, fmt.Sprint("t", 1+r.rng.Int64N(c.Now))
	}
	r.sent[c.Now] = mustJSON(r.t, c)
	return c
}

// checkOpened compares a reopened store's View with the log. After kill
// -9s only, the page cache kept every record written, so the state is that
// of the whole log. After a power loss it is that of some prefix keeping
// everything required, and the rest of the log is gone for good. Either
// way, what View now shows is required from here on.
func (r *crashRun) checkOpened(s *Store) {
	r.t.Helper()
	h := r.log
	got := viewBytes(r.t, s)
	if !h.uncertain {
		if !bytes.Equal(got, h.prefix[len(h.cmds)]) {
			r.t.Fatalf("after a kill -9 the state is not that of all %d logged commands:\n got %s\nwant %s", len(h.cmds), got, h.prefix[len(h.cmds)])
		}
	} else {
		m := h.match(got)
		if m < 0 {
			r.t.Fatalf("after a power loss the state is not that of a prefix of the log of at least %d commands (of %d):\n got %s", h.required, len(h.cmds), got)
		}
		h.truncate(m)
	}
	h.required = len(h.cmds)
}

// history is the log as the test saw it written: the commands in order,
// the state after each prefix, and how long a prefix must survive.
type history struct {
	t         *testing.T
	cmds      []metadata.Command
	pos       map[int64]int // command id -> index in cmds
	st        *metadata.State
	prefix    [][]byte // prefix[k]: the state after cmds[:k]
	required  int      // acknowledged or shown in View
	uncertain bool     // a power loss not yet looked at by an Open
}

func newHistory(t *testing.T) *history {
	st := metadata.New()
	return &history{t: t, pos: map[int64]int{}, st: st, prefix: [][]byte{snapshotOf(t, st)}}
}

// add appends logged payloads. Each must be a command the test sent, not
// refused, logged once, and accepted by the state machine in log order.
func (h *history) add(sent map[int64][]byte, refused map[int64]bool, payloads [][]byte) {
	h.t.Helper()
	for _, p := range payloads {
		var c metadata.Command
		if err := json.Unmarshal(p, &c); err != nil {
			h.t.Fatalf("logged record %q: %v", p, err)
		}
		_, dup := h.pos[c.Now]
		if !bytes.Equal(p, sent[c.Now]) || refused[c.Now] || dup {
			h.t.Fatalf("logged %s: never sent, refused or logged twice (dup %v, refused %v)", p, dup, refused[c.Now])
		}
		if res := h.st.Apply(c); res.Err != nil {
			h.t.Fatalf("logged %s is refused in log order: %v", p, res.Err)
		}
		h.pos[c.Now] = len(h.cmds)
		h.cmds = append(h.cmds, c)
		h.prefix = append(h.prefix, snapshotOf(h.t, h.st))
	}
}

// requireAcked makes every acknowledged command, and so everything logged
// before it, required.
func (h *history) requireAcked(ids []int64) {
	h.t.Helper()
	for _, id := range ids {
		p, ok := h.pos[id]
		if !ok {
			h.t.Fatalf("command %d was acknowledged but never logged", id)
		}
		h.required = max(h.required, p+1)
	}
}

// match returns the longest prefix, at least the required one, whose state
// is got, or -1.
func (h *history) match(got []byte) int {
	for k := len(h.cmds); k >= h.required; k-- {
		if bytes.Equal(got, h.prefix[k]) {
			return k
		}
	}
	return -1
}

// truncate forgets the commands a power loss took: they were never
// acknowledged, and they are not coming back.
func (h *history) truncate(m int) {
	for _, c := range h.cmds[m:] {
		delete(h.pos, c.Now)
	}
	h.cmds, h.prefix = h.cmds[:m], h.prefix[:m+1]
	h.st = metadata.New()
	for _, c := range h.cmds {
		h.st.Apply(c)
	}
	h.uncertain = false
}

func mustJSON(t *testing.T, c metadata.Command) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
