package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/malachi-log/malachi/internal/vfs"
)

// fenceCrashCase is a fence (or a latch) with a crash before one of its
// mutating file operations.
type fenceCrashCase struct {
	noJournal bool
	kill      bool // kill -9 (the page cache survives) rather than a power loss
	latch     bool // Latch rather than Fence
}

func (c fenceCrashCase) String() string {
	return fmt.Sprintf("journal=%v/kill=%v/latch=%v", !c.noJournal, c.kill, c.latch)
}

// runFenceCrash fences a copy of four acknowledged batches with a crash
// at point p, and checks what a restart finds: every acknowledged batch,
// and a copy that is fenced if the fence answered before the crash; one
// that is not may be fenced again, with the same answer. It returns how
// many mutating operations the fence made.
func runFenceCrash(t *testing.T, c fenceCrashCase, p *crashPoint) int {
	ctx := context.Background()
	mem := vfs.NewMem()
	p.mem = mem
	fs := vfs.NewFaulty(mem, nil)
	cfg := Config{Dir: "/data", FS: fs, NoJournal: c.noJournal}
	s := openMemCfg(t, cfg)
	acked := chain(t, 0, 4, 3, "a")
	mustCreate(t, s, 1, 0)
	appendAll(t, s, 1, acked)

	fs.SetRule(p.rule)
	var err error
	if c.latch {
		err = s.Latch(ctx, 1)
	} else {
		var end uint64
		end, err = s.Fence(ctx, 1)
		if err == nil && end != 12 {
			t.Fatalf("%v: fence answered %d, want 12", c, end)
		}
	}
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	fs.SetRule(nil)
	crashed, during, ops := p.result()
	_ = s.Close()

	r := openMemCfg(t, Config{Dir: "/data", FS: crashed, NoJournal: c.noJournal})
	if got := batchesOf(t, r, 1); !sameBatches(got, acked) {
		t.Fatalf("%v crash at %d: %d batches after the restart, want the 4 acknowledged", c, p.at, len(got))
	}
	in, err := r.Info(1)
	if err != nil || in.Damage != nil || in.Sealed {
		t.Fatalf("%v crash at %d: info %+v, %v", c, p.at, in, err)
	}
	if !during && !in.Fenced {
		t.Fatalf("%v crash after the fence answered: the copy came back unfenced", c)
	}
	if in.Fenced {
		if err := r.AppendAt(ctx, 1, span(t, 12, 1)); !errors.Is(err, ErrSealed) {
			t.Fatalf("%v crash at %d: an append to a copy that came back fenced: %v, want ErrSealed", c, p.at, err)
		}
	}
	// Whatever the crash left, fencing it again answers the same end.
	// (That the latch also outlives the next restart is
	// TestFenceSurvivesASecondRestartAfterAReplay.)
	if end, err := r.Fence(ctx, 1); err != nil || end != 12 {
		t.Fatalf("%v crash at %d: fence after the restart: %d (%v), want 12", c, p.at, end, err)
	}
	return ops
}

// A crash (kill -9 or power loss) before any of a fence's file
// operations never loses an acknowledged batch nor leaves the store
// unopenable, and once the fence answered the copy comes back fenced
// (W4).
func TestFenceCrashAtEveryStep(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		for _, kill := range []bool{false, true} {
			for _, latch := range []bool{false, true} {
				c := fenceCrashCase{noJournal: noJournal, kill: kill, latch: latch}
				t.Run(c.String(), func(t *testing.T) {
					// The first run, crash point out of reach, counts the
					// operations; then a crash before each of them.
					total := runFenceCrash(t, c, &crashPoint{at: 1 << 30, kill: kill, rng: rand.New(rand.NewPCG(1, 1))})
					if total == 0 {
						t.Fatalf("%v: the fence made no file operation: nothing keeps it", c)
					}
					for at := range total + 1 {
						runFenceCrash(t, c, &crashPoint{at: at, kill: kill, rng: rand.New(rand.NewPCG(uint64(at), 3))})
					}
				})
			}
		}
	}
}

// W4, W6: a copy fenced and then killed before the journal was
// checkpointed comes back fenced; the journal's replay recreates its file
// from the create record, and the latch must still be kept on disk, so
// that the next restart (clean, a kill or a power loss) finds it again.
// A fenced follower restarted twice before the seal reached it must not
// take the old primary's appends.
func TestFenceSurvivesASecondRestartAfterAReplay(t *testing.T) {
	for _, second := range []string{"clean", "kill", "power"} {
		t.Run(second, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			s := openMode(t, mem, false)
			mustCreate(t, s, 1, 0)
			appendAll(t, s, 1, chain(t, 0, 4, 3, "a"))
			if end, err := s.Fence(ctx, 1); err != nil || end != 12 {
				t.Fatalf("fence: %d (%v), want 12", end, err)
			}
			// kill -9 before any checkpoint: the journal still holds the
			// copy's create record.
			killed := mem.Clone()
			_ = s.Close()
			r := openMode(t, killed, false)
			if in, err := r.Info(1); err != nil || !in.Fenced {
				t.Fatalf("after the kill: %+v (%v), want fenced", in, err)
			}
			if _, err := killed.Stat(r.path(1, fenceExt)); err != nil {
				t.Errorf("after the replay the fence marker is gone from disk: %v", err)
			}
			// The fence asked again (a failover retried) must keep it.
			if end, err := r.Fence(ctx, 1); err != nil || end != 12 {
				t.Fatalf("fence again: %d (%v), want 12", end, err)
			}
			var next *vfs.MemFS
			switch second {
			case "clean":
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				next = killed
			case "kill":
				next = killed.Clone()
				_ = r.Close()
			default:
				next = killed.PowerLoss(rand.New(rand.NewPCG(5, 5)))
				_ = r.Close()
			}
			r2 := openMode(t, next, false)
			in, err := r2.Info(1)
			if err != nil || !in.Fenced || in.DurableEnd != 12 {
				t.Fatalf("after a second restart (%s): %+v (%v), want fenced at 12", second, in, err)
			}
			if err := r2.AppendAt(ctx, 1, span(t, 12, 1)); !errors.Is(err, ErrSealed) {
				t.Fatalf("after a second restart (%s) the copy takes an append: %v, want ErrSealed", second, err)
			}
		})
	}
}

// A fenced copy sealed by the failover below what it holds (an exact
// seal that cuts), with a crash at every step of the seal: the restart
// finds it either still fenced and active, whole or cut, or sealed at
// the failover's end with no marker left; never active and taking
// appends (W4, S2).
func TestFencedCopyCutBySealCrashAtEveryStep(t *testing.T) {
	for _, noJournal := range []bool{false, true} {
		for _, kill := range []bool{false, true} {
			t.Run(fmt.Sprintf("journal=%v/kill=%v", !noJournal, kill), func(t *testing.T) {
				run := func(p *crashPoint) int {
					ctx := context.Background()
					mem := vfs.NewMem()
					p.mem = mem
					fs := vfs.NewFaulty(mem, nil)
					cfg := Config{Dir: "/data", FS: fs, NoJournal: noJournal}
					s := openMemCfg(t, cfg)
					mustCreate(t, s, 1, 0)
					all := chain(t, 0, 5, 2, "a")
					appendAll(t, s, 1, all)
					if end, err := s.Fence(ctx, 1); err != nil || end != 10 {
						t.Fatalf("fence: %d (%v), want 10", end, err)
					}
					fs.SetRule(p.rule)
					if _, err := s.SealWith(ctx, 1, SealOptions{Exact: true, End: 6, TruncateAbove: true}); err != nil {
						t.Fatalf("seal at 6: %v", err)
					}
					fs.SetRule(nil)
					crashed, during, ops := p.result()
					_ = s.Close()
					r := openMemCfg(t, Config{Dir: "/data", FS: crashed, NoJournal: noJournal})
					in, err := r.Info(1)
					if err != nil || in.Damage != nil {
						t.Fatalf("crash at %d: %+v, %v", p.at, in, err)
					}
					got := batchesOf(t, r, 1)
					switch {
					case in.Sealed:
						if in.DurableEnd != 6 || !sameBatches(got, all[:3]) {
							t.Fatalf("crash at %d: sealed at %d with %d batches, want 6 and 3", p.at, in.DurableEnd, len(got))
						}
						if _, err := crashed.Stat(r.path(1, fenceExt)); !vfs.IsNotExist(err) {
							t.Fatalf("crash at %d: a sealed copy kept its fence marker: %v", p.at, err)
						}
					case !during:
						t.Fatalf("crash at %d after the seal returned: the copy came back active (%+v)", p.at, in)
					default:
						if !in.Fenced {
							t.Fatalf("crash at %d during the seal: the copy came back active and unfenced", p.at)
						}
						if !sameBatches(got, all) && !sameBatches(got, all[:3]) {
							t.Fatalf("crash at %d: %d batches, want the whole copy or its cut", p.at, len(got))
						}
						if err := r.AppendAt(ctx, 1, span(t, in.End, 1)); !errors.Is(err, ErrSealed) {
							t.Fatalf("crash at %d: an append to the fenced copy: %v, want ErrSealed", p.at, err)
						}
						// The seal retried after the restart goes through.
						sealWith := SealOptions{Exact: true, End: 6, TruncateAbove: true}
						if ft, err := r.SealWith(ctx, 1, sealWith); err != nil || ft.End != 6 {
							t.Fatalf("crash at %d: the retried seal: %+v, %v", p.at, ft, err)
						}
					}
					return ops
				}
				total := run(&crashPoint{at: 1 << 30, kill: kill, rng: rand.New(rand.NewPCG(2, 2))})
				for at := range total + 1 {
					run(&crashPoint{at: at, kill: kill, rng: rand.New(rand.NewPCG(uint64(at), 5))})
				}
			})
		}
	}
}

// A marker whose content is not an end (garbage, empty, torn) still
// means the copy was fenced: the store opens, the copy stays fenced, and
// the marker and the copy's batches are left in place (S4).
func TestFenceMarkerWithBadContentStillFences(t *testing.T) {
	for _, content := range []string{"", "12", "garbage\n", "\x00\x00\x00", "-5\n", "99999999999999999999999\n"} {
		bothModes(t, func(t *testing.T, noJournal bool) {
			ctx := context.Background()
			mem := vfs.NewMem()
			s := openMode(t, mem, noJournal)
			mustCreate(t, s, 1, 0)
			acked := chain(t, 0, 4, 3, "a")
			appendAll(t, s, 1, acked)
			if _, err := s.Fence(ctx, 1); err != nil {
				t.Fatal(err)
			}
			path := s.path(1, fenceExt)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := vfs.WriteFileAtomic(mem, path, []byte(content)); err != nil {
				t.Fatal(err)
			}
			r := openMode(t, mem, noJournal)
			in, err := r.Info(1)
			if err != nil || !in.Fenced || in.DurableEnd != 12 {
				t.Fatalf("marker %q: %+v (%v), want fenced at 12", content, in, err)
			}
			if err := r.AppendAt(ctx, 1, span(t, 12, 1)); !errors.Is(err, ErrSealed) {
				t.Fatalf("marker %q: an append: %v, want ErrSealed", content, err)
			}
			if _, err := mem.Stat(path); err != nil {
				t.Fatalf("marker %q: the marker is gone: %v", content, err)
			}
			if got := batchesOf(t, r, 1); !sameBatches(got, acked) {
				t.Fatalf("marker %q: %d batches, want 4", content, len(got))
			}
		})
	}
}

// A fenced copy deleted, then created again under the same id in the
// same run (no restart between), is a new copy: it takes appends, and a
// power loss does not bring the old fence back onto it.
func TestFenceDeleteRecreateWithoutRestart(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		mustCreate(t, s, 1, 0)
		appendAll(t, s, 1, chain(t, 0, 2, 2, "a"))
		if _, err := s.Fence(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(1); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, 1, 100)
		appendAll(t, s, 1, chain(t, 100, 2, 2, "b"))
		if in, _ := s.Info(1); in.Fenced {
			t.Fatalf("the new copy is born fenced: %+v", in)
		}
		// Fence it and seal it: the second copy's own fence works too.
		lost := mem.PowerLoss(rand.New(rand.NewPCG(4, 4)))
		r := openMode(t, lost, noJournal)
		in, err := r.Info(1)
		if err != nil {
			t.Fatal(err)
		}
		if in.Fenced {
			t.Fatalf("after a power loss the re-created copy came back fenced: %+v", in)
		}
		if err := r.AppendAt(ctx, 1, span(t, in.End, 1)); err != nil {
			t.Fatalf("an append to the re-created copy after a power loss: %v", err)
		}
	})
}

// A fenced copy quarantined, then created again under the same id, is
// not fenced, before or after a restart; the quarantined files keep the
// marker for an operator.
func TestFenceQuarantineRecreate(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		mustCreate(t, s, 1, 0)
		appendAll(t, s, 1, chain(t, 0, 2, 2, "a"))
		if _, err := s.Fence(ctx, 1); err != nil {
			t.Fatal(err)
		}
		qlog, err := s.Quarantine(1)
		if err != nil {
			t.Fatal(err)
		}
		qfence := qlog[:len(qlog)-len(logExt)] + fenceExt
		if _, err := mem.Stat(qfence); err != nil {
			t.Fatalf("the quarantined marker %s: %v", qfence, err)
		}
		mustCreate(t, s, 1, 0)
		s = reopenMode(t, s, mem, noJournal)
		if err := s.AppendAt(ctx, 1, span(t, 0, 1)); err != nil {
			t.Fatalf("an append to the copy created after the quarantine: %v", err)
		}
	})
}

// Many copies fenced at once: one marker each, every one survives a
// power loss, and every marker goes once its copy is sealed (markers are
// bounded by the copies, not by the fences).
func TestManyFencesOneMarkerEach(t *testing.T) {
	bothModes(t, func(t *testing.T, noJournal bool) {
		ctx := context.Background()
		mem := vfs.NewMem()
		s := openMode(t, mem, noJournal)
		const n = 40
		for id := SegmentID(1); id <= n; id++ {
			mustCreate(t, s, id, 0)
			appendAll(t, s, id, chain(t, 0, 1, 2, "a"))
			for range 3 { // repeated fences and latches write nothing more
				if _, err := s.Fence(ctx, id); err != nil {
					t.Fatal(err)
				}
				if err := s.Latch(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
		}
		countMarkers := func(fs vfs.FS) int {
			names, err := fs.ReadDir("/data")
			if err != nil {
				t.Fatal(err)
			}
			c := 0
			for _, name := range names {
				if len(name) > len(fenceExt) && name[len(name)-len(fenceExt):] == fenceExt {
					c++
				}
			}
			return c
		}
		if got := countMarkers(mem); got != n {
			t.Fatalf("%d markers for %d fenced copies", got, n)
		}
		lost := mem.PowerLoss(rand.New(rand.NewPCG(9, 9)))
		r := openMode(t, lost, noJournal)
		for id := SegmentID(1); id <= n; id++ {
			if in, err := r.Info(id); err != nil || !in.Fenced {
				t.Fatalf("copy %d after a power loss: %+v (%v), want fenced", id, in, err)
			}
			sealAt(t, r, id, 2)
		}
		r = reopenMode(t, r, lost, noJournal)
		if got := countMarkers(lost); got != 0 {
			t.Fatalf("%d markers left after every copy was sealed", got)
		}
	})
}
