package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
	"pgregory.net/rapid"
)

// cutCase is one way of cutting a copy of five acknowledged batches back
// to keep of them.
type cutCase struct {
	noJournal bool
	// before batches are appended and the store closed cleanly first, so
	// they are in the file, fsynced, and the journal holds none of them:
	// a cut below the journal's part of the copy.
	before int
	keep   int
	seal   bool // an exact seal with TruncateAbove rather than Truncate
}

func (c cutCase) String() string {
	return fmt.Sprintf("journal=%v/before=%d/keep=%d/seal=%v", !c.noJournal, c.before, c.keep, c.seal)
}

// mutating reports whether op can change what a crash leaves.
func mutating(op vfs.Op) bool {
	switch op {
	case vfs.OpRead, vfs.OpReadDir, vfs.OpStat, vfs.OpClose:
		return false
	}
	return true
}

// crashPoint captures what a crash leaves just before the at-th mutating
// operation after it is armed: a kill -9 (the page cache survives) or a
// power loss (only fsynced state, with torn unsynced tails).
type crashPoint struct {
	at   int
	kill bool
	rng  *rand.Rand

	mu    sync.Mutex
	mem   *vfs.MemFS
	n     int
	taken *vfs.MemFS
}

func (p *crashPoint) rule(op vfs.Op, _ string) error {
	if !mutating(op) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == p.at && p.taken == nil {
		p.taken = p.capture()
	}
	p.n++
	return nil
}

func (p *crashPoint) capture() *vfs.MemFS {
	if p.kill {
		return p.mem.Clone()
	}
	return p.mem.PowerLoss(p.rng)
}

// result is the crash's state, taken now if the crash point was not
// reached; during reports whether it was taken before the cut returned,
// and ops how many mutating operations were seen. The rule may still run
// (the store's goroutines outlive the cut), so n is read under the lock.
func (p *crashPoint) result() (fs *vfs.MemFS, during bool, ops int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taken != nil {
		return p.taken, true, p.n
	}
	return p.capture(), false, p.n
}

// runCut cuts a copy with a crash at point p and checks what a restart
// finds: the old copy or the cut one, whole (or sealed at the cut, for a
// seal), and only the cut one once the cut returned. Then it appends,
// loses power, and checks that no cut batch came back and no batch
// acknowledged since was lost. It returns how many mutating operations
// the cut made.
func runCut(t *testing.T, c cutCase, p *crashPoint, seed uint64) int {
	ctx := context.Background()
	mem := vfs.NewMem()
	p.mem = mem
	fs := vfs.NewFaulty(mem, nil)
	cfg := Config{Dir: "/data", FS: fs, NoJournal: c.noJournal}
	s := openMemCfg(t, cfg)
	old := chain(t, 0, 5, 2, "old")
	mustCreate(t, s, 1, 0)
	appendAll(t, s, 1, old[:c.before])
	if c.before > 0 {
		_ = s.Close() // a clean close fsyncs the file and retires the journal
		s = openMemCfg(t, cfg)
	}
	appendAll(t, s, 1, old[c.before:])
	cutEnd := endOf(t, 0, old[:c.keep])

	fs.SetRule(p.rule)
	var err error
	if c.seal {
		_, err = s.SealWith(ctx, 1, SealOptions{Exact: true, End: cutEnd, TruncateAbove: true})
	} else {
		err = s.Truncate(ctx, 1, cutEnd)
	}
	if err != nil {
		t.Fatalf("%v: cut: %v", c, err)
	}
	fs.SetRule(nil)
	crashed, during, ops := p.result()
	_ = s.Close()

	r := openMemCfg(t, Config{Dir: "/data", FS: crashed, NoJournal: c.noJournal})
	got := batchesOf(t, r, 1)
	in, err := r.Info(1)
	if err != nil || in.Damage != nil {
		t.Fatalf("%v crash at %d: info %+v, %v", c, p.at, in, err)
	}
	switch {
	case sameBatches(got, old[:c.keep]):
	case during && !in.Sealed && sameBatches(got, old):
	default:
		t.Fatalf("%v crash at %d (during %v, kill %v): %d batches, sealed %v: neither the old copy nor the cut one",
			c, p.at, during, p.kill, len(got), in.Sealed)
	}
	if c.seal && !during && !in.Sealed {
		t.Fatalf("%v: a seal that returned did not survive", c)
	}
	if in.Sealed {
		if in.Footer.End != cutEnd {
			t.Fatalf("%v: sealed at %d, want %d", c, in.Footer.End, cutEnd)
		}
		if err := r.Verify(1); err != nil {
			t.Fatal(err)
		}
		return ops
	}
	appendAfterCrash(t, r, crashed, c, got, seed)
	return ops
}

// appendAfterCrash appends two acknowledged batches and one that is not
// to a copy holding kept, loses power, and checks the copy is kept plus
// at least the acknowledged new batches: nothing cut comes back.
func appendAfterCrash(t *testing.T, r *Store, mem *vfs.MemFS, c cutCase, kept [][]byte, seed uint64) {
	end := endOf(t, 0, kept)
	fresh := chain(t, end, 3, 3, "new")
	appendAll(t, r, 1, fresh[:2])
	if err := r.AppendAtAsync(context.Background(), 1, fresh[2], nil); err != nil {
		t.Fatal(err)
	}
	lost := mem.PowerLoss(rand.New(rand.NewPCG(seed, 7)))
	_ = r.Close()
	f := openMemCfg(t, Config{Dir: "/data", FS: lost, NoJournal: c.noJournal})
	got := batchesOf(t, f, 1)
	for m := 2; m <= 3; m++ {
		if sameBatches(got, append(append([][]byte{}, kept...), fresh[:m]...)) {
			return
		}
	}
	t.Fatalf("%v: after appending and a power loss: %d batches, want the %d kept and 2 or 3 new",
		c, len(got), len(kept))
}

// Truncate and an exact seal that cuts, interrupted before each of their
// writes, syncs, renames and truncations by a kill -9 or a power loss, in
// both journal modes, cutting inside and below the journal's part of the
// copy; every restart then appends and loses power again.
func TestCutEveryInterruption(t *testing.T) {
	var cases []cutCase
	for _, noJournal := range []bool{false, true} {
		for _, before := range []int{0, 3, 5} {
			for _, keep := range []int{0, 2, 4} {
				for _, seal := range []bool{false, true} {
					cases = append(cases, cutCase{noJournal, before, keep, seal})
				}
			}
		}
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			n := runCut(t, c, &crashPoint{at: -1, kill: true}, 1)
			if n == 0 {
				t.Fatal("the cut made no write")
			}
			for at := 0; at <= n; at++ {
				for seed := range uint64(3) {
					runCut(t, c, &crashPoint{at: at, kill: seed == 0, rng: rand.New(rand.NewPCG(seed, uint64(at)))}, seed)
				}
			}
		})
	}
}

// copyModel drives follower copies on a MemFS through exact appends,
// cuts, exact seals, power losses, kills and clean restarts, with small
// journal files so checkpoints race the cuts. After every restart each
// copy must be a prefix of what it held, at least what was acknowledged:
// batches written again at offsets a cut freed carry a new tag, so a cut
// batch that came back would not match.
type copyModel struct {
	t     *rapid.T
	mem   *vfs.MemFS
	st    *Store
	cfg   Config
	tag   int
	mu    sync.Mutex
	gen   int
	acked map[SegmentID]int
	subs  map[SegmentID][][]byte
	seals map[SegmentID]bool
	fail  error
}

func (m *copyModel) open() {
	m.cfg.FS = m.mem
	st, err := Open(m.cfg)
	if err != nil {
		m.t.Fatalf("open: %v", err)
	}
	m.st = st
}

func (m *copyModel) appendAt(id SegmentID, n int, rng *rand.Rand) {
	for range n {
		m.mu.Lock()
		end := endOf(m.t, 0, m.subs[id])
		gen := m.gen
		m.tag++
		b := tagged(m.t, end, 1+rng.IntN(3), fmt.Sprintf("t%d", m.tag))
		m.mu.Unlock()
		err := m.st.AppendAtAsync(context.Background(), id, b, func(err error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.gen != gen {
				return
			}
			if err != nil && m.fail == nil {
				m.fail = err
			}
			m.acked[id]++
		})
		if err != nil {
			m.t.Fatalf("append at %d: %v", id, err)
		}
		m.mu.Lock()
		m.subs[id] = append(m.subs[id], b)
		m.mu.Unlock()
	}
}

// cut cuts id back to a random number of its batches, by Truncate or by
// an exact seal that cuts.
func (m *copyModel) cut(id SegmentID, rng *rand.Rand, seal bool) {
	k := rng.IntN(len(m.subs[id]) + 1)
	end := endOf(m.t, 0, m.subs[id][:k])
	var err error
	if seal {
		_, err = m.st.SealWith(context.Background(), id, SealOptions{Exact: true, End: end, TruncateAbove: true})
	} else {
		err = m.st.Truncate(context.Background(), id, end)
	}
	if err != nil {
		m.t.Fatalf("cut %d to %d: %v", id, end, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acked[id] != len(m.subs[id]) {
		m.t.Fatalf("cut %d returned with %d of %d appends acknowledged", id, m.acked[id], len(m.subs[id]))
	}
	m.subs[id], m.acked[id] = m.subs[id][:k], k
	m.seals[id] = m.seals[id] || seal
}

func (m *copyModel) restart(next func() *vfs.MemFS, clean bool) {
	m.mu.Lock()
	acked := map[SegmentID]int{}
	for id, n := range m.acked {
		acked[id] = n
		if clean {
			acked[id] = len(m.subs[id])
		}
	}
	m.mu.Unlock()
	fs := next()
	m.mu.Lock()
	m.gen++
	m.mu.Unlock()
	_ = m.st.Close()
	m.mem = fs
	m.open()
	for id, subs := range m.subs {
		got := batchesOf(m.t, m.st, id)
		j := len(got)
		if j < acked[id] || j > len(subs) || !sameBatches(got, subs[:j]) {
			m.t.Fatalf("segment %d: %d batches after restart, not a prefix of the %d it held with at least %d acknowledged",
				id, j, len(subs), acked[id])
		}
		in, _ := m.st.Info(id)
		if in.Damage != nil || in.Sealed != m.seals[id] {
			m.t.Fatalf("segment %d: info %+v, sealed %v", id, in, m.seals[id])
		}
		m.subs[id], m.acked[id] = got, j
	}
}

func TestCopyCrashProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &copyModel{t: rt, mem: vfs.NewMem(), acked: map[SegmentID]int{},
			subs: map[SegmentID][][]byte{}, seals: map[SegmentID]bool{}}
		m.cfg = Config{Dir: "/data", IndexIntervalBytes: 128,
			NoJournal:        rapid.IntRange(0, 2).Draw(rt, "journal") == 0,
			JournalFileBytes: rapid.SampledFrom([]int64{0, 500, 2000}).Draw(rt, "journalFile")}
		m.open()
		ids := []SegmentID{1, 2}
		for _, id := range ids {
			if err := m.st.Create(id, 0); err != nil {
				rt.Fatal(err)
			}
			m.subs[id] = nil
		}
		steps := rapid.IntRange(1, 25).Draw(rt, "steps")
		for range steps {
			rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 3))
			id := ids[rng.IntN(len(ids))]
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
			case m.seals[id] && op <= 6:
			case op <= 3:
				m.appendAt(id, 1+rng.IntN(4), rng)
			case op <= 5:
				m.cut(id, rng, false)
			case op == 6:
				m.cut(id, rng, rng.IntN(4) == 0)
			case op == 7:
				m.restart(func() *vfs.MemFS { return m.mem.PowerLoss(rng) }, false)
			case op == 8:
				m.restart(m.mem.Clone, false)
			default:
				m.restart(func() *vfs.MemFS { _ = m.st.Close(); return m.mem }, true)
			}
		}
		m.restart(func() *vfs.MemFS { return m.mem.PowerLoss(rand.New(rand.NewPCG(uint64(steps), 5))) }, false)
		_ = m.st.Close()
		if m.fail != nil {
			rt.Fatalf("a callback failed: %v", m.fail)
		}
	})
}
